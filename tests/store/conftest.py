"""The store-reading tests' stores: fixtures from ``helpers.read_stores`` (the autouse one resets MLflow's
module state around each test of this folder)."""

from helpers.read_stores import *  # noqa: F403 (the fixtures)
