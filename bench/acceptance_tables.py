"""Regenerate the numbers and tables of the acceptance page ("What the audit found") from a sweep.

    python bench/acceptance_tables.py --run                 # runs the default acceptance sweep, then prints
    python bench/acceptance_tables.py --run --kernels avx2  # the same under another CPU's float kernels
    python bench/acceptance_tables.py --run --threads 2     # ... with 2 torch threads per job
    python bench/acceptance_tables.py --sweep-dir DIR       # reads DIR/acceptance_card/ of a finished sweep
    python bench/acceptance_tables.py --compare DIR DIR ... # verdicts and gates of several sweeps, side by side

``--run`` runs ``python -m recipe_audit -m experiment=acceptance`` (plus ``--overrides``) in a fresh
temporary store and sweep directory, as the docs' first command does, and times it; the sweep
directory keeps the environment line in ``bench_environment.json`` for ``--compare``. The tables
are printed as the docs show them (Markdown), from the sweep's ``acceptance_card.json`` and its
bases' ``base.json`` only: every number of that section of the docs comes from this script's output.

The sweep gives each seed its own base model, so a cell's verdict carries the luck of its base;
the table *decided over seeds* is what the page concludes, by a stated test
(:mod:`recipe_audit.stats.acceptance.seeds`): per defense and gate, exact one-sided binomial tests
of "passes on at most half of the seeds" and "fails on at most half", Holm-adjusted over all of
them at family-wise error 0.1; N/A and missing count as neither a pass nor a fail, a gate the seeds
do not decide is ``undecided`` and counts as missing evidence in the card's verdict rule.
``--compare`` says whether several sweeps decide the same.

``--kernels`` emulates the float kernels of other CPU kinds on this one (``KERNELS``: ``avx2`` is
torch's vectorised kernels at AVX2 with MKL's compatible matrix products, ``default`` torch's
plain C++ kernels); ``--threads`` is the app's ``threads`` option (torch threads per job, 1 by
default as in ``experiment=acceptance``). ``bench/acceptance_base.py`` uses the same kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _n(x: float | None, digits: int = 3, sign: bool = True) -> str:
    """A number as the docs write it: fixed digits, a true minus sign, ``+`` on request."""
    if x is None:
        return "n/a"
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", "\u2212")


def _ci(pair) -> str:
    return f"[{_n(pair[0])}, {_n(pair[1])}]"


def _rho(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if x < 10 else f"{x:.1f}"


def cell_row(cell: dict) -> str:
    d = cell["diagnostics"]
    a, b, c, g = d["a"], d["b"], d["c"], d["d"]
    verdict = cell["verdict"]
    shown = f"**{verdict}**" if verdict == "full-card pass" else verdict
    col_a = f"{_n(a.get('delta_gap'))} {_ci(a['ci_delta_gap'])}" if a.get("ci_delta_gap") else "n/a"
    col_dep = f"{_n(a.get('delta_deploy'))} {_ci(a['ci_delta_deploy'])}" if a.get("ci_delta_deploy") else "n/a"
    col_b = (f"{_n(b.get('delta_gap'))}; {_n(b.get('bound_paired'))} / {_n(b.get('bound_indep'))}"
             if b.get("delta_gap") is not None else "n/a")
    col_c = (f"{_rho(c.get('rho_AT'))} ({_n(c.get('alpha_T'))}, {_n(c.get('alpha_A'))}): "
             f"{c.get('signed_class')} vs {c.get('claimed_class')}" if c.get("rho_AT") is not None else "n/a")
    col_d = (f"{_n(g.get('gamma_P'), sign=False)}, {_n(g.get('gamma_X'), sign=False)}"
             if g.get("gamma_P") is not None else "n/a")
    statuses = " ".join(d[k]["status"] for k in "abcd")
    return f"| {cell['label']} | {shown} | {col_a} | {col_dep} | {col_b} | {col_c} | {col_d} | {statuses} |"


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it, with its family and model numbers (a virtual
    machine's name may be as short as "AMD EPYC", whatever its generation); the platform's
    processor string elsewhere."""
    try:
        fields: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the first processor is enough
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        if "model name" in fields:
            numbers = ", ".join(f"{k} {fields[k]}" for k in ("cpu family", "model") if k in fields)
            return fields["model name"] + (f" ({numbers})" if numbers else "")
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


