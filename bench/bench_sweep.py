"""Benchmark: the overhead of ``python -m recipe_audit -m`` (Hydra + MLflow) over a bare loop.

Side A runs, as a user does, in a subprocess::

    python -m recipe_audit -m 'seed=range(N)' progress=false threads=T \\
        tracking.uri=sqlite:///<tmp>/mlflow.db hydra.sweep.dir=<tmp>/sweep

with the end-of-sweep card (printed table, card run, JSON, Markdown, HTML, plots) included, as a
user's sweep ends (``--no-card`` adds ``tracking.card_on_multirun_end=false``, as the first round
of this bench measured)

on a fresh SQLite store (so the one-off ``Creating initial MLflow database tables`` is included).

Side B runs the same N trainings in a bare loop in one Python process (a subprocess of this script,
``--bare``): no Hydra, no MLflow. It builds the default config's dataclasses from ``conf/*.yaml``
with plain ``OmegaConf.load`` (the groups named in ``conf/config.yaml``'s defaults list), calls
``prepare_task`` once and ``train_rerun`` for each seed, scoring the same audit sets.

Both sides are timed wall-clock around the whole subprocess, imports included (their CPU time,
user + system, is printed too: it is less sensitive to other load on a shared machine). The
sides run alternately, B then A, ``--repeat`` times (default 3); the best (minimum) time of each
side is compared, since other load only ever adds time: target A/B <= 1.03, card included. The
calibration accuracy of every seed is checked to be identical on both sides (read back from the MLflow store
for A, outside the timing). ``--freeze-bare`` gives the bare loop the ``gc.freeze()`` the app
does after its set-up, a stricter baseline (the freeze also spares the bare loop's own
collections of torch's and transformers' objects, and its exit-time collection).

``--hydra-only`` adds side H to every round: the same ``python -m recipe_audit -m`` with the
recipe_audit callback taken out (``'~hydra.callbacks.recipe_audit'``): Hydra composes, launches
and writes every job's ``.hydra/`` files and log, the same task function trains and scores each
seed, but nothing reaches MLflow and no card is made. H - B is then Hydra's part (with the app's
own start-up and per-job config checks), A - H the callback's: MLflow (the store, every rerun's
run), the task's rerun logger and the card. ``--together`` runs the sides of a round at the same
time rather than one after another, so that other load on a shared machine falls on them alike;
compare their CPU times then (each side slows the others' wall clock).

Run: ``python bench/bench_sweep.py [--seeds N] [--threads T] [--repeat R] [--hydra-only] [--together]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
TARGET = 1.03  # with the card


# ----------------------------------------------------------------------------------------------
# Side B: the bare loop (runs in its own process, ``--bare``)
# ----------------------------------------------------------------------------------------------


def _group_defaults() -> dict[str, str]:
    """The config-group choices of conf/config.yaml's defaults list, e.g. {"model": "tiny_bert"}."""
    from omegaconf import OmegaConf

    out = {}
    for item in OmegaConf.load(CONF / "config.yaml").defaults:
        if not isinstance(item, str):
            (group, choice), = item.items()
            out[str(group)] = str(choice)
    return out


def _load_group(group: str, choice: str, schema):
    from omegaconf import OmegaConf

    node = OmegaConf.load(CONF / group / f"{choice}.yaml")
    node.pop("defaults", None)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))


