"""Models trained or run in the test process use one torch thread while a test module runs.

torch's default is a thread per core. The models trained in process here are tiny (a hidden
size of 64 or less, batches of 16), so a second thread has little to split; on a busy machine
its threads wait on each other instead: one rerun of ``tests/test_train.py`` took 55 s with two
threads and 1.6 s with one at a load of 12 on this project's 2-core VM, with the same final loss
and accuracies. The number is put back when the module ends: the modules that check thread
counts see torch's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

__all__ = ["one_torch_thread"]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
