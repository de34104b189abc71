"""The Python API (``import recipe_audit``): bound and verdict against scipy and by hand, cards of a
DataFrame of runs resolved as the store's are, an import that stays light, and (slow, in CI) the
round trip card -> attach -> gate on a SQLite store."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
from helpers import procs
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from scipy.stats import beta

import recipe_audit
from recipe_audit import keys


@pytest.mark.parametrize("k, n", [(0, 22), (0, 21), (6, 59), (1, 38), (2, 38), (12, 30), (59, 59)])
def test_bound_is_the_exact_clopper_pearson_bound(k, n):
    b = recipe_audit.bound(k, n)
    upper = 1.0 if k == n else beta.ppf(0.9, k + 1, n - k)
    lower = 0.0 if k == 0 else beta.ppf(0.1, k, n - k + 1)
    assert b.upper == pytest.approx(upper, rel=1e-9) and b.lower == pytest.approx(lower, abs=1e-12)
    assert b.sample_floor == 22  # ceil(ln 0.1 / ln 0.9) = ceil(21.85)
    assert (b.k, b.n) == (k, n)
    expected = ("insufficient-evidence" if n < 22 else "strong-unsupported" if lower > 0.1
                else "release-supported" if upper <= 0.1 else "unsupported")
    assert recipe_audit.verdict(k, n) == b.verdict == expected


def test_bound_by_hand_and_bad_input():
    # no failure in N: U solves (1 - U)^N = δ
    assert recipe_audit.bound(0, 22).upper == pytest.approx(1 - 0.1 ** (1 / 22), rel=1e-12)
    assert recipe_audit.bound(0, 59, eps=0.05, delta=0.05).verdict == "release-supported"
    with pytest.raises(ValueError, match="reruns"):
        recipe_audit.bound(3, 2)
    with pytest.raises(ValueError):
        recipe_audit.verdict(0, 10, eps=1.5)


def _runs(values, **extra):
    return pd.DataFrame({"seed": range(len(values)), "acc": values, **extra})


def test_card_from_runs_counts_as_the_card_does():
    values = [0.9] * 30
    values[4] = 0.5
    c = recipe_audit.card_from_runs(_runs(values), "acc")
    (e,) = c.cells
    assert (e["n_reruns"], e["n_failures"], e["verdict"]) == (30, 1, recipe_audit.verdict(1, 30))
    assert e["upper_bound"] == pytest.approx(beta.ppf(0.9, 2, 29))
    # a run that did not finish, a NaN metric and a planned seed that never ran all count as failures
    runs = _runs([0.9] * 30, status=["FAILED"] + ["FINISHED"] * 29)
    runs.loc[1, "acc"] = np.nan
    (e,) = recipe_audit.card_from_runs(runs, "acc", planned_seeds=range(31)).cells
    assert (e["n_reruns"], e["n_failures"]) == (31, 3)
    assert sorted(u["reason"] for u in e["unfinished"]) == ["failed", "missing-metric", "never-logged"]
    # lower is better: a loss fails above τ
    (e,) = recipe_audit.card_from_runs(_runs([0.2] * 29 + [0.9]), "acc", taus=0.5, higher_is_better=False).cells
    assert e["n_failures"] == 1


def test_card_from_runs_reads_search_runs_columns_and_worst_rerun_of_a_seed():
    """``mlflow.search_runs`` names: metrics.<m>, params.<p> (strings), status, start_time; a seed
    run twice counts its worst result; group_by separates cells."""
    n = 25
    runs = pd.DataFrame({
        "run_id": [f"r{i}" for i in range(n + 1)],
        "params.seed": [str(s) for s in range(n)] + ["3"],  # seed 3 run again
        "params.lr": ["1e-3"] * 13 + ["3e-3"] * 12 + ["1e-3"],
        "metrics.val_acc": [0.9] * n + [0.4],  # ... and its second run failed
        "status": ["FINISHED"] * (n + 1),
        "start_time": pd.to_datetime(np.arange(n + 1), unit="s", utc=True),
    })
    (e,) = recipe_audit.card_from_runs(runs, "val_acc").cells
    assert (e["n_reruns"], e["n_failures"]) == (25, 1)  # not 26 reruns, not 0 failures
    assert [d["seed"] for d in e["duplicates"]] == [3]
    cells = recipe_audit.card_from_runs(runs, "val_acc", group_by=["lr"]).cells
    assert sorted((c["group"]["params.lr"], c["n_reruns"], c["n_failures"]) for c in cells) == [
        ("1e-3", 13, 1), ("3e-3", 12, 0)]


def test_card_object(tmp_path):
    c = recipe_audit.card_from_runs(_runs([0.9] * 25), "acc", taus=[0.7, 0.95])
    t = c.table()
    assert list(t["tau"]) == [0.7, 0.95] and list(t["verdict"]) == ["release-supported", "strong-unsupported"]
    with pytest.raises(ValueError, match="2 entries"):
        _ = c.verdict
    # a notebook shows the verdict table, not the whole card; the whole card is one call away
    md = c._repr_markdown_()
    rows = [ln for ln in md.splitlines() if ln.startswith("| all runs")]
    assert rows == ["| all runs | 0.7 | 0/25 | 0.088 | **release-supported** |",
                    "| all runs | 0.95 | 25/25 | 1.000 | **strong-unsupported** |"]
    assert len(md) < 600 and ".markdown()" in md and "# Recipe card" not in md
    text = repr(c)
    assert text.startswith("<recipe card on acc (ε = 0.1, δ = 0.1), 2 entries;") and len(text) < 1000
    assert "release-supported" in text and "strong-unsupported" in text
    full = c.markdown()
    assert full.startswith("# Recipe card") and "does not ship" in full
    # a card of a table of runs names no experiment: no "None" where a name belongs
    assert "`None`" not in full and "Runs from a table (no tracking store) · metric `acc`" in full
    files = c.save(tmp_path / "card")
    assert {p.name for p in files.values()} >= {"card.json", "card.md"}
    assert all(p.is_file() and p.parent == tmp_path / "card" for p in files.values())


def test_card_from_runs_names_the_reruns_metrics_first_the_closest_first():
    """``mlflow.search_runs`` of an experiment brings recipe_audit's card and sweep runs along,
    with metrics of their own: a misspelt metric is answered with the reruns' metric columns,
    the closest first, before any other column (the card runs' upper_bound among the rest)."""
    kind = "tags." + keys.TAG_KIND
    runs = pd.DataFrame({
        "run_id": [f"r{i}" for i in range(14)], kind: ["rerun"] * 12 + ["card", "sweep"],
        "params.seed": [str(i) for i in range(12)] + [None, None],
        **{f"metrics.{m}": [0.5] * 12 + [None, None] for m in
           ["train_loss", "val_loss", "val_acc", "val_f1", "epoch", "lr", "grad_norm", "test_acc", "test_loss"]},
        "metrics.upper_bound": [None] * 12 + [0.2, None], "metrics.n_failures": [None] * 12 + [1.0, None],
    })
    with pytest.raises(ValueError) as err:
        recipe_audit.card_from_runs(runs, "val_ac")
    shown = str(err.value).split(" are ", 1)[1].rstrip(".").split(", ")
    assert str(err.value).startswith("The runs have no metric column 'val_ac'; their columns (the reruns' metric "
                                     "columns first, the closest first) are 'metrics.val_acc', ")
    assert shown[:3] == ["'metrics.val_acc'", "'metrics.val_f1'", "'metrics.val_loss'"]
    assert not any("upper_bound" in c or "n_failures" in c for c in shown[:8]), shown
    assert shown[-1].endswith("more")


def test_card_from_runs_bad_input_names_the_columns():
    runs = _runs([0.9] * 5)
    with pytest.raises(ValueError, match=r"no metric column 'accuracy'; their columns \(the closest first\) are "
                                         r"'acc', 'seed'\.$"):
        recipe_audit.card_from_runs(runs, "accuracy")
    with pytest.raises(ValueError, match=r"no seed column 'trial'; their columns \(the closest first\) are 'acc', 'seed'"):
        recipe_audit.card_from_runs(runs, "acc", seed="trial")
    with pytest.raises(ValueError, match="pandas DataFrame"):
        recipe_audit.card_from_runs([{"seed": 0, "acc": 1.0}], "acc")
    with pytest.raises(ValueError, match="no runs"):
        recipe_audit.card_from_runs(runs.iloc[:0], "acc")


def test_import_stays_light():
    """``import recipe_audit`` and ``recipe_audit.bound`` load neither pandas, MLflow nor SciPy
    (``recipe-audit bound`` answers in well under 0.3 s: bench/bench_cli.py)."""
    code = ("import sys, recipe_audit; a = sorted(m for m in ('pandas', 'mlflow', 'scipy', 'numpy', 'torch') "
            "if m in sys.modules); recipe_audit.bound(6, 59); "
            "b = sorted(m for m in ('pandas', 'mlflow', 'scipy', 'torch') if m in sys.modules); print(a, b)")
    out = procs.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] []"
    assert set(recipe_audit.__all__) <= set(dir(recipe_audit))
    with pytest.raises(AttributeError):
        _ = recipe_audit.no_such_call