def bare(seeds: int, threads: int, freeze: bool = False) -> None:
    import gc

    import torch

    from recipe_audit.config import AuditConfig, ModelConfig, RecipeConfig, TaskConfig
    from recipe_audit.train.loop import prepare_task, select_audits, train_rerun

    if threads:
        torch.set_num_threads(threads)
    choice = _group_defaults()
    model = _load_group("model", choice["model"], ModelConfig)
    task = _load_group("task", choice["task"], TaskConfig)
    recipe = _load_group("recipe", choice["recipe"], RecipeConfig)
    audit = _load_group("audit", choice["audit"], AuditConfig)

    prepared = prepare_task(task, model)
    audit_sets = select_audits(prepared.task, audit)
    extra = {}
    if getattr(audit, "extra_tasks", None):  # task-shift audits, as the app scores them
        from recipe_audit.train.shift import prepare_extra_audits

        extra["extra_audits"] = prepare_extra_audits(audit.extra_tasks, audit.extra_task_options, prepared, model)
    accs, trained = {}, {}
    for seed in range(seeds):
        if freeze and seed < 2:  # as the app does: after set-up, and after the first rerun's imports
            gc.freeze()
        result = train_rerun(seed, model, recipe, prepared, audit_sets,
                             eval_batch_size=audit.eval_batch_size, progress=False, **extra)
        accs[seed] = result.audits[audit.primary].accuracy
        trained[seed] = result.train_seconds
    print("BARE_RESULT " + json.dumps(accs))
    print("BARE_TRAIN " + json.dumps(trained))


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {**os.environ, "HYDRA_FULL_ERROR": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


@dataclass
class Timing:
    wall: float  # seconds, the whole subprocess
    cpu: float  # user + system CPU seconds of the subprocess (and its children)


class _Side:
    """One side's subprocess, started now; :meth:`finish` waits for it and times it (wall clock
    from its start, its own CPU time from ``wait4``, so sides running at once are told apart)."""

    def __init__(self, cmd: list[str], cwd: Path, what: str) -> None:
        self.what = what
        self.out = tempfile.TemporaryFile(mode="w+")
        self.err = tempfile.TemporaryFile(mode="w+")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=self.out, stderr=self.err, text=True)

    def finish(self) -> tuple[Timing, str]:
        _pid, status, usage = os.wait4(self.proc.pid, 0)
        wall = time.perf_counter() - self.t0
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.out.seek(0)
        self.err.seek(0)
        if self.proc.returncode != 0:
            sys.exit(f"{self.what} failed:\n{self.err.read()[-3000:]}")
        return Timing(wall, usage.ru_utime + usage.ru_stime), self.out.read()


def _timed(cmd: list[str], cwd: Path, what: str) -> tuple[Timing, str]:
    return _Side(cmd, cwd, what).finish()


def _bare_cmd(seeds: int, threads: int, freeze: bool) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--bare", "--seeds", str(seeds),
            "--threads", str(threads)] + (["--freeze-bare"] if freeze else [])


def _bare_printed(out: str, what: str) -> dict[int, float]:
    line = [ln for ln in out.splitlines() if ln.startswith(f"{what} ")][-1]
    return {int(k): v for k, v in json.loads(line.split(" ", 1)[1]).items()}


def _bare_accuracies(out: str) -> dict[int, float]:
    return _bare_printed(out, "BARE_RESULT")


def _app_cmd(seeds: int, threads: int, tmp: Path, card: bool = True, callback: bool = True) -> list[str]:
    cmd = [sys.executable, "-m", "recipe_audit", "-m", f"seed=range({seeds})", "progress=false",
           f"threads={threads}", f"hydra.sweep.dir={tmp / 'sweep'}"]
    if not callback:  # side H: Hydra and the task function alone (no MLflow, no card)
        return [*cmd, "~hydra.callbacks.recipe_audit"]
    cmd.append(f"tracking.uri=sqlite:///{tmp / 'mlflow.db'}")
    if not card:
        cmd.append("tracking.card_on_multirun_end=false")
    return cmd


