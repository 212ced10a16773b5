"""Test-session settings.

torch's OpenMP parallel regions stall badly when the cores are oversubscribed (measured
~100x slower batched 3x3 products with 2 threads under load on the 2-core CI machine), and
the tests' tensors are small: one intra-op thread is both faster and deterministic. Under
pytest-xdist (``make test`` runs one worker per core) numba's parallel kernels get one thread too.
"""

import os

import torch

torch.set_num_threads(1)
if os.environ.get("PYTEST_XDIST_WORKER"):  # one worker per core already: no numba thread pools on top
    import numba

    numba.set_num_threads(1)
