"""Package-level checks: the stats package stays pure numpy/scipy, and its headline function documents
itself (the doctests of every module run through pytest's --doctest-modules)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import procs

import recipe_audit.stats as stats

FORBIDDEN = {"mlflow", "hydra", "omegaconf", "torch", "pandas"}


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


def test_the_scalar_statistics_need_neither_numpy_nor_scipy():
    """recipe-audit bound imports the exact module alone (the package imports names on first use)."""
    import sys

    code = ("import sys; from recipe_audit.stats import tail_bound; tail_bound(6, 59); tail_bound(0, 59, 1e-12); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'scipy', 'pandas'}))")
    out = procs.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