def run_round(seeds: int, threads: int, freeze: bool, card: bool, hydra_only: bool, together: bool
              ) -> tuple[Timing, dict[int, float], Timing | None, Timing, dict[int, float]]:
    """One round: B, then H (with ``hydra_only``), then A; with ``together`` all at once.
    Returns B's timing and accuracies, H's timing (None without it), A's timing and accuracies."""
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp_a, \
            tempfile.TemporaryDirectory(prefix="bench_sweep_h_") as tmp_h:
        sides = [("B", _bare_cmd(seeds, threads, freeze), REPO, "the bare loop")]
        if hydra_only:
            sides.append(("H", _app_cmd(seeds, threads, Path(tmp_h), callback=False), Path(tmp_h),
                          "python -m recipe_audit without the callback"))
        sides.append(("A", _app_cmd(seeds, threads, Path(tmp_a), card), Path(tmp_a), "python -m recipe_audit"))
        done: dict[str, tuple[Timing, str]] = {}
        if together:
            started = [(name, _Side(cmd, cwd, what)) for name, cmd, cwd, what in sides]
            for name, side in started:
                done[name] = side.finish()
        else:
            for name, cmd, cwd, what in sides:
                done[name] = _timed(cmd, cwd, what)
        accs_a, trained_a = _app_accuracies(f"sqlite:///{Path(tmp_a) / 'mlflow.db'}")
    TRAINED["A"].append(sum(trained_a.values()))
    TRAINED["B"].append(sum(_bare_printed(done["B"][1], "BARE_TRAIN").values()))
    return (done["B"][0], _bare_accuracies(done["B"][1]), done["H"][0] if hydra_only else None,
            done["A"][0], accs_a)


#: per side, per round: the seconds its reruns spent training (each rerun's ``train_seconds``:
#: building the model and fitting it, timed inside ``train_rerun``), to tell a slower training
#: from the work around it
TRAINED: dict[str, list[float]] = {"A": [], "B": []}


