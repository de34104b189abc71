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