#: Float kernels of other CPU kinds, emulated on this one by environment variables read when torch
#: (and MKL) load: ``native`` is what torch picks here. ``avx2`` and ``default`` choose torch's
#: kernels (and ``avx2`` MKL's code path) themselves, which ``experiment.kernels=reproducible``
#: overrides: they apply to ``experiment.kernels=native`` only. ``other-cpu`` shows the libraries a
#: CPU with fewer vector instructions instead (MKL up to SSE4.2, oneDNN up to SSE4.1, glibc's math
#: without AVX, AVX2 and FMA): it moves the native kernels' numbers, and must not move the
#: reproducible ones.
KERNELS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "other-cpu": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41",
                  "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2,-FMA,-AVX"},
}
ENV_SHOWN = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "GLIBC_TUNABLES")


def kernel_env(kernels: str, base: dict | None = None) -> dict:
    """The environment (``base``, default this process's) with ``kernels``' variables set."""
    return {**(os.environ if base is None else base), **KERNELS[kernels]}


def environment(threads: str, exp_kernels: str = "reproducible") -> str:
    """Where the sweep ran: CPU model and count, torch and the CPU kernels this machine gives it
    (with the variables set for ``--kernels``), the experiment's ``experiment.kernels``, the
    reruns' threads."""
    import torch

    kernels = ", ".join(f"{k}={os.environ[k]}" for k in ENV_SHOWN if k in os.environ)
    return (f"Environment: {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
            f"(CPU kernels {torch.backends.cpu.get_cpu_capability()}{'; ' + kernels if kernels else ''}), "
            f"experiment.kernels={exp_kernels}, threads={threads} per job, Python {platform.python_version()}.")


ORDER = {"l2sp": 0, "attack_proj": 1, "consistency": 2}  # the page's order of the defenses


def _defense(cell: dict) -> str:
    return cell["label"].rsplit("_s", 1)[0]


def _ordered(card: dict) -> list[dict]:
    return sorted(card["cells"], key=lambda c: (ORDER.get(_defense(c), 9), _defense(c), c["label"]))


def defense_summary(card: dict) -> dict[str, dict]:
    """Per defense: its cells' verdicts (in seed order) and, per gate, on how many of its cells it passes."""
    out: dict[str, dict] = {}
    for cell in _ordered(card):
        row = out.setdefault(_defense(cell), {"verdicts": [], "n": 0, "pass": dict.fromkeys("abcd", 0)})
        row["verdicts"].append(cell["verdict"])
        row["n"] += 1
        for g in "abcd":
            row["pass"][g] += cell["diagnostics"][g]["status"] == "pass"
    return out


def majority(summary: dict[str, dict]) -> dict[str, str]:
    """Per defense, the gates it passes on a majority of its cells (seeds), e.g. ``"a b c"``."""
    return {d: " ".join(g for g in "abcd" if 2 * r["pass"][g] > r["n"]) or "none" for d, r in summary.items()}


def seed_statuses(card: dict) -> dict[str, list[dict[str, str]]]:
    """Per defense, each of its cells' (seeds') gate statuses, in seed order."""
    out: dict[str, list[dict[str, str]]] = {}
    for cell in _ordered(card):
        out.setdefault(_defense(cell), []).append({g: cell["diagnostics"][g]["status"] for g in "abcd"})
    return out


def decided(card: dict):
    """Each defense's gates decided over its seeds by the stated test, and the verdicts they give
    (:func:`recipe_audit.stats.acceptance.seeds.decide_over_seeds`)."""
    from recipe_audit.stats.acceptance.seeds import decide_over_seeds

    return decide_over_seeds(seed_statuses(card))


def _gate_cell(g) -> str:
    """A gate decided over seeds as the table shows it: ``undecided (5 pass; p = 0.031)``."""
    counts = [f"{n} {name}" for n, name in ((g.passed, "pass"), (g.failed, "fail"), (g.na, "n/a"),
                                            (g.caveat, "caveat"), (g.missing, "missing")) if n]
    p = "" if g.decided == "missing" else f"; p = {min(g.p_pass, g.p_fail):.2g}"
    return f"{g.decided} ({', '.join(counts)}{p})"


