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
