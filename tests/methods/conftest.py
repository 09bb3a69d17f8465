"""Library tests work on small tensors: one intra-op thread (a second only spins against other
jobs on 2 cores; a 0.2 s test took 25 s under load with 2 threads)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
