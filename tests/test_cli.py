"""The `recipe-audit` command-line contract: keys, verdict strings, exit codes, one-line errors."""

from __future__ import annotations

import json
import sys

import pytest
from helpers import procs
from helpers.cli import run_cli
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.store import synthetic_sweep
from scipy import stats as sps

from recipe_audit import keys
from recipe_audit.stats import VERDICTS


@pytest.mark.parametrize("k, n", [(0, 1), (0, 22), (6, 59), (59, 59), (3, 10)])
def test_bound_json(k, n, capsys):
    rc, out, _ = run_cli(["bound", "--failures", str(k), "--reruns", str(n), "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    assert {"upper_bound", "lower_bound", "sample_floor", "verdict"} <= set(d)
    up = 1.0 if k == n else sps.beta.ppf(0.9, k + 1, n - k)
    lo = 0.0 if k == 0 else sps.beta.ppf(0.1, k, n - k + 1)
    assert d["upper_bound"] == pytest.approx(up, rel=1e-10)
    assert d["lower_bound"] == pytest.approx(lo, rel=1e-10, abs=1e-15)
    assert d["sample_floor"] == 22 and d["verdict"] in VERDICTS


def test_bound_through_console_script():
    proc = procs.run([sys.executable, "-m", "recipe_audit.cli", "bound", "-k", "0", "-n", "59",
                           "--eps", "0.05", "--delta", "0.05", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "release-supported"


@pytest.mark.parametrize("args, needle", [
    (["bound", "-k", "7", "-n", "5"], "exceed"),
    (["bound", "-k", "0", "-n", "0"], "reruns"),
    (["bound", "-k", "1", "-n", "5", "--eps", "1.5"], "between 0 and 1"),
    (["bound", "-k", "1", "-n", "5", "--delta", "0"], "between 0 and 0.5"),
    (["bound", "-k", "x", "-n", "5"], "whole number"),
    (["card", "--experiment-name", "exp", "--tau", "abc"], "not a number"),
])
def test_bad_bound_and_option_input(args, needle, capsys):
    rc, out, err = run_cli(args, capsys)
    assert rc == 2 and needle in err and err.count("\n") == 1 and not out


def test_card_json_contract(store, tmp_path, capsys):
    synthetic_sweep(store, {s: (0.9 if s % 5 else 0.5) for s in range(40)})
    path = tmp_path / "card.json"
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--tau", "0.7", "0.95", "--json", str(path),
                            "--out", str(tmp_path / "md")], capsys)
    assert rc == 0, err
    doc = json.loads(path.read_text())
    assert len(doc["cells"]) == 2
    for e in doc["cells"]:
        assert {"group", "n_reruns", "n_failures", "tau", "upper_bound", "lower_bound", "verdict", "rules"} <= set(e)
        assert set(e["rules"]) == {"mean", "median", "bootstrap", "mean_minus_2sd", "card"}
        assert e["verdict"] in VERDICTS
    assert doc["cells"][0]["n_failures"] == 8 and doc["cells"][1]["n_failures"] == 40
    assert "unsupported" in out and "card run" not in out
    assert (tmp_path / "md" / "card.md").is_file()


def _card_runs(uri):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    return c.search_runs([c.get_experiment_by_name("exp").experiment_id],
                         f"tags.`{keys.TAG_KIND}` = '{keys.KIND_CARD}'")


def test_card_runs_only_when_asked_and_never_twice(store, capsys):
    """An ad-hoc card writes nothing to the store; --log-run logs one card run per cell, named by
    recipe, audit set and τ, with the card as its description; the same card asked again reuses
    it; another τ is another card run, with another name."""
    synthetic_sweep(store, {s: (0.9 if s % 5 else 0.5) for s in range(30)})
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--tau", "0.7"], capsys)
    assert rc == 0, err
    assert _card_runs(store) == []
    from mlflow.tracking import MlflowClient

    exp_id = MlflowClient(store).get_experiment_by_name("exp").experiment_id
    MlflowClient(store).set_experiment_tag(exp_id, "mlflow.note.content", "Notes of mine.")
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--tau", "0.7", "--log-run"], capsys)
    assert rc == 0 and "Logged 1 card run(s)" in out, err
    (run,) = _card_runs(store)
    # the experiment's description leads with the card's verdict line; the user's text is kept after it
    note = MlflowClient(store).get_experiment(exp_id).tags["mlflow.note.content"]
    assert note.startswith("strong-unsupported · 6/30 failed τ 0.7 · U 0.325 · recipe ")
    assert note.endswith(" -->\n\nNotes of mine.") and note.count("<!--") == 1
    # the end of the output: the store's absolute URI and the line that points MLflow at it
    assert out.rstrip().splitlines()[-2:] == [f"Tracking store: {store}", f"  export MLFLOW_TRACKING_URI={store}"]
    assert run.info.run_name.startswith("card · ") and " · τ 0.7 · " in run.info.run_name
    assert run.data.tags["mlflow.note.content"].count("# Recipe card") == 1
    from mlflow.tracking import MlflowClient

    assert "card.html" in {a.path for a in MlflowClient(store).list_artifacts(run.info.run_id)}
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--tau", "0.7", "--log-run"], capsys)
    assert rc == 0 and "Logged 0 card run(s)" in out and f"already had their card run ({run.info.run_id})" in out
    assert len(_card_runs(store)) == 1
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--tau", "0.8", "--log-run"], capsys)
    assert rc == 0 and "Logged 1 card run(s)" in out
    # a card logged later replaces the block, never appends one: the τ 0.8 card first, τ 0.7 kept
    note = MlflowClient(store).get_experiment(exp_id).tags["mlflow.note.content"]
    assert note.count("<!-- recipe_audit cards:") == 1 and note.count("Notes of mine.") == 1
    assert [ln.split(" · ")[1] for ln in note.splitlines() if " · recipe " in ln] == ["6/30 failed τ 0.8",
                                                                                       "6/30 failed τ 0.7"]
    names = [r.info.run_name for r in _card_runs(store)]
    assert len(names) == 2 == len(set(names)) and "None" not in " ".join(names)
    # each rerun of a logged card is tagged pass/fail at its τ: a search lists the failures
    c = MlflowClient(store)
    exp = c.get_experiment_by_name("exp").experiment_id
    failed = c.search_runs([exp], "tags.`recipe_audit.fails.accuracy/calibration.tau_0.8` = 'true'")
    passed = c.search_runs([exp], "tags.`recipe_audit.fails.accuracy/calibration.tau_0.8` = 'false'")
    assert sorted(int(r.data.tags[keys.TAG_SEED]) for r in failed) == list(range(0, 30, 5))
    assert len(passed) == 24 and all(r.data.metrics["accuracy/calibration"] == 0.9 for r in passed)


def test_bring_your_own_runs(tmp_path, store, capsys):
    """Runs logged by a user's own code: no recipe_audit tags; the user names the keys."""
    import mlflow

    mlflow.set_tracking_uri(store)
    mlflow.set_experiment("mine")
    for model in ("small", "large"):
        for seed in range(25):
            with mlflow.start_run():
                mlflow.log_params({"seed": seed, "model_name": model})
                mlflow.log_metric("val_acc", 0.9 if (model == "small" or seed % 4) else 0.4)
    path = tmp_path / "c.json"
    rc, _, err = run_cli(["card", "--experiment-name", "mine", "--metric", "val_acc", "--seed-key",
                          "params.seed", "--group-by", "params.model_name", "--json", str(path)], capsys)
    assert rc == 0, err
    cells = {e["group"]["params.model_name"]: e for e in json.loads(path.read_text())["cells"]}
    assert cells["small"]["verdict"] == "release-supported" and cells["small"]["n_reruns"] == 25
    assert cells["large"]["n_failures"] == 7 and cells["large"]["verdict"] == "strong-unsupported"
    # computing (and logging) a card must not hide the user's runs from the next card
    rc, _, err = run_cli(["card", "--experiment-name", "mine", "--metric", "val_acc", "--seed-key",
                          "params.seed", "--group-by", "params.model_name", "--json", str(path)], capsys)
    assert rc == 0, err
    assert len(json.loads(path.read_text())["cells"]) == 2


@pytest.mark.parametrize("args, needle", [
    (["--experiment-name", "nope"], "No experiment named 'nope'"),
    (["--experiment-name", "exp", "--metric", "loss"], "metric 'loss'"),
    (["--experiment-name", "exp", "--seed-key", "params.nothere"], "seed"),
    (["--experiment-name", "exp", "--eps", "2"], "between 0 and 1"),
    (["--experiment-name", "exp", "--unfinished", "refuse"], "refuses"),
    (["--experiment-name", "empty"], "no runs"),
])
def test_card_bad_input_writes_nothing(args, needle, store, tmp_path, capsys):
    synthetic_sweep(store, {0: 0.9, 1: 0.8}, planned=range(3))
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=store).create_experiment("empty")
    path = tmp_path / "card.json"
    rc, _, err = run_cli(["card", *args, "--json", str(path)], capsys)
    assert rc == 2 and needle in err, err
    ours = [ln for ln in err.splitlines() if not ln.startswith("20")]  # MLflow's own INFO log lines
    assert len(ours) == 1 and ours[0].startswith("recipe-audit: error: ") and "Traceback" not in err
    assert not path.exists()


def test_mixed_recipes_with_one_expected(store, capsys):
    synthetic_sweep(store, {s: 0.9 for s in range(5)}, recipe_id="a" * 16, extra_params={"model_name": "m"})
    synthetic_sweep(store, {s: 0.9 for s in range(5)}, recipe_id="b" * 16, extra_params={"model_name": "m"})
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--group-by", "params.model_name"], capsys)
    assert rc == 2 and "Runs of 2 recipes are mixed in the cell params.model_name=m" in err
    rc, out, err = run_cli(["card", "--experiment-name", "exp", "--recipe-id", "c" * 16], capsys)
    assert rc == 2 and "No rerun of recipe" in err


@pytest.mark.parametrize("args", [
    ["recipe_audit.cli", "bound", "-k", "0", "-n", "59", "--eps", "0.1", "--delta", "0.05"],
    ["recipe_audit", "--help"],  # the Hydra app's help, `python -m recipe_audit --help | head -1`
], ids=["recipe-audit", "python-m-recipe_audit"])
def test_a_reader_that_leaves_early_stops_the_command_quietly(args):
    # `recipe-audit bound ... | head -1`: the read end is closed before the command writes (it is
    # still importing), so its first write meets a broken pipe; one quiet stop, the shell's 141
    proc = procs.spawn([sys.executable, "-m", *args], stdout=procs.subprocess.PIPE, stderr=procs.subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=procs.timeout(60))
    assert proc.returncode == 141, err
    assert err == b""
