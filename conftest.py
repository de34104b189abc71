"""For the package's docstring examples (``--doctest-modules`` over recipe_audit/): the MLflow
stores an example makes commit without waiting for the disk (``tests/helpers/fast_sqlite.py``
says why that is safe for a temporary store; ``recipe_audit.api.card``'s example writes 30 runs
to a new SQLite store). The tests' own fixtures are in ``tests/conftest.py``."""

from pathlib import Path

import pytest
from helpers.fast_sqlite import commits_without_sync

PACKAGE = Path(__file__).resolve().parent / "recipe_audit"


@pytest.fixture(autouse=True)
def _examples_commit_without_sync(request):
    if not request.node.path.is_relative_to(PACKAGE):
        yield
        return
    with commits_without_sync():
        yield
