"""Shared fixtures of the control tests (no tests here)."""

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    """Small batched tensors: intra-op threads only add synchronization (10x slower on 2 busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