def _app_accuracies(uri: str) -> tuple[dict[int, float], dict[int, float]]:
    """The calibration accuracy and the ``train_seconds`` of every FINISHED rerun in the store
    (after the timing)."""
    from mlflow.tracking import MlflowClient

    from recipe_audit import keys

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("recipe_audit")
    out, trained = {}, {}
    for r in client.search_runs([exp.experiment_id], max_results=10000):
        if r.data.tags.get(keys.TAG_KIND) == keys.KIND_RERUN and r.info.status == "FINISHED":
            out[int(r.data.tags[keys.TAG_SEED])] = r.data.metrics[keys.accuracy_key(keys.DEFAULT_AUDIT)]
            trained[int(r.data.tags[keys.TAG_SEED])] = r.data.metrics[keys.METRIC_TRAIN_SECONDS]
    return out, trained


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=25, help="reruns per side (default 25)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on both sides (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="alternating B, A rounds; best of each (default 3)")
    ap.add_argument("--freeze-bare", action="store_true",
                    help="give the bare loop the app's gc.freeze() after set-up too (a stricter baseline)")
    ap.add_argument("--no-card", action="store_true", help="leave the end-of-sweep card out of side A")
    ap.add_argument("--hydra-only", action="store_true",
                    help="add side H: the same sweep without the recipe_audit callback (Hydra and the task alone)")
    ap.add_argument("--together", action="store_true",
                    help="run a round's sides at the same time (compare CPU times on a loaded machine)")
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare:
        bare(args.seeds, args.threads, args.freeze_bare)
        return

    n = args.seeds
    order = "B, H, A" if args.hydra_only else "B then A"
    print(f"bench_sweep: {n} seeds of the default recipe, threads={args.threads}, "
          f"{args.repeat} {'rounds, sides at the same time' if args.together else 'alternating rounds'} "
          f"({order}), best of each"
          + (", bare loop with gc.freeze()" if args.freeze_bare else "")
          + (", side A without the card" if args.no_card else ", side A with the end-of-sweep card"))
    print(f"  load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    runs_a: list[Timing] = []
    runs_b: list[Timing] = []
    runs_h: list[Timing] = []
    accs_a = accs_b = None
    for i in range(args.repeat):
        tb, accs_b, th, ta, accs_a = run_round(n, args.threads, args.freeze_bare, not args.no_card,
                                               args.hydra_only, args.together)
        runs_b.append(tb)
        print(f"  round {i + 1}: B bare loop               {tb.wall:7.2f} s wall ({tb.wall / n:.3f} s/rerun), "
              f"{tb.cpu:7.2f} s CPU", flush=True)
        if th is not None:
            runs_h.append(th)
            print(f"  round {i + 1}: H without the callback    {th.wall:7.2f} s wall ({th.wall / n:.3f} s/rerun), "
                  f"{th.cpu:7.2f} s CPU   H/B {th.wall / tb.wall:.3f}, CPU {th.cpu / tb.cpu:.3f}", flush=True)
        runs_a.append(ta)
        print(f"  round {i + 1}: A python -m recipe_audit  {ta.wall:7.2f} s wall ({ta.wall / n:.3f} s/rerun), "
              f"{ta.cpu:7.2f} s CPU   A/B {ta.wall / tb.wall:.3f}, CPU {ta.cpu / tb.cpu:.3f}", flush=True)
        tr_a, tr_b = TRAINED["A"][-1], TRAINED["B"][-1]
        print(f"  round {i + 1}: training (train_seconds, summed) A {tr_a:.2f} s, B {tr_b:.2f} s, A/B "
              f"{tr_a / tr_b:.3f}; outside it A {ta.wall - tr_a:.2f} s, B {tb.wall - tr_b:.2f} s", flush=True)
    print(f"  load average after: {os.getloadavg()[0]:.2f}")

    a, b = min(r.wall for r in runs_a), min(r.wall for r in runs_b)
    ca, cb = min(r.cpu for r in runs_a), min(r.cpu for r in runs_b)
    ratio = a / b
    print(f"A (Hydra + MLflow{'' if args.no_card else ' + card'}, subprocess, imports included): "
          f"{a:7.2f} s  {a / n:.3f} s/rerun")
    print(f"B (bare loop, one process, imports included):     {b:7.2f} s  {b / n:.3f} s/rerun")
    print(f"overhead A - B: {a - b:.2f} s in all, {(a - b) / n * 1000:.0f} ms/rerun if all paid per rerun")
    print(f"CPU time (user + sys, less sensitive to other load): A {ca:.2f} s, B {cb:.2f} s, "
          f"A/B = {ca / cb:.3f}")
    if runs_h:
        h, ch = min(r.wall for r in runs_h), min(r.cpu for r in runs_h)
        print(f"H (Hydra and the task without the callback): {h:7.2f} s wall, {ch:.2f} s CPU")
        print(f"  CPU, best of each: Hydra's part H - B {ch - cb:.2f} s ({(ch - cb) / n * 1000:.0f} ms/rerun if all "
              f"per rerun), the callback's A - H {ca - ch:.2f} s ({(ca - ch) / n * 1000:.0f} ms/rerun)")
    if args.together:  # each side slowed the others: their wall clocks are not the user's
        print(f"ratio A/B (wall, best of {args.repeat}) = {ratio:.3f}; the sides ran at the same time, so this is "
              f"no measurement against the target (<= {TARGET:.2f}): compare the CPU times")
    else:
        print(f"ratio A/B (wall, best of {args.repeat}) = {ratio:.3f}  target <= {TARGET:.2f}: "
              f"{'PASS' if ratio <= TARGET else 'FAIL'}")
    same = accs_a == accs_b and sorted(accs_a) == list(range(n))
    print(f"calibration accuracies per seed: {'identical' if same else 'DIFFER'} "
          f"({len(accs_a)} seeds A, {len(accs_b)} seeds B)")
    if not same:
        for s in sorted(set(accs_a) | set(accs_b)):
            if accs_a.get(s) != accs_b.get(s):
                print(f"  seed {s}: A {accs_a.get(s)}  B {accs_b.get(s)}")
    sys.exit(0 if (args.together or ratio <= TARGET) and same else 1)


if __name__ == "__main__":
    main()