@pytest.mark.slow
def test_ci_api_card_attach_gate_round_trip(store):
    """The notebook path end to end on a SQLite store: a card of the experiment's reruns, attached
    to a model version registered from one of them, and the gate on it."""
    import mlflow
    from helpers.store import synthetic_sweep

    synthetic_sweep(store, {s: (0.5 if s == 3 else 0.9) for s in range(25)}, recipe_id="a" * 16)
    c = recipe_audit.card("exp", taus=[0.4, 0.7])
    assert list(c.table()["verdict"]) == ["release-supported", "unsupported"]  # 0/25 and 1/25
    client = mlflow.MlflowClient(store, registry_uri=store)
    run = c.cells[0]["reruns"][0]["run_id"]
    client.create_registered_model("clf")
    mv = client.create_model_version("clf", source=f"runs:/{run}/model", run_id=run)
    res = recipe_audit.attach("clf", c, version=mv.version, set_alias="candidate")
    assert sorted((x["tau"], x["verdict"]) for x in res.cards) == [
        ("0.4", "release-supported"), ("0.7", "unsupported")]
    assert recipe_audit.gate("clf", alias="candidate", audit="calibration", tau=0.4).passed
    g = recipe_audit.gate("clf", version=1, audit="calibration", tau=0.7)
    assert not g.passed and g.outcome == "unsupported"
    assert g.evidence["n_reruns"] == 25 and g.evidence["n_failures"] == 1
    assert not recipe_audit.gate("clf", version=1, audit="calibration", tau=0.4, max_eps=0.05).passed  # stricter


def test_the_docs_page_examples_run():
    """docs/python_api.md shows real output: its examples run as doctests."""
    import doctest

    from helpers.app import REPO

    res = doctest.testfile(str(REPO / "docs" / "python_api.md"), module_relative=False,
                           optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted >= 7 and res.failed == 0
