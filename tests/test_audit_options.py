"""The audit options are declared once (recipe_audit.stats.options.AuditOptions): an option added
there reaches every door, and the curtailing sweeper reads them through the one validator."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from helpers import procs
from helpers.sweepers import make_sweeper
from hydra.errors import HydraException
from omegaconf import OmegaConf

# In a fresh interpreter: one field added to AuditOptions (a test-only subclass put in its place
# before any door is imported), then every door asked about it. Prints one JSON object.
_KNOB_SCRIPT = textwrap.dedent('''
    import contextlib, dataclasses, inspect, io, json

    from recipe_audit.stats import options


    def small(value):
        if isinstance(value, bool) or str(value).strip() not in [str(i) for i in range(1, 10)]:
            raise ValueError(value)
        return int(value)


    @dataclasses.dataclass(frozen=True)
    class WithKnob(options.AuditOptions):
        knob: int = options.option(3, "must be a whole number from 1 to 9", small, flag="--knob",
                                   help="a throwaway option (default {default})")


    options.AuditOptions = WithKnob  # the one place the option is added

    import pandas as pd
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from recipe_audit import api, cli
    from recipe_audit.app import config_dir
    from recipe_audit.app import main as app_main
    from recipe_audit.app.callback import CallbackOptionError
    from recipe_audit.app.main import ConfigurationError
    from recipe_audit.app.schema import RecipeAuditCallbackConfig, register_configs
    from recipe_audit.cards.model import CardOptions

    out = {}
    # the command line: the option, its help, its value in the card's options, the validator's sentence
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
        cli.main(["card", "--help"])
    out["cli_help"] = " ".join(help_text.getvalue().split())
    seen, checked = {}, CardOptions.from_config

    def stop_after(*args, **kwargs):  # the card's options the command built, then no store is read
        seen["knob"] = checked(*args, **kwargs).knob
        raise ValueError("stop here")

    CardOptions.from_config = stop_after
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        out["cli_rc"] = [cli.main(["card", "--experiment-name", "x", "--knob", v]) for v in ("5", "12")]
    CardOptions.from_config = checked
    out["cli_knob"], out["cli_err"] = seen.get("knob"), err.getvalue().splitlines()

    # the Python API: a keyword of card and card_from_runs, checked by the validator
    runs = pd.DataFrame({"seed": range(30), "accuracy": [0.9] * 30})
    out["api_signature"] = str(inspect.signature(api.card_from_runs).parameters["knob"])
    out["api_card"] = api.card_from_runs(runs, "accuracy", knob=5).verdict
    try:
        api.card_from_runs(runs, "accuracy", knob=12)
    except ValueError as exc:
        out["api_err"] = str(exc)

    # Hydra: the built-in app's audit node, the callback's schema and its interpolation of the node
    register_configs()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=["audit.knob=7"], return_hydra_config=True)
        bad = compose("config", overrides=["audit.knob=12"], return_hydra_config=True)
        try:
            compose("config", overrides=["audit.knob=seven"])
        except Exception as exc:
            out["hydra_type_error"] = type(exc).__name__
    out["schema_default"] = RecipeAuditCallbackConfig().knob
    out["audit_node"] = cfg.audit.knob
    out["callback_raw"] = OmegaConf.to_container(cfg.hydra.callbacks.recipe_audit, resolve=False)["knob"]
    callback = instantiate(cfg.hydra.callbacks.recipe_audit)
    out["callback_option"] = callback.options["knob"]
    out["callback_card_option"] = callback.card_options(cfg).knob
    try:
        instantiate(bad.hydra.callbacks.recipe_audit).card_options(bad)
    except CallbackOptionError as exc:
        out["callback_err"] = str(exc)
    # the built-in app's own check of its audit node
    try:
        app_main._check_audit(OmegaConf.to_object(bad.audit))
    except ConfigurationError as exc:
        out["app_err"] = str(exc)
    out["card_options"] = CardOptions.from_config({"knob": "4"}).knob
    print(json.dumps(out))
''')


def test_an_option_declared_once_reaches_every_door(tmp_path):
    """One field added to AuditOptions (a test-only subclass in its place), nothing else: the
    command line offers it (flag, help, default) and hands it to the card's options, the Python
    API takes it as a keyword, the built-in app's audit node and the callback's schema have it, the
    app's callback interpolates it, and every door refuses a bad value with the declared words."""
    proc = procs.run([sys.executable, "-c", _KNOB_SCRIPT],
                     capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "--knob KNOB a throwaway option (default 3) --band-method" in out["cli_help"]
    assert out["cli_rc"] == [2, 2] and out["cli_knob"] == 5
    assert out["cli_err"] == ["recipe-audit: error: stop here",
                              "recipe-audit: error: --knob must be a whole number from 1 to 9, not '12'."]
    assert out["api_signature"] == "knob: int = 3" and out["api_card"] == "release-supported"
    assert out["api_err"] == "knob must be a whole number from 1 to 9, not 12."
    assert out["hydra_type_error"] == "ConfigCompositionException"
    assert (out["schema_default"], out["audit_node"], out["callback_raw"]) == (3, 7, "${audit.knob}")
    assert (out["callback_option"], out["callback_card_option"], out["card_options"]) == (7, 7, 4)
    assert out["callback_err"] == "audit.knob must be a whole number from 1 to 9, not 12."
    assert out["app_err"] == "audit.knob must be a whole number from 1 to 9, not 12."


def _with_callback(sweeper, **options):
    """``sweeper``'s config with the recipe_audit callback's node (its options, metric val_loss)."""
    sweeper.config = OmegaConf.merge(sweeper.config, {"hydra": {"callbacks": {"recipe_audit": {
        "metric": "val_loss", **options}}}})
    return sweeper


def test_the_sweeper_reads_the_callbacks_direction(tmp_path):
    """With the callback configured, the sweeper holds each rerun to the callback's
    higher_is_better (a loss fails above τ), and takes every option's default from the declaration."""
    low = _with_callback(make_sweeper(tmp_path, lambda ov: {"val_loss": 0.6}, batch_size=3),
                         taus=[0.5], higher_is_better=False)
    low.sweep(["seed=range(30)"])
    assert low.record["higher_is_better"] is False and low.record["metric"] == "val_loss"
    assert low.groups[0].launched == 3 and low.record["groups"][0]["failures"] == [3]  # 0.6 > 0.5: failed
    good = _with_callback(make_sweeper(tmp_path, lambda ov: {"val_loss": 0.4}, batch_size=3),
                          taus=[0.5], higher_is_better=False)
    good.sweep(["seed=range(30)"])
    assert good.record["groups"][0]["failures"] == [0] and good.groups[0].launched == 30
    plain = _with_callback(make_sweeper(tmp_path, lambda ov: {"val_loss": 0.4}))
    plain.config.hydra.callbacks.recipe_audit.pop("eps", None)
    assert {k: plain._audit()[k] for k in ("taus", "eps", "delta", "higher_is_better")} == {
        "taus": [0.7], "eps": 0.1, "delta": 0.1, "higher_is_better": True}


@pytest.mark.parametrize("where, options, sentence", [
    ("callback", {"delta": 0.7}, "hydra.callbacks.recipe_audit.delta must lie strictly between 0 and 0.5 "
                                 "(one-sided bounds need delta < 0.5), not 0.7."),
    ("callback", {"unfinished": "skip"}, "hydra.callbacks.recipe_audit.unfinished must be 'fail' or 'refuse', "
                                         "not 'skip'."),
    ("callback", {"taus": []}, "hydra.callbacks.recipe_audit.taus must be finite numbers, at least one, not []."),
    ("audit", {"eps": 2.0}, "audit.eps must lie strictly between 0 and 1, not 2.0."),
    ("audit", {"taus": [1.5]}, "The release bar tau = 1.5 lies outside [0, 1], where the accuracy "
                               "'accuracy/calibration' lies, so every rerun would fail it whatever it scored."),
    ("audit", {"higher_is_better": "yes"}, "audit.higher_is_better must be true or false, not 'yes'."),
])
def test_the_sweeper_refuses_what_the_validator_refuses(tmp_path, where, options, sentence):
    """The sweeper checks the card's options with the one validator (the callback's, or without one
    the app's audit node), naming the key the user set, before it launches anything."""
    sw = make_sweeper(tmp_path, lambda ov: {"calibration": 0.9})
    if where == "callback":
        _with_callback(sw, **options)
    else:
        sw.config.audit = OmegaConf.merge(sw.config.audit, options)
    with pytest.raises(HydraException) as info:
        sw.sweep(["seed=range(30)"])
    assert str(info.value) == sentence
    assert sw.launcher.batches == []
