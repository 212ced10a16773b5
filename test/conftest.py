"""Test-session settings.

torch's OpenMP parallel regions stall badly when the cores are oversubscribed (measured
~100x slower batched 3x3 products with 2 threads under load on the 2-core CI machine), and
the tests' tensors are small: one intra-op thread is both faster and deterministic.
"""

import torch

torch.set_num_threads(1)
