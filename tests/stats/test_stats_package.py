"""Package-level checks: doctests run, and the stats package stays pure numpy/scipy."""

from __future__ import annotations

import ast
import doctest
import importlib
from pathlib import Path

import pytest

import recipe_audit.stats as stats

MODULES = ["recipe_audit.stats", "recipe_audit.stats.bounds", "recipe_audit.stats.verdicts",
           "recipe_audit.stats.rules", "recipe_audit.stats.split_audit"]  # fmt: skip
FORBIDDEN = {"mlflow", "hydra", "omegaconf", "torch", "pandas"}


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), verbose=False)
    assert result.failed == 0


def test_tail_bound_has_a_doctest_and_reference():
    doc = stats.tail_bound.__doc__
    assert ">>>" in doc and "Clopper & Pearson (1934)" in doc


def test_no_heavy_imports():
    root = Path(stats.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for n in names:
                assert n.split(".")[0] not in FORBIDDEN, f"{path.name} imports {n}"


def test_public_api_exported():
    for name in stats.__all__:
        assert hasattr(stats, name), name
