"""Helpers shared by the test modules (no tests here).

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject's pytest options), so a test module
imports them as ``from helpers.app import run_app``:

- ``app``: ``python -m recipe_audit`` in a subprocess as a user runs it, and the small sizes that make
  a rerun take about a second;
- ``cli``: the ``recipe-audit`` command line run in-process;
- ``inprocess``: ``python -m recipe_audit`` or a user's ``train.py`` run in this process (bad input
  and other checks that need no process of their own);
- ``procs``: every process a test starts (``procs.run``, ``procs.spawn``: a transient EAGAIN is
  retried) and every time limit it waits under (``procs.timeout``: scaled for a busy machine);
- ``store``: a sweep logged the way recipe_audit logs one, without training;
- ``read_stores``, ``registry_world``, ``acceptance_synth``: the data the store-reading
  (``tests/store``), registry (``tests/release``) and acceptance tests read (the read_stores
  fixtures reach tests/store through its conftest.py).

Fixtures every test gets (its own MLflow store, no leaked run) are in ``tests/conftest.py``.
"""
