"""The README and the docs site: the README's links lead somewhere, and nothing a user reads cites
the engineers' statistics reference (the docs explain every method in their own words). The site
itself is built with ``mkdocs build --strict`` in CI (.ci/run), which fails on a broken link,
anchor or API reference."""

from __future__ import annotations

import re

import pytest
from helpers.app import REPO

# what users read: the package (docstrings, help texts, schema descriptions, Hydra config
# comments), the plugins, presets, benchmarks, examples and docs
USER_FACING = ["recipe_audit", "hydra_plugins", "launchers", "bench", "examples", "docs"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json"}


def test_readme_links_exist():
    text = (REPO / "README.md").read_text()
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in link]
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.exists(), f"README links to {link}, which does not exist"
        if anchor and target.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", target.read_text(), flags=re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README links to {link}: no such heading"


def test_readme_keeps_the_test_command_ci_runs():
    assert "python -m pytest" in (REPO / "README.md").read_text()
    assert "\npython -m pytest\n" in (REPO / ".ci" / "run").read_text()


@pytest.mark.parametrize("folder", USER_FACING)
def test_nothing_user_facing_cites_the_spec(folder):
    cited = []
    for path in sorted((REPO / folder).rglob("*")):
        if path.suffix in SUFFIXES and path.is_file():
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if re.search(r"\bSPEC\b|SPEC\.md", line):
                    cited.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not cited, "cite the project's own docs instead:\n" + "\n".join(cited)


def test_the_tests_development_md_names_exist():
    """docs/development.md's "A room per change" names the tests that cover each change: every
    ``tests/<file>.py`` it names exists, and so does every ``::test_name`` it names in that file
    (``::name`` right after another one is in the same file)."""
    import ast

    text = (REPO / "docs" / "development.md").read_text()
    table = text[text.index("## A room per change"):]
    named = re.findall(r"`(tests/[\w/]+\.py)((?:::\w+)?)`|`::(\w+)`", table)
    assert len(named) >= 10
    missing, current = [], None
    for path, test, alone in named:
        if path:
            current = REPO / path
            if not current.is_file():
                missing.append(path)
                continue
        name = (test or "").lstrip(":") or alone
        if name:
            tree = ast.parse(current.read_text())
            if name not in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}:
                missing.append(f"{current.relative_to(REPO)}::{name}")
    assert missing == []


def _bench(monkeypatch, name: str):
    import importlib

    monkeypatch.syspath_prepend(str(REPO / "bench"))
    return importlib.import_module(name)


def _floor_tables(slow: bool):
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    try:
        import floors
    finally:
        sys.path.remove(str(REPO / "bench"))
    return [pytest.param(page, table, id=table.__name__, marks=[pytest.mark.slow] if slow else [])
            for page, tables in floors.TABLES.items() for table in tables
            if (table.__name__ == "band_table") == slow]


@pytest.mark.parametrize(("page", "table"), _floor_tables(slow=False) + _floor_tables(slow=True))
def test_the_floor_tables_are_the_ones_bench_floors_prints(page, table):
    """Every floor table in the docs is, cell for cell, what ``python bench/floors.py`` prints (the
    floors are exact: any machine prints the same), and the page names the command beside it. The
    band's floors take seconds to search: that table is checked with the slow tests."""
    text = (REPO / page).read_text()
    assert "python bench/floors.py" in text, page
    assert table() in text, f"{page}: the table differs from python bench/floors.py's:\n{table()}"


def test_the_after_looking_tables_are_the_ones_simulate_promise_prints(monkeypatch, capsys):
    """docs/family_and_anytime.md's tables of the best of M and of seeds added until the card looks
    good are what ``python bench/simulate_promise.py --only-after-looking`` prints: the exact
    probabilities and the seeded simulation beside them (about a second)."""
    sim = _bench(monkeypatch, "simulate_promise")
    monkeypatch.setattr("sys.argv", ["simulate_promise.py", "--only-after-looking"])
    assert sim.main() == 0
    tables = [block for block in capsys.readouterr().out.split("\n\n") if block.startswith("| ")]
    assert len(tables) == 3
    text = (REPO / "docs" / "family_and_anytime.md").read_text()
    assert "python bench/simulate_promise.py --only-after-looking" in text
    for table in tables:
        assert table in text, f"docs/family_and_anytime.md differs from the command's table:\n{table}"


@pytest.mark.slow
def test_the_promise_tables_are_the_ones_simulate_promise_prints(monkeypatch, capsys):
    """docs/guide/stop-early.md's two tables of the simulated promise (N = 59 and N = 120) are what
    ``python bench/simulate_promise.py`` prints (seeded; about a minute of CPU)."""
    sim = _bench(monkeypatch, "simulate_promise")
    monkeypatch.setattr("sys.argv", ["simulate_promise.py"])
    assert sim.main() == 0
    out = capsys.readouterr().out
    head = out[:out.index("## Choosing after looking")]
    tables = [block for block in head.split("\n\n") if block.startswith("| ")]
    assert len(tables) == 2
    text = (REPO / "docs" / "guide" / "stop-early.md").read_text()
    for table in tables:
        assert table in text, f"docs/guide/stop-early.md differs from the command's table:\n{table}"


def _rule_rows(text: str) -> dict[str, str]:
    """The common-practice table of a page: rule -> statistic (the first table whose header is
    ``| rule | statistic | ships at τ = 0.7? |``)."""
    block = text[text.index("| rule | statistic | ships at τ = 0.7? |"):].split("\n\n")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()[2:]]
    return {r[0]: r[1] for r in rows}


