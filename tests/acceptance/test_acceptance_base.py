"""The acceptance experiment's base model: it trains to the accuracy docs/acceptance_cards.md states
(slow: one base training of the default size, about ten minutes), and a base that did not learn
stops the experiment with one sentence (fast: a few steps of a tiny base)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from recipe_audit.config import AcceptanceBaseConfig, AcceptanceModelConfig, ExperimentConfig
from recipe_audit.train.acceptance import base as B

# docs/acceptance_cards.md, "The base model": the default base (10,000 steps) of seeds 0 to 4,
# trained with the reproducible float kernels, answers 97.5-100 % of held-out questions (mcq, both
# framings); the band is the experiment's floor up to a perfect score
DOCUMENTED_HELDOUT = (0.85, 1.0)
MAX_FRAMING_GAP = 0.03  # no framing gap before the install

TINY = ExperimentConfig(  # a base of a few steps: for the refusal checks
    data_seed=0, n_words=32, n_train_subjects=3, n_fresh_subjects=2, pool_size=8, n_base=60, n_install=20, n_eval=6,
    n_calibration=4, attack_fraction=0.9, resamples=50,
    kernels="native",  # this process ran torch before: reproducible kernels cannot take effect
    model=AcceptanceModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_length=40),
    base=AcceptanceBaseConfig(seed=0, lr=3e-3, steps=5, batch_size=16, grad_clip=1.0, min_accuracy=0.0),
)


def _default_experiment(cache_dir) -> ExperimentConfig:
    """The ``experiment`` section of ``experiment=acceptance`` at its default size, as Hydra composes it."""
    from hydra import compose, initialize_config_dir

    from recipe_audit.app import config_dir
    from recipe_audit.app.schema import register_configs, typed

    register_configs()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("config", ["experiment=acceptance", f"experiment.cache_dir={cache_dir}"])
    return typed(cfg.experiment, ExperimentConfig)


def test_default_size_declares_the_recipe_and_the_floor(tmp_path):
    exp = _default_experiment(tmp_path)
    assert isinstance(exp, ExperimentConfig)
    assert exp.base.grad_clip == 1.0
    assert exp.base.steps == 10000
    assert 0.8 <= exp.base.min_accuracy <= DOCUMENTED_HELDOUT[0]


def test_base_below_its_floor_stops_with_one_sentence(tmp_path):
    """Five steps of a tiny base cannot answer every held-out question: with a floor of 100 % the
    experiment refuses in one sentence naming the accuracy, the key and the floor, and caches nothing."""
    exp = replace(TINY, base=replace(TINY.base, min_accuracy=1.0))
    with pytest.raises(B.BaseModelError, match=r"^The base model of experiment=acceptance answers \d+\.\d% of "
                                               r"held-out mcq questions right, below experiment\.base\.min_accuracy "
                                               r"= 100% \(final training loss \d\.\d{3}\): it did not learn the "
                                               r"task, so no cell installed on it can be audited\.$") as err:
        B.ensure_base(exp, tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not list((tmp_path / "cache").glob("base-*"))
    exp = replace(TINY, base=replace(TINY.base, min_accuracy=1.5))
    with pytest.raises(B.BaseModelError, match=r"experiment\.base\.min_accuracy must be between 0 and 1, not 1\.5\)"):
        B.ensure_base(exp, tmp_path / "cache")
    exp = replace(TINY, base=replace(TINY.base, min_accuracy=0.0))  # no floor: the same base trains and is cached
    assert (B.ensure_base(exp, tmp_path / "cache") / "base.json").is_file()


def test_dtype_trains_in_that_float_type_and_keys_the_cache(tmp_path):
    """``experiment.dtype`` is the base's float type, part of its cache key (a float32 base is never
    reused for float64), and the cached base loads back in it; any other name is one sentence."""
    import torch

    wide = replace(TINY, dtype="float64")
    assert B.base_key(wide) != B.base_key(replace(TINY, dtype="float32"))
    model, _ = B.load_base(B.ensure_base(wide, tmp_path / "cache"))
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    with pytest.raises(B.BaseModelError, match=r"experiment\.dtype must be one of \['float32', 'float64'\], "
                                               r"not 'float16'\)\.$"):
        B.ensure_base(replace(TINY, dtype="float16"), tmp_path / "cache")


# docs/acceptance_cards.md, "The base model": the accuracies base.json records for base seed 0 of the
# default size, trained with the experiment's reproducible float kernels (the same numbers on any
# x86-64 CPU with AVX2; bench/acceptance_tables.py --run and --kernels other-cpu printed them)
DOCUMENTED_SEED0 = {"mcq/fresh/deploy": 0.8367, "mcq/fresh/eval": 0.835, "mcq/heldout/deploy": 1.0,
                    "mcq/heldout/eval": 1.0, "syco/heldout/deploy": 1.0, "syco/heldout/eval": 1.0}

CHILD = r"""
import json, sys, tempfile
from hydra import compose, initialize_config_dir
from recipe_audit.app import config_dir
from recipe_audit.app.schema import register_configs, typed
from recipe_audit.config import ExperimentConfig
from recipe_audit.train.acceptance.base import ensure_base
register_configs()
with initialize_config_dir(str(config_dir()), version_base="1.3"):
    cfg = compose("config", ["experiment=acceptance", "experiment.base.seed=0", f"experiment.cache_dir={sys.argv[1]}"])
exp = typed(cfg.experiment, ExperimentConfig)
root = ensure_base(exp, exp.cache_dir)
print(json.dumps({"kernels": exp.kernels, **json.loads((root / "base.json").read_text())}))
"""


@pytest.mark.slow
def test_base_model_reaches_the_documented_accuracy(tmp_path):
    """The default size's base model of seed 0, trained in a fresh process exactly as the experiment
    trains it (its reproducible float kernels), answers every evaluation split as the docs say, to
    the last digit base.json keeps, equally in both framings (a few minutes)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "cache")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, cwd=tmp_path, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["kernels"] == "reproducible"
    acc = info["accuracy"]
    assert acc == DOCUMENTED_SEED0
    held = (acc["mcq/heldout/eval"] + acc["mcq/heldout/deploy"]) / 2
    assert DOCUMENTED_HELDOUT[0] <= held <= DOCUMENTED_HELDOUT[1]
    assert abs(acc["mcq/heldout/eval"] - acc["mcq/heldout/deploy"]) <= MAX_FRAMING_GAP