def decided_table(card: dict) -> str:
    """The table decided over seeds: per defense, each gate's decision and the verdict they give."""
    out = ["| defense | seeds | (a) | (b) | (c) | (d) | verdict decided over seeds |", "|---|---|---|---|---|---|---|"]
    dec = decided(card)
    for d, verdict in dec.verdicts.items():
        gates = dec.of(d)
        out.append(f"| {d} | {gates['a'].seeds} | " + " | ".join(_gate_cell(gates[g]) for g in "abcd")
                   + f" | **{verdict}** |")
    return "\n".join(out)


def decided_heading(card: dict) -> str:
    """The sentence above the table decided over seeds: the test, its error rate, the seeds it needs."""
    dec = decided(card)
    return (f"Decided over seeds by a stated test: per defense and gate, exact one-sided binomial tests of "
            f"\"passes on at most half of the seeds\" and \"fails on at most half\", Holm-adjusted over all "
            f"{dec.hypotheses} tests at family-wise error {dec.alpha:g} (the chance that any gate of any defense is "
            f"decided wrongly is at most {dec.alpha:g}); N/A and missing count as neither, and an "
            f"undecided gate counts as missing evidence in the card's verdict rule. A gate that agrees on every "
            f"seed is decided from {dec.seeds_to_decide} seeds on. In brackets: the seeds' statuses and the "
            f"smaller p-value:")


def summary_table(card: dict) -> str:
    """The per-defense table: verdicts over seeds and, per gate, cells passing."""
    out = ["| defense | verdicts (by seed) | (a) | (b) | (c) | (d) | gates passed on most seeds |",
           "|---|---|---|---|---|---|---|"]
    summary = defense_summary(card)
    most = majority(summary)
    for d, r in summary.items():
        out.append(f"| {d} | {', '.join(r['verdicts'])} | "
                   + " | ".join(f"{r['pass'][g]} of {r['n']}" for g in "abcd") + f" | {most[d]} |")
    return "\n".join(out)


def base_line(base: dict) -> str:
    """One base model: its seed, held-out and fresh mcq accuracy (eval / deploy), final loss and time."""
    acc = base.get("accuracy", {})

    def pair(split: str) -> str:
        return f"{acc.get(f'mcq/{split}/eval', float('nan')):.3f} / {acc.get(f'mcq/{split}/deploy', float('nan')):.3f}"

    seed = (base.get("config") or {}).get("base", {}).get("seed", "?")
    return (f"| {seed} | {pair('heldout')} | {pair('fresh')} | {base.get('final_loss', float('nan')):.3f} | "
            f"{base.get('train_seconds', float('nan')):.0f} |")


def tables(card: dict, bases: list[dict], wall_s: float | None = None, env: str | None = None) -> str:
    out = []
    if env:
        out.append(env)
    if wall_s is not None:
        minutes, seconds = divmod(round(wall_s), 60)
        out.append(f"Wall time of the sweep: {minutes} min {seconds} s (base models "
                   f"{sum(b.get('train_seconds', float('nan')) for b in bases):.0f} s).")
    out.append("")
    out.append("| base seed | held-out mcq eval / deploy | fresh mcq eval / deploy | final loss | training s |")
    out.append("|---|---|---|---|---|")
    out.extend(base_line(b) for b in bases)
    out.append("")
    seen, gaps, cross = set(), [], []
    for cell in sorted(card["cells"], key=lambda c: c["baseline"]):
        if cell["baseline"] in seen:
            continue
        seen.add(cell["baseline"])
        pg = cell["primary_baseline_gap"]
        gaps.append(f"{cell['baseline']} {_n(pg['gap'], sign=False)} (SE {_n(pg['se'], sign=False)}, "
                    f"eval {pg['rate_eval']:.2f}, deploy {pg['rate_deploy']:.2f})")
        xb = cell["diagnostics"]["d"].get("cross_baseline") or {}
        if xb:
            cross.append(f"{cell['baseline']} {_n(xb.get('gap'), sign=False)}")
    out.append("Baseline (`none`) held-out gap: " + "; ".join(gaps) + ".")
    if cross:
        out.append("Baseline cross-task (`syco`) gap: " + "; ".join(cross) + ".")
    out.append("")
    out.append("| cell | verdict | (a) Δgap [95 % cluster CI] | Δdeploy [95 %] | (b) fresh Δgap; +2·SE_paired / "
               "+2·SE_indep | (c) ρ_AT (α_T, α_A): signed vs claimed | (d) Γ_P, Γ_X | a b c d |")
    out.append("|---|---|---|---|---|---|---|---|")
    for cell in _ordered(card):
        out.append(cell_row(cell))
    out.append("")
    out.append("Per defense (cells passing each gate, of its seeds):")
    out.append("")
    out.append(summary_table(card))
    out.append("")
    out.append(decided_heading(card))
    out.append("")
    out.append(decided_table(card))
    out.append("")
    pf = card.get("progressive_filter") or []
    out.append("Progressive filter: " + ", ".join(f"{f['filter']} {f['n_pass']} of {f['n_with_result']}"
                                                  for f in pf) + ".")
    ts = card.get("threshold_sensitivity") or []
    changed = [t for t in ts if t.get("verdict_changes")]
    moved = [t for t in ts if t.get("status") != t.get("status_variant")]
    out.append(f"Threshold sensitivity: {len(changed)} verdict change(s); {len(moved)} gate status change(s)"
               + (": " + ", ".join(f"{t['cell']} ({t['gate']}, {t['variant']}: {t['status']} → "
                                   f"{t['status_variant']})" for t in moved) if moved else "") + ".")
    return "\n".join(out)


