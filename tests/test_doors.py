"""One input, every door, one answer: the audit options typed at the command line (``recipe-audit
bound`` / ``card``, through ``cli.main``), in Python (``recipe_audit.bound`` / ``card``), in the
recipe_audit callback of a plain Hydra app and in the built-in app (both composed in process with
Hydra's compose API) are checked by one validator, so each input gets the same answer or the same
sentence everywhere. Also: a metric, audit set or group key that no run has is an error naming what
the runs have, in Python as at the command line."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.fast_sqlite import no_sync_module  # noqa: F401 (autouse: its stores commit without a disk sync)
from helpers.store import synthetic_sweep
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

import recipe_audit
from recipe_audit import cli
from recipe_audit.app import config_dir
from recipe_audit.app import main as app_main
from recipe_audit.app.callback import CallbackOptionError
from recipe_audit.app.schema import register_configs
from recipe_audit.cards.model import CardOptions
from recipe_audit.stats.floors import sample_floor

register_configs()

EPS_WORDS = "must lie strictly between 0 and 1"
DELTA_WORDS = "must lie strictly between 0 and 0.5 (one-sided bounds need delta < 0.5)"
TAU_WORDS = "The release bar tau = 1.5 lies outside [0, 1], where the accuracy"
BUDGET_WORDS = "eps = 1e-300 is too small to certify with at most 10^15 reruns"
FAMILY_WORDS = "must lie between 1 and 10^15"

# (options as typed, the words every door answers with; None: accepted by every door)
TABLE = [
    ({"eps": "1.5"}, EPS_WORDS),
    ({"eps": "0"}, EPS_WORDS),
    ({"delta": "0.5"}, DELTA_WORDS),
    ({"delta": "0.7"}, DELTA_WORDS),  # the built-in app once took delta < 1, the callback and CLI < 0.5
    ({"eps": "1e-300"}, BUDGET_WORDS),
    ({"taus": ["1.5"]}, TAU_WORDS),
    ({"family_size": "0"}, FAMILY_WORDS),
    ({"eps": "0.1", "delta": "0.31381059609"}, None),  # δ = 0.9**11 exactly: floor 11 at every door
    # δ = 0.85**8 exactly, 16 digits (issue 41): floor 8 at every door (Python's float read 9)
    ({"eps": "0.15", "delta": "0.2724905250390625"}, None),
    ({"eps": "0.05", "delta": "0.05", "taus": ["0.6", "0.8"]}, None),
    ({"family_size": "10"}, None),
    ({"anytime": True}, None),
]
HYDRA_OPTIONS = ("eps", "delta", "taus")  # what the callback and the built-in app take


def _cli_args(opts: dict) -> list[str]:
    out = []
    for k, v in opts.items():
        if k == "taus":
            out += ["--tau", *v]
        elif k == "anytime":
            out += ["--anytime"] if v else []
        else:
            out += [f"--{k.replace('_', '-')}", str(v)]
    return out


def _py(opts: dict) -> dict:
    return {k: (v if k == "anytime" else [float(t) for t in v] if k == "taus" else
                int(v) if k == "family_size" else float(v)) for k, v in opts.items()}


def _hydra_overrides(opts: dict, prefix: str) -> list[str]:
    return [f"{prefix}{k}=[{','.join(v)}]" if k == "taus" else f"{prefix}{k}={v}" for k, v in opts.items()]


def _answer(fn):
    """('ok', value) or ('error', the sentence)."""
    try:
        return "ok", fn()
    except (ValueError, CallbackOptionError, app_main.ConfigurationError) as exc:
        return "error", str(exc)


# -- the doors -------------------------------------------------------------------------------


def _cli(argv, capsys):
    try:
        rc = cli.main(argv)
    except SystemExit as exc:  # argparse: its own sentence, exit 2
        rc = exc.code
    captured = capsys.readouterr()
    if rc != 0:  # the one sentence is the last line (MLflow may log before it)
        raise ValueError(captured.err.strip().splitlines()[-1])
    return captured.out


def cli_bound(opts, capsys):
    return json.loads(_cli(["bound", "-k", "0", "-n", "40", *_cli_args(opts), "--json"], capsys))


def cli_card(opts, capsys, tmp_path):
    path = tmp_path / "card.json"
    _cli(["card", "--experiment-name", "exp", *_cli_args(opts), "--json", str(path)], capsys)
    return json.loads(path.read_text())


def py_card(opts):
    return recipe_audit.card("exp", **_py(opts)).doc


def app_options(opts):
    """The built-in app: its own check of the composed ``audit`` section, then the callback it adds
    (whose options interpolate that section) as it checks them when a sweep starts."""
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=_hydra_overrides(opts, "audit."), return_hydra_config=True)
    app_main._check_audit(OmegaConf.to_object(cfg.audit))  # the typed AuditConfig the app checks
    callback = instantiate(cfg.hydra.callbacks.recipe_audit)
    return callback.card_options(cfg)


PLAIN_APP = """\
defaults:
  - _self_
hydra:
  searchpath:
    - pkg://recipe_audit.app.hydra_conf
