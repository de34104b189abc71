"""The store-reading tests' stores: fixtures from ``helpers.read_stores`` (the autouse one resets MLflow's
module state around each test of this folder); what the tests write commits without waiting for the
disk (``helpers.fast_sqlite``)."""

from helpers.fast_sqlite import no_sync_module  # noqa: F401 (the fixture)
from helpers.read_stores import *  # noqa: F403 (the fixtures)