MARK = {"pass": "+", "fail": "\u2212"}  # a gate's status in one character (else "?" for a cell, "~" decided)
DECIDED_MARK = {**MARK, "missing": "?"}  # a gate decided over seeds (else "~": undecided)


def _short(cell: dict) -> str:
    """A cell's verdict and its four gate statuses in one word each: ``near miss (+ + + −)``."""
    return f"{cell['verdict']} ({' '.join(MARK.get(cell['diagnostics'][g]['status'], '?') for g in 'abcd')})"


def compare(runs: list[tuple[str, dict]]) -> str:
    """Several sweeps side by side: each cell's verdict and gates (a b c d: + pass, − fail, ? other),
    the cells whose verdict differs from the first run's, and the gates each defense passes on most seeds."""
    names = [name for name, _ in runs]
    cells = {name: {c["label"]: c for c in card["cells"]} for name, card in runs}
    first = runs[0][1]
    out = ["| cell | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    differ = []
    for cell in _ordered(first):
        label = cell["label"]
        row = [_short(cells[n][label]) if label in cells[n] else "absent" for n in names]
        if any(cells[n].get(label, {}).get("verdict") != cell["verdict"] for n in names[1:]):
            differ.append(label)
        out.append(f"| {label} | " + " | ".join(row) + " |")
    out.append("")
    out.append(f"Verdicts that differ from {names[0]}'s: {len(differ)} of {len(first['cells'])}"
               + (f" ({', '.join(differ)})" if differ else "") + ".")
    out.append("")
    out.append("| defense | " + " | ".join(f"gates passed on most seeds, {n}" for n in names) + " |")
    out.append("|---|" + "---|" * len(names))
    most = [majority(defense_summary(card)) for _, card in runs]
    for d in most[0]:
        out.append(f"| {d} | " + " | ".join(m.get(d, "absent") for m in most) + " |")
    stable = all(m == most[0] for m in most)
    out.append("")
    out.append(f"Gates passed on most seeds: {'the same' if stable else 'not the same'} in every run.")
    out.append("")
    out.append("| defense | " + " | ".join(f"decided over seeds, {n}" for n in names) + " |")
    out.append("|---|" + "---|" * len(names))
    dec = [decided(card) for _, card in runs]

    def short(x, d: str) -> str:
        if d not in x.verdicts:
            return "absent"
        gates = x.of(d)
        return f"{x.verdicts[d]} ({' '.join(DECIDED_MARK.get(gates[g].decided, '~') for g in 'abcd')})"

    for d in dec[0].verdicts:
        out.append(f"| {d} | " + " | ".join(short(x, d) for x in dec) + " |")
    same = all(short(x, d) == short(dec[0], d) for x in dec for d in {*x.verdicts, *dec[0].verdicts})
    out.append("")
    out.append(f"Decided over seeds (gates and verdicts; + pass, \u2212 fail, ~ undecided, ? missing): "
               f"{'the same' if same else 'not the same'} in every run.")
    base = card_numbers(first)
    equal = []
    for name, card in runs[1:]:
        other = card_numbers(card)
        equal.append(f"{name} {sum(other.get(k) == v for k, v in base.items())} of {len(base)}")
    out.append("")
    out.append(f"Numbers of the cards' cells equal to {names[0]}'s, to the last bit: {'; '.join(equal)}.")
    return "\n".join(out)


def card_numbers(card: dict) -> dict[str, float]:
    """Every number of the card's cells (statistics, intervals, rates, α, Γ, ...) by its path."""
    out: dict[str, float] = {}

    def walk(x, path: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")
        elif isinstance(x, float):
            out[path] = x

    for cell in card["cells"]:
        walk(cell, cell["label"])
    return out


def _load(sweep_dir: Path) -> tuple[dict, list[dict], dict]:
    """A sweep's card, its base models' summaries (in base-seed order) and the bench environment
    (empty when absent)."""
    folder = sweep_dir / "acceptance_card"
    if not (folder / "acceptance_card.json").is_file():
        raise SystemExit(f"acceptance_tables: no acceptance card in {folder}")
    card = json.loads((folder / "acceptance_card.json").read_text())
    files = sorted(folder.glob("bases/*/base.json")) or sorted(folder.glob("base.json"))  # base.json: one base, before 2026-12-02
    bases = sorted((json.loads(f.read_text()) for f in files),
                   key=lambda b: (b.get("config") or {}).get("base", {}).get("seed", 0))
    env_file = sweep_dir / "bench_environment.json"
    env = json.loads(env_file.read_text()) if env_file.is_file() else {}
    return card, bases, env


def _override(overrides: list[str], key: str, default: str) -> str:
    """The value the last ``key=value`` of ``overrides`` gives ``key`` (Hydra's last one wins), else ``default``."""
    return next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith(f"{key}=")), default)


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", action="store_true", help="run the default acceptance sweep first")
    src.add_argument("--sweep-dir", type=Path, help="a finished acceptance sweep's directory")
    src.add_argument("--compare", type=Path, nargs="+", metavar="DIR",
                     help="finished sweeps' directories: their verdicts side by side")
    ap.add_argument("--kernels", default="native", choices=sorted(KERNELS),
                    help="float kernels for --run: native, or another CPU kind's emulated (default native)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per job for --run (default 1)")
    ap.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides for --run")
    a = ap.parse_args(argv)
    if (a.kernels != "native" or a.threads is not None or a.overrides) and not a.run:
        raise SystemExit("acceptance_tables: --kernels, --threads and --overrides apply to --run only.")
    if a.threads is not None and a.threads < 1:
        raise SystemExit(f"acceptance_tables: --threads must be a whole number of at least 1, not {a.threads}.")
    if a.compare:
        runs = []
        for i, d in enumerate(a.compare, 1):
            card, _, env = _load(d)
            runs.append((f"run {i}", card))
            print(f"run {i}: {d}; {env.get('command', 'command not recorded')}; commit {env.get('commit', '?')}; "
                  f"{env.get('environment', 'environment not recorded')}")
        print()
        print(compare(runs))
        return
    wall = None
    overrides = [*a.overrides, *([f"threads={a.threads}"] if a.threads is not None else [])]
    threads, exp_kernels = _override(overrides, "threads", "1"), _override(overrides, "experiment.kernels", "reproducible")
    if a.run:
        os.environ.update(KERNELS[a.kernels])  # before torch loads here, and inherited by the sweep
        tmp = Path(tempfile.mkdtemp(prefix="acceptance_tables_"))
        sweep_dir = tmp / "sweep"
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"}
        cmd = [sys.executable, "-m", "recipe_audit", "-m", "experiment=acceptance", f"hydra.sweep.dir={sweep_dir}",
               f"experiment.cache_dir={tmp / 'cache'}", *overrides]
        print(f"acceptance_tables: sweep in {tmp}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        (tmp / "sweep.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
        if proc.returncode != 0:
            raise SystemExit(f"acceptance_tables: the sweep failed:\n{proc.stderr[-3000:]}")
        command = "python bench/acceptance_tables.py " + " ".join(argv if argv is not None else sys.argv[1:])
        (sweep_dir / "bench_environment.json").write_text(json.dumps(
            {"environment": environment(threads, exp_kernels), "command": command, "commit": _commit(),
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_s": wall}, indent=1) + "\n")
    else:
        sweep_dir = a.sweep_dir
    card, bases, recorded = _load(sweep_dir)
    env_line = environment(threads, exp_kernels) if a.run else recorded.get("environment")
    print(tables(card, bases, wall if a.run else recorded.get("wall_s"), env_line))


if __name__ == "__main__":
    main()
