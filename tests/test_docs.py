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
