"""Bad input to ``recipe-audit bound`` and ``recipe-audit card``: one sentence, a non-zero exit
(2 for input errors), at once, never a traceback, a hang or a silent exit 0.

One table: the arguments, the exit status and a fragment of the sentence. ``card`` cases run
against one small synthetic store (a sweep of 30 reruns scored on two audit sets, an empty
experiment, runs of the user's own code); ``{uri}`` and the other braces are filled in below.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time

import pytest
from helpers import procs
from helpers.cli import run_cli
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.store import synthetic_sweep

from recipe_audit import keys

B = ["bound", "-k", "1", "-n", "5"]  # a valid bound, varied one option at a time below
C = ["card", "--experiment-name", "exp", "--tracking-uri", "{uri}"]

BOUND = [
    (["bound"], 2, "the following arguments are required: --failures/-k, --reruns/-n"),
    (["bound", "-k", "1"], 2, "required: --reruns/-n"),
    (["bound", "-n", "5"], 2, "required: --failures/-k"),
    (["bound", "-k", "x", "-n", "5"], 2, "'x' is not a whole number"),
    (["bound", "-k", "1.5", "-n", "5"], 2, "'1.5' is not a whole number"),
    (["bound", "-k", "1e3", "-n", "5000"], 2, "'1e3' is not a whole number"),
    (["bound", "-k", "", "-n", "5"], 2, "'' is not a whole number"),
    (["bound", "-k", "-1", "-n", "5"], 2, "'-1' must lie between 0 and 10^15"),
    (["bound", "-k", "0x10", "-n", "50"], 2, "'0x10' is not a whole number"),
    (["bound", "-k", "nan", "-n", "5"], 2, "'nan' is not a whole number"),
    (["bound", "-k", "9" * 5000, "-n", "5"], 2, "is not a whole number"),  # beyond int()'s digit limit
    (["bound", "-k", "7", "-n", "5"], 2, "failures k (7) cannot exceed reruns n (5)"),
    (["bound", "-k", "1000000000000000", "-n", "999999999999999"], 2, "cannot exceed reruns n"),
    (["bound", "-k", "0", "-n", "0"], 2, "'0' must lie between 1 and 10^15"),
    (["bound", "-k", "0", "-n", "-5"], 2, "'-5' must lie between 1 and 10^15"),
    (["bound", "-k", "0", "-n", "10000000000000000000"], 2, "must lie between 1 and 10^15"),
    (["bound", "-k", "0", "-n", "1000000000000001"], 2, "must lie between 1 and 10^15"),
    (["bound", "-k", "0", "-n", "9" * 60], 2, "must lie between 1 and 10^15"),
    (["bound", "-k", "0", "-n", "2.0"], 2, "'2.0' is not a whole number"),
    (["bound", "-k", "0", "-n", "inf"], 2, "'inf' is not a whole number"),
    (["bound", "-k", "0", "-n", "five"], 2, "'five' is not a whole number"),
    (["bound", "-k", "0", "-n", " "], 2, "is not a whole number"),
    (B + ["--eps", "0"], 2, "'0' must lie strictly between 0 and 1"),
    (B + ["--eps", "1"], 2, "'1' must lie strictly between 0 and 1"),
    (B + ["--eps", "1.5"], 2, "must lie strictly between 0 and 1"),
    (B + ["--eps", "-0.1"], 2, "must lie strictly between 0 and 1"),
    (B + ["--eps", "nan"], 2, "'nan' is not a finite number"),
    (B + ["--eps", "inf"], 2, "'inf' is not a finite number"),
    (B + ["--eps", "-inf"], 2, "argument --eps: expected one argument"),  # argparse: an option
    (B + ["--eps=-inf"], 2, "'-inf' is not a finite number"),
    (B + ["--eps=-0.5"], 2, "'-0.5' must lie strictly between 0 and 1"),
    (B + ["--eps", "abc"], 2, "'abc' is not a number"),
    (B + ["--eps", ""], 2, "'' is not a number"),
    (B + ["--eps", "1e-400"], 2, "'1e-400' must lie strictly between 0 and 1"),  # rounds to 0.0
    (B + ["--eps", "0.99999999999999999"], 2, "must lie strictly between 0 and 1"),  # rounds to 1.0
    (B + ["--eps", "1e-320"], 2, "eps = 1e-320 is too small to certify with at most 10^15 reruns"),
    (B + ["--eps", "1e-16"], 2, "the sample floor at delta = 0.1 is 2.3e+16 reruns"),
    (B + ["--eps", "5e-324"], 2, "too small to certify"),
    (B + ["--eps"], 2, "argument --eps: expected one argument"),
    (B + ["--delta", "0"], 2, "'0' must lie strictly between 0 and 0.5"),
    (B + ["--delta", "0.5"], 2, "'0.5' must lie strictly between 0 and 0.5 (one-sided bounds need delta < 0.5)"),
    (B + ["--delta", "0.9"], 2, "'0.9' must lie strictly between 0 and 0.5"),
    (B + ["--delta", "0.99"], 2, "must lie strictly between 0 and 0.5"),
    (B + ["--delta", "1"], 2, "must lie strictly between 0 and 0.5"),
    (B + ["--delta", "1.5"], 2, "must lie strictly between 0 and 0.5"),
    (B + ["--delta", "-0.1"], 2, "must lie strictly between 0 and 0.5"),
    (B + ["--delta", "0.50000000000000001"], 2, "must lie strictly between 0 and 0.5"),  # rounds to 0.5
    (B + ["--delta", "nan"], 2, "'nan' is not a finite number"),
    (B + ["--delta", "inf"], 2, "'inf' is not a finite number"),
    (B + ["--delta", "ten"], 2, "'ten' is not a number"),
    (B + ["--delta", "1e-400"], 2, "must lie strictly between 0 and 0.5"),
    (B + ["--nope"], 2, "unrecognized arguments: --nope"),
    (B + ["extra"], 2, "unrecognized arguments: extra"),
    (B + ["--json=yes"], 2, "ignored explicit argument 'yes'"),
    (B + ["--family-size", "0"], 2, "argument --family-size: '0' must lie between 1 and 10^15"),
    (B + ["--family-size", "-2"], 2, "'-2' must lie between 1 and 10^15"),
    (B + ["--family-size", "2.5"], 2, "'2.5' is not a whole number"),
    (B + ["--family-size", "ten"], 2, "'ten' is not a whole number"),
    (B + ["--family-size", "1" + "0" * 16], 2, "must lie between 1 and 10^15"),
    (B + ["--family-size"], 2, "argument --family-size: expected one argument"),
    (B + ["--family-size", "3", "--anytime"], 2, "Give --family-size or --anytime, not both"),
    (B + ["--anytime=yes"], 2, "ignored explicit argument 'yes'"),
    (["bound", "-k", "0", "-n", "5", "--anytime", "--eps", "1e-300"], 2, "too small to certify"),
    (["bound", "-k", "0", "-n", "5", "--family-size", "10", "--eps", "1e-15"], 2, "too small to certify"),
    ([], 2, "the following arguments are required: command"),
    (["nope"], 2, "invalid choice: 'nope'"),
    (["--eps", "0.1"], 2, "invalid choice: '0.1'"),
]

CARD = [
    (["card"], 2, "the following arguments are required: --experiment-name"),
    (["card", "--experiment-name", "", "--tracking-uri", "{uri}"], 2, "--experiment-name must name an experiment"),
    (["card", "--experiment-name", "nope", "--tracking-uri", "{uri}"], 2, "No experiment named 'nope'"),
    (["card", "--experiment-name", "empty", "--tracking-uri", "{uri}"], 2, "has no runs"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "foo://bar"], 2,
     "The tracking URI foo://bar has the scheme 'foo', which MLflow cannot read"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "s3://bucket/x"], 2, "has the scheme 's3'"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "sqlite:///{tmp}/none.db"], 2,
     "There is no tracking store at sqlite:///"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "sqlite:///{tmp}"], 2, "is a directory"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "sqlite://relative.db"], 2,
     "A SQLite tracking URI is sqlite:///PATH"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "sqlite:///{file}"], 2,
     "Cannot read MLflow's tables"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "http://127.0.0.1:9"], 2, "is not reachable"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "{ro_uri}", "--log-run"], 2,
     "is read-only; compute the card without --log-run"),
    (C + ["--json", "/proc/nope/card.json"], 2, "cannot be created in /proc"),
    (C + ["--json", "{tmp}"], 2, "is a directory; give a file name"),
    (C + ["--json", "{file}/card.json"], 2, "is a file, not a directory"),
    (C + ["--out", "{file}"], 2, "--out {file} is a file, not a directory"),
    (C + ["--out", "{file}/sub"], 2, "is a file, not a directory"),
    (C + ["--out", "/proc/nope"], 2, "--out /proc/nope cannot be created in /proc"),
    (C + ["--metric", "accuracy/nope"], 2, "No run in experiment 'exp' has the metric 'accuracy/nope'"),
    (C + ["--metric", "val_loss"], 2, "has the metric 'val_loss'; metrics logged there: 'accuracy/calibration'"),
    (C + ["--metric", ""], 2, "--metric must name a metric key"),
    (C + ["--audit", "nope"], 2,
     "No rerun in experiment 'exp' was scored on audit set 'nope'; the audit sets there are 'calibration', 'shift_a'"),
    (C + ["--audit", "calibration", "--audit", "nope"], 2, "was scored on audit set 'nope'"),
    (C + ["--audit", ""], 2, "--audit names an audit set"),
    (C + ["--audit", "a,b"], 2, "without a comma, not 'a,b'"),
    (C + ["--metric", "accuracy/calibration", "--audit", "calibration"], 2, "Give --metric or --audit/--all-audits"),
    (C + ["--metric", "accuracy/calibration", "--all-audits"], 2, "not both"),
    (["card", "--experiment-name", "mine", "--tracking-uri", "{uri}", "--seed-key", "params.seed",
      "--all-audits"], 2,
     "says which audit sets it was scored on"),
    (C + ["--group-by", "params.nope"], 2,
     "No rerun in experiment 'exp' has the key 'params.nope' to group by; the params there are 'params.model_name'"),
    (C + ["--group-by", "params.model_name", "tags.nope"], 2, "has the key 'tags.nope' to group by"),
    (C + ["--group-by", "model_name"], 2, "Key 'model_name' must start with params., tags., metrics."),
    (C + ["--group-by"], 2, "argument --group-by: expected at least one argument"),
    (C + ["--seed-key", "params.nothere"], 2, "has the seed key 'params.nothere'"),
    (C + ["--seed-key", "seed"], 2, "Key 'seed' must start with params."),
    (C + ["--recipe-id", "nope"], 2, "No rerun of recipe 'nope'"),
    (C + ["--sweep-id", "nope"], 2, "No rerun of sweep 'nope'"),
    (C + ["--unfinished", "refuse"], 2, "The card refuses"),
    (C + ["--unfinished", "maybe"], 2, "--unfinished must be 'fail' or 'refuse', not 'maybe'."),
    (C + ["--band-method", "nope"], 2, "argument --band-method: invalid choice: 'nope'"),
    (C + ["--split-audit", "--splits", "0"], 2, "argument --splits: '0' must lie between 1 and 100000"),
    (C + ["--splits", "-1"], 2, "must lie between 1 and 100000"),
    (C + ["--splits", "1e3"], 2, "'1e3' is not a whole number"),
    (C + ["--splits", "1000001"], 2, "must lie between 1 and 100000"),
    (C + ["--splits", "99999999999999999999999"], 2, "must lie between 1 and 100000"),
    (C + ["--bootstrap", "0"], 2, "argument --bootstrap: '0' must lie between 1 and 100000"),
    (C + ["--bootstrap", "1000000000"], 2, "must lie between 1 and 100000"),
    (C + ["--bootstrap-seed", "-1"], 2, "argument --bootstrap-seed: '-1' is negative"),
    (C + ["--tau", "-3"], 2, "The release bar tau = -3 lies outside [0, 1], where the accuracy 'accuracy/calibration' lies"),
    (C + ["--tau", "1.5"], 2, "tau = 1.5 lies outside [0, 1]"),
    (C + ["--tau", "0.7", "2"], 2, "tau = 2 lies outside [0, 1]"),
    (C + ["--lower-is-better", "--tau", "-0.5"], 2, "so every rerun would fail it"),
    (C + ["--audit", "calibration", "--tau", "7"], 2, "outside [0, 1]"),
    (C + ["--tau", "nan"], 2, "argument --tau: 'nan' is not a finite number"),
    (C + ["--tau", "inf"], 2, "is not a finite number"),
    (C + ["--tau", "abc"], 2, "'abc' is not a number"),
    (C + ["--tau"], 2, "argument --tau: expected at least one argument"),
    (C + ["--eps", "0"], 2, "argument --eps: '0' must lie strictly between 0 and 1"),
    (C + ["--eps", "2"], 2, "must lie strictly between 0 and 1"),
    (C + ["--eps", "nan"], 2, "is not a finite number"),
    (C + ["--eps", "1e-300"], 2, "eps = 1e-300 is too small to certify with at most 10^15 reruns"),
    (C + ["--delta", "0.5"], 2, "argument --delta: '0.5' must lie strictly between 0 and 0.5"),
    (C + ["--delta", "0.9"], 2, "must lie strictly between 0 and 0.5"),
    (C + ["--delta", "0"], 2, "must lie strictly between 0 and 0.5"),
    (C + ["--planned-seeds", "range(x)"], 2, "--planned-seeds must be 'range(N)'"),
    (C + ["--planned-seeds", "range(1, 2, 0)"], 2, "has a step of 0"),
    (C + ["--planned-seeds", "range(-5)"], 2, "names no seed"),
    (C + ["--planned-seeds", ""], 2, "names no seed"),
    (C + ["--planned-seeds", "a,b"], 2, "or a comma list of integers, not 'a,b'"),
    (C + ["--planned-seeds", "range(1000000000000)"], 2, "names 1000000000000 seeds, more than the 1000000"),
    (C + ["--planned-seeds", "range(1,2,3,4)"], 2, "--planned-seeds must be"),
    (C + ["--family-size", "0"], 2, "argument --family-size: '0' must lie between 1 and 10^15"),
    (C + ["--family-size", "many"], 2, "'many' is not a whole number"),
    (C + ["--anytime=yes"], 2, "ignored explicit argument 'yes'"),
    (C + ["--family-size", "3", "--anytime"], 2, "Give --family-size or --anytime, not both: a card reads"),
    (C + ["--eps", "1e-4", "--band-method", "exact-cp"], 2,
     "the exact-cp band cannot certify eps = 0.0001 with up to 2000 reruns"),
    (C + ["--nope"], 2, "unrecognized arguments: --nope"),
    # a secret on the command line: in the process list while the command runs
    (["card", "--experiment-name", "exp", "--tracking-uri", "http://u:Pw-3e1-secret@127.0.0.1:9"], 2,
     "--tracking-uri holds a password (http://u:***@127.0.0.1:9), and every local user can read it in the process "
     "list while the command runs: give --tracking-uri=http://127.0.0.1:9 and the user and password in the "
     "environment, MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD."),
    (["card", "--experiment-name", "exp", "--tracking-uri", "https://ghp_Tok3n@example.invalid"], 2,
     "--tracking-uri holds a user name or token (https://***@example.invalid)"),
    (["card", "--experiment-name", "exp", "--tracking-uri", "postgresql://mlflow:Pw-3e1-secret@127.0.0.1:1/db"], 2,
     "where the database's client reads them (PostgreSQL: ~/.pgpass or PGPASSWORD"),
]

CASES = BOUND + CARD


def _sentence_ok(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if not ln.startswith("20")]  # MLflow's own INFO log lines


@pytest.fixture(scope="module")
def places(tmp_path_factory, migrated_mlflow_db):
    """The store (in a copy of the suite's empty tables) and the paths the table's braces name."""
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("bad_input")
    (tmp / "store").mkdir()
    shutil.copy(migrated_mlflow_db, tmp / "store" / "mlflow.db")
    uri = f"sqlite:///{tmp / 'store' / 'mlflow.db'}"
    values = {s: (0.9 if s % 5 else 0.5) for s in range(30)}
    synthetic_sweep(uri, values, planned=range(32), extra_params={"model_name": "m"})
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp")
    for run in client.search_runs([exp.experiment_id], f"tags.`{keys.TAG_KIND}` = '{keys.KIND_RERUN}'"):
        client.set_tag(run.info.run_id, keys.TAG_AUDIT_SETS, "calibration,shift_a")  # shift_a: never logged
    client.create_experiment("empty")
    mine = client.create_experiment("mine")
    for seed in range(3):
        rid = client.create_run(mine).info.run_id
        client.log_param(rid, "seed", seed)
        client.log_metric(rid, "val_acc", 0.8)
        client.set_terminated(rid)
    afile = tmp / "afile.txt"
    afile.write_text("not a database\n")
    ro = tmp / "ro" / "mlflow.db"
    ro.parent.mkdir()
    shutil.copy(tmp / "store" / "mlflow.db", ro)
    os.chmod(ro, 0o444)
    immutable = bool(shutil.which("chattr")) and procs.run(["chattr", "+i", str(ro)],
                                                                 capture_output=True).returncode == 0
    import recipe_audit.release.compute  # noqa: F401 - import once here, not inside the first timed case

    try:
        yield {"uri": uri, "ro_uri": f"sqlite:///{ro}", "ro": ro, "tmp": str(tmp), "file": str(afile),
               "immutable": immutable and _readonly(ro)}
    finally:
        if immutable:
            procs.run(["chattr", "-i", str(ro)], capture_output=True)
        os.chmod(ro, 0o644)


def _readonly(db) -> bool:
    con = sqlite3.connect(f"file:{db}?mode=rw", uri=True, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("CREATE TABLE t (x)")
        con.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        con.close()


def test_the_table_is_large():
    assert len(CASES) >= 120 and len(CARD) >= 60


@pytest.mark.parametrize("args, code, fragment", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input(args, code, fragment, places, capsys, monkeypatch):
    fill = {k: v for k, v in places.items() if isinstance(v, str)}
    args = [a.format(**fill) for a in args]
    fragment = fragment.format(**fill)
    if places["ro_uri"] in args and not places["immutable"]:
        # no chattr here (or not root): the file mode says read-only, and os.access is made to
        # tell it to root too, who writes through file modes
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m, **kw: False if str(p) == str(places["ro"])
                            else real(p, m, **kw))
    t0 = time.perf_counter()
    rc, out, err = run_cli(args, capsys)
    elapsed = time.perf_counter() - t0
    lines = _sentence_ok(err)
    assert rc == code, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("recipe-audit: error: "), err
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in err and not out and "secret" not in err and "Tok3n" not in err
    assert elapsed < procs.timeout(1.0 if args[:1] != ["card"] else 8.0), elapsed  # at once (card: one read of the store)


def test_bound_with_a_tiny_budget_answers_at_once(capsys):
    t0 = time.perf_counter()
    rc, out, err = run_cli(["bound", "-k", "0", "-n", "59", "--eps", "1e-12", "--json"], capsys)
    assert rc == 0 and time.perf_counter() - t0 < procs.timeout(1.0), err
    assert '"sample_floor": 2302585092993' in out and '"more_clean_reruns_needed": 2302585092934' in out


def test_a_tie_is_a_tie(capsys):
    # 0.7**2 == 0.49: at N = 2 with no failure U = 1 - 0.49**0.5 = 0.3 = eps, which certifies
    rc, out, _ = run_cli(["bound", "-k", "0", "-n", "2", "--eps", "0.3", "--delta", "0.49", "--json"], capsys)
    assert rc == 0 and '"sample_floor": 2' in out and '"verdict": "release-supported"' in out


def test_tau_beyond_the_values_of_a_users_metric_is_noted(places, capsys, tmp_path):
    """Not an error (the answer is well defined), but said: every finished rerun passes it."""
    rc, out, err = run_cli(["card", "--experiment-name", "mine", "--tracking-uri", places["uri"],
                            "--metric", "val_acc", "--seed-key", "params.seed", "--tau", "-3"], capsys)
    assert rc == 0, err
    assert "recipe-audit: note: tau = -3 lies below every value of 'val_acc'" in err
    assert "so no finished rerun fails at it" in err