def test_the_default_sweeps_numbers_agree_across_pages():
    """The README, the home page and "Cards and how to read them" state the same 59 reruns of the
    default recipe (printed at the end of ``python -m recipe_audit -m``): their common-practice
    tables agree, and U and L are the exact bounds for 6 failures in 59 (``recipe-audit bound -k 6
    -n 59``), so a page changed alone, or a bound that moved, fails here."""
    import recipe_audit

    readme = (REPO / "README.md").read_text()
    cards = (REPO / "docs" / "guide" / "cards.md").read_text()
    index = (REPO / "docs" / "index.md").read_text()
    ours, theirs = _rule_rows(readme), _rule_rows(cards)
    assert len(ours) == 5 and ours == theirs
    b = recipe_audit.bound(6, 59)
    u, low = f"{b.upper:.3f}", f"{b.lower:.3f}"
    assert ours["recipe card: U ≤ ε and N ≥ N_min"] == f"U = {u}"
    assert f"| {u} |" in cards and f"| lower bound L | {low} |" in cards
    assert f"The mean ({ours['mean ≥ τ']})" in index and f"U = {u}" in index


# The documented commands that write reruns into the README's experiment (`recipe_audit`, the
# built-in trainer's default), each with why it leaves the README's card (6/59, U 0.172) as command
# 1 printed it. Every other documented command that trains names another experiment or store.
INTO_THE_READMES_EXPERIMENT = {
    "python -m recipe_audit -m": "the README's command 1: the card itself",
    "python -m recipe_audit -m 'seed=range(59)'": "command 1 spelled out: the same 59 seeds",
    "python -m recipe_audit -m 'seed=range(59)' hydra.sweep.dir=DIR tracking.resume=true":
        "completes command 1's sweep when it was interrupted (trains only the seeds left)",
    "python -m recipe_audit": "the program named in a sentence, not a command to run",
}
# what makes a built-in trainer command write elsewhere, or nowhere
ELSEWHERE = ("tracking.experiment_name=", "tracking.uri=", "experiment=acceptance")  # acceptance cells are no reruns


def _documented_commands() -> list[tuple[str, str]]:
    """Every command of the built-in trainer or an example app that the README, examples/README.md
    and the docs show (fenced blocks and inline code, continuation lines joined; not the change
    notes, which quote old commands): (page, command)."""
    pages = [REPO / "README.md", REPO / "examples" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        if page.name == "changes.md":
            continue
        text = page.read_text()
        blocks = re.findall(r"^```.*?^```", text, flags=re.M | re.S)  # one command a line, \\ continues it
        prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
        spans = [re.sub(r"\n\s*", " ", m) for m in re.findall(r"`([^`]+)`", prose)]  # inline code may wrap
        for chunk in [re.sub(r"\\\n\s*", " ", b) for b in blocks] + spans:
            for m in re.finditer(r"python (?:-m recipe_audit|examples/[\w/]+train\.py)(?![\w.])[^\n`|#]*", chunk):
                found.append((str(page.relative_to(REPO)), m.group(0).strip()))
    return found


def test_every_walkthrough_keeps_the_readmes_card():
    """After following the README and the guides, ``recipe-audit card --experiment-name
    recipe_audit`` still prints the README's 6/59, U 0.172: every documented command that trains
    either names an experiment (or store) of its own or is one of the few accounted for above; every
    example-app command with the plugin names its own experiment (all the apps' jobs are called
    ``train``: in one store they would share an experiment). Checked on the text, in process."""
    import shlex

    from recipe_audit.__main__ import CLI_COMMANDS  # the command words: they read, they train nothing

    commands = _documented_commands()
    assert len(commands) >= 40
    unaccounted = []
    for page, cmd in commands:
        if "<" in cmd:  # a placeholder (python -m recipe_audit <name>, examples/<app>/train.py ...)
            continue
        args = shlex.split(cmd)
        if args[1] == "-m" and args[2] == "recipe_audit":
            rest = args[3:]
            if rest and rest[0] in CLI_COMMANDS:  # python -m recipe_audit card ...: reads, trains nothing
                continue
            if any(a.startswith(ELSEWHERE) for a in rest) or cmd in INTO_THE_READMES_EXPERIMENT:
                continue
        elif "hydra/callbacks=recipe_audit" not in args:  # an example app without the plugin: MLflow's own store
            continue
        elif any(a.startswith("hydra.callbacks.recipe_audit.experiment_name=") for a in args):
            continue
        unaccounted.append(f"{page}: {cmd}")
    assert unaccounted == [], "these documented commands write into a shared experiment:\n" + "\n".join(unaccounted)


def test_the_experiment_overrides_the_docs_use_reach_the_callback():
    """``tracking.experiment_name=X`` (the built-in trainer) is the experiment its sweep writes into,
    composed as the app composes it; ``hydra.callbacks.recipe_audit.experiment_name`` is an option
    of the callback in any app."""
    import dataclasses

    from hydra import compose, initialize_config_dir

    from recipe_audit.app import config_dir
    from recipe_audit.app.schema import RecipeAuditCallbackConfig, register_configs

    register_configs()
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        default = compose("config", return_hydra_config=True)
        named = compose("config", ["tracking.experiment_name=registry"], return_hydra_config=True)
    assert default.hydra.callbacks.recipe_audit.experiment_name == "recipe_audit"
    assert named.hydra.callbacks.recipe_audit.experiment_name == "registry"
    assert "experiment_name" in {f.name for f in dataclasses.fields(RecipeAuditCallbackConfig)}