seed: 0
"""


def plain_callback_options(opts, tmp_path):
    """A plain Hydra app with hydra/callbacks=recipe_audit on a metric of its own (not an accuracy)."""
    conf = tmp_path / "plain_conf"
    conf.mkdir(exist_ok=True)
    (conf / "config.yaml").write_text(PLAIN_APP)
    over = ["hydra/callbacks=recipe_audit", "hydra.callbacks.recipe_audit.metric=accuracy/calibration",
            *_hydra_overrides(opts, "hydra.callbacks.recipe_audit.")]
    with initialize_config_dir(str(conf), version_base="1.3"):
        cfg = compose("config", overrides=over, return_hydra_config=True)
    return instantiate(cfg.hydra.callbacks.recipe_audit).card_options(cfg)


# -- the table -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swept(tmp_path_factory, migrated_mlflow_db):
    """One sweep of 25 reruns (seed 3 collapsed), written once: every test here only reads it
    (a card without ``--log-run`` writes nothing)."""
    db = tmp_path_factory.mktemp("doors") / "mlflow.db"
    shutil.copy(migrated_mlflow_db, db)
    uri = f"sqlite:///{db}"
    synthetic_sweep(uri, {s: (0.5 if s == 3 else 0.9) for s in range(25)})
    return uri


@pytest.fixture
def read_store(store, swept, monkeypatch):
    """The module's sweep as the store every door reads (``MLFLOW_TRACKING_URI``), with the suite's
    ``store`` fixture's set-up and its checks after the test."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", swept)
    return swept


@pytest.mark.parametrize("opts, words", TABLE, ids=[json.dumps(o) for o, _ in TABLE])
def test_every_door_gives_the_same_answer(read_store, tmp_path, capsys, opts, words):
    answers = {
        "recipe-audit bound": _answer(lambda: cli_bound(opts, capsys)),
        "recipe-audit card": _answer(lambda: cli_card(opts, capsys, tmp_path)),
        "recipe_audit.card": _answer(lambda: py_card(opts)),
    }
    if "taus" not in opts:
        bound_kw = _py(opts)
        answers["recipe_audit.bound"] = _answer(lambda: recipe_audit.bound(0, 40, **bound_kw))
    else:  # the bound takes no τ
        del answers["recipe-audit bound"]
    if set(opts) <= set(HYDRA_OPTIONS):
        answers["built-in app"] = _answer(lambda: app_options(opts))
        answers["callback"] = _answer(lambda: plain_callback_options(opts, tmp_path))

    if words is not None:
        for door, (kind, text) in answers.items():
            assert kind == "error", f"{door} took {opts}"
            assert words in text, f"{door}: {text}"
        return
    for door, (kind, value) in answers.items():
        assert kind == "ok", f"{door}: {value}"
    # the bound: the reading asked for at the top, the same at the command line and in Python
    if "recipe-audit bound" in answers:
        out, obj = answers["recipe-audit bound"][1], answers["recipe_audit.bound"][1]
        assert (out["verdict"], out["upper_bound"], out["sample_floor"]) == (obj.verdict, obj.upper, obj.sample_floor)
        if "family_size" in opts or opts.get("anytime"):
            assert out["pointwise"]["verdict"] == obj.pointwise_verdict
    # the card: the same cells, verdicts and bounds at the command line and in Python
    a, b = answers["recipe-audit card"][1], answers["recipe_audit.card"][1]
    assert a["options"] == b["options"]
    assert [(e["tau"], e["verdict"], e["upper_bound"], e["sample_floor"]) for e in a["cells"]] == [
        (e["tau"], e["verdict"], e["upper_bound"], e["sample_floor"]) for e in b["cells"]]
    # the Hydra doors build the same card options as the command line's card
    asked = CardOptions.from_config(a["options"])
    for door in ("built-in app", "callback"):
        if door in answers:
            got = answers[door][1]
            assert (got.taus, got.eps, got.delta) == (asked.taus, asked.eps, asked.delta), door
            assert sample_floor(got.eps, got.delta) == a["cells"][0]["sample_floor"], door
    if "family_size" in opts or opts.get("anytime"):  # the reading asked for leads every card entry
        for e in (*a["cells"], *b["cells"]):
            lead = e["family"] if "family_size" in opts else e["anytime"]
            assert (e["verdict"], e["upper_bound"]) == (lead["verdict"], lead["upper_bound"])
            assert e["pointwise"]["verdict"] in ("release-supported", "unsupported", "insufficient-evidence")
        assert recipe_audit.Card(b).verdict == b["cells"][0]["verdict"]
    tie_floor = {"0.31381059609": 11, "0.2724905250390625": 8}.get(opts.get("delta"))  # they were 12 and 9
    if tie_floor is not None:  # an exact tie: the same floor at every door, Python's float included
        assert a["cells"][0]["sample_floor"] == b["cells"][0]["sample_floor"] == tie_floor
        assert answers["recipe-audit bound"][1]["sample_floor"] == answers["recipe_audit.bound"][1].sample_floor \
            == tie_floor


# -- what only the store knows: the same sentence in Python as at the command line ---------------


@pytest.mark.parametrize("kw, argv, words", [
    # the example: a metric no run logged was a card (refused-shift, NaN) in Python
    ({"metric": "val_acc"}, ["--metric", "val_acc"], "val_acc"),
    ({"metric": "accuracy/nowhere"}, ["--audit", "nowhere"], "nowhere"),
    ({"group_by": ["params.lr"]}, ["--group-by", "params.lr"], "No rerun in experiment 'exp' has the key 'params.lr'"),
    ({"seed_key": "params.nope"}, ["--seed-key", "params.nope"], "has the seed key 'params.nope'"),
])
def test_a_key_no_run_has_is_named_in_python_as_at_the_command_line(read_store, capsys, kw, argv, words):
    with pytest.raises(ValueError) as info:
        recipe_audit.card("exp", **kw)
    with pytest.raises(ValueError) as cli_info:
        _cli(["card", "--experiment-name", "exp", *argv], capsys)
    assert words in str(info.value) and words in str(cli_info.value)
    assert str(info.value) == str(cli_info.value).removeprefix("recipe-audit: error: ")
    assert "'accuracy/calibration'" in str(info.value) or "'params.seed'" in str(info.value)  # what is there
