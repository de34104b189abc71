"""The query tests' stores: fixtures from ``helpers.query_stores`` (the autouse one resets MLflow's
module state around each test of this folder)."""

from helpers.query_stores import *  # noqa: F403 (the fixtures)
