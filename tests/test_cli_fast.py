"""``recipe-audit bound`` and every ``--help`` import only what they need (bench/bench_cli.py times
them), and the help states the true defaults."""

from __future__ import annotations

import json
import re
import sys

import pytest
from helpers import procs

from recipe_audit.cli import build_parser

HEAVY = ("pandas", "mlflow", "numpy", "scipy", "matplotlib", "torch", "sqlalchemy")


def _imported_by(argv: list[str]) -> tuple[int, str, list[str]]:
    """Run the CLI in a fresh interpreter; return its exit status, stdout and the heavy packages it imported."""
    code = ("import json, sys\nfrom recipe_audit.cli import main\n"
            f"try:\n    rc = main({argv!r})\nexcept SystemExit as e:\n    rc = e.code\n"
            f"print(json.dumps([rc, sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})]))")
    proc = procs.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rc, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    return rc, proc.stdout, heavy


@pytest.mark.parametrize("argv", [
    ["bound", "-k", "6", "-n", "59"],
    ["bound", "-k", "0", "-n", "59", "--eps", "1e-12", "--json"],
    ["bound", "-k", "300", "-n", "1000", "--delta", "0.01"],
    ["bound", "-k", "0", "-n", "59", "--delta", "0.9"],  # bad input: the sentence needs no more
])  # fmt: skip
def test_bound_imports_neither_pandas_nor_mlflow(argv):
    rc, _, heavy = _imported_by(argv)
    assert rc in (0, 2)
    assert heavy == [], heavy  # not even NumPy or SciPy for counts a sweep has


@pytest.mark.parametrize("command", [[], ["bound"], ["card"], ["acceptance"], ["attach"], ["gate"], ["verify"]])
def test_help_imports_nothing_heavy(command):
    rc, out, heavy = _imported_by([*command, "--help"])
    assert rc == 0 and "usage: recipe-audit" in out
    assert heavy == [], heavy


def _actions():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():
        for action in p._actions:
            yield name, action


def test_help_states_the_true_defaults():
    from recipe_audit.stats.defaults import DEFAULT_TAUS

    stated = 0
    for name, action in _actions():
        text = action.help or ""
        default = DEFAULT_TAUS[0] if action.dest == "taus" else action.default  # None on the parser: 0.7 applies
        for value in re.findall(r"default:? (-?\d[\d.]*)", text):
            assert float(value) == float(default), (name, action.option_strings, text, default)
            stated += 1
        if name in ("bound", "card") and action.default not in (None, False, True, "==SUPPRESS=="):  # a switch
            assert "default" in text, (name, action.option_strings, "states no default")
    assert stated >= 10


def test_acceptance_help_defaults_are_the_statistics_defaults():
    from recipe_audit.commands import acceptance as cmd
    from recipe_audit.stats import acceptance as gates

    for name in ("MECHANISM_CLASSES", "DEFAULT_BOUNDARY", "DEFAULT_RESAMPLES", "DEFAULT_LEVEL", "DEFAULT_MARGIN"):
        assert getattr(cmd, name) == getattr(gates, name), name


def test_no_help_cites_the_spec():
    for name, action in _actions():
        assert "SPEC" not in (action.help or ""), (name, action.option_strings)


def test_tracking_uri_help_names_the_true_default_store(tmp_path, monkeypatch):
    """Every --tracking-uri help names the store resolve_tracking_uri really opens by default."""
    from recipe_audit.store.tracking import DEFAULT_STORE_DIR, resolve_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    default = resolve_tracking_uri(None)
    assert default == f"sqlite:///{tmp_path.resolve() / DEFAULT_STORE_DIR / 'mlflow.db'}"
    helps = {name: " ".join((a.help or "").split()) for name, a in _actions() if a.dest == "tracking_uri"}
    assert set(helps) >= {"card", "attach", "gate", "verify", "acceptance"}
    for name, text in helps.items():
        assert "$MLFLOW_TRACKING_URI" in text and f"sqlite:///{DEFAULT_STORE_DIR}/mlflow.db" in text, (name, text)
        assert "./mlruns)" not in text and "sqlite:///./" not in text, (name, text)


def test_python_m_recipe_audit_forwards_a_command_word_to_the_cli():
    """``python -m recipe_audit card --help`` is the card command's help, not a Hydra override
    parser traceback."""
    import sys

    proc = procs.run([sys.executable, "-m", "recipe_audit", "card", "--help"], capture_output=True, text=True,
                     timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert proc.stdout.startswith("usage: recipe-audit card")


def test_the_command_words_python_m_forwards_are_the_clis_commands(monkeypatch):
    """A command is registered once (``recipe_audit.commands.COMMANDS``: word -> module): the parser
    has exactly those subcommands, in that order, each module registering exactly the words named
    for it, and ``python -m recipe_audit`` forwards the same words. A module whose words disagree
    with the registry stops the parser from being built."""
    import argparse

    from recipe_audit import cli, commands
    from recipe_audit.__main__ import CLI_COMMANDS

    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == list(commands.COMMANDS) == list(CLI_COMMANDS)
    assert set(cli.HANDLERS) == set(commands.COMMANDS)
    assert cli.HANDLERS["verify"].__module__ == "recipe_audit.commands.registry"
    monkeypatch.setattr(commands, "COMMANDS", {k: v for k, v in commands.COMMANDS.items() if k != "gate"})
    monkeypatch.setattr(cli, "COMMANDS", commands.COMMANDS)
    with pytest.raises(AssertionError, match=r"commands\.registry registers \['attach', 'gate', 'verify'\]"):
        cli.build_parser()


@pytest.mark.parametrize("argv", [["card", "--help"], ["bound", "-k", "0", "-n", "59"]])
def test_a_command_word_never_imports_hydra(argv):
    """``python -m recipe_audit card ...`` runs the command without loading Hydra or OmegaConf
    (the routing is in ``recipe_audit/__main__.py``, before the app is imported)."""
    import sys

    code = ("import runpy, sys\n"
            f"sys.argv = ['recipe_audit', *{argv!r}]\n"
            "try:\n    runpy.run_module('recipe_audit', run_name='__main__')\n"
            "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'hydra', 'omegaconf'})\n"
            "print('LOADED', loaded)\n")
    proc = procs.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "LOADED []"
    assert ("usage: recipe-audit card" if "--help" in argv else "verdict: release-supported") in proc.stdout


def test_unfinished_is_checked_by_the_one_validator(capsys, tmp_path, monkeypatch):
    """A bad --unfinished gets the validator's sentence (as the API and the apps), not argparse's."""
    from recipe_audit.cli import main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main(["card", "--experiment-name", "x", "--unfinished", "skip"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "recipe-audit: error: --unfinished must be 'fail' or 'refuse', not 'skip'."


def test_every_command_has_a_description_and_every_option_its_help():
    """``recipe-audit CMD --help`` says what the command does and what each option is."""
    import argparse

    from recipe_audit.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [f"{name}: no description" for name, p in sub.choices.items() if not p.description]
    missing += [f"{name} {'/'.join(a.option_strings) or a.dest}: no help" for name, p in sub.choices.items()
                for a in p._actions if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not missing, missing
    assert set(sub.choices) >= {"bound", "card", "attach", "gate", "verify", "acceptance"}
