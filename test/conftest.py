"""Test-session settings.

torch's OpenMP parallel regions stall badly when the cores are oversubscribed (measured
~100x slower batched 3x3 products with 2 threads under load on the 2-core CI machine), and
the tests' tensors are small: one intra-op thread is both faster and deterministic. Under
pytest-xdist (``make test`` runs one worker per core) numba's parallel kernels get one thread too.
"""

import os

import pytest
import torch

torch.set_num_threads(1)
if os.environ.get("PYTEST_XDIST_WORKER"):  # one worker per core already: no numba thread pools on top
    import numba

    numba.set_num_threads(1)


# Longest files first (longest-processing-time-first scheduling). ``make test`` runs
# ``--dist loadfile``: a file runs whole on one worker, and the files are handed out in this
# order as workers free up, so the long ones no longer start last and leave the other worker idle
# at the end. Measured on a fresh clone (per-file wall times, see the commit that set this
# list); a file missing here keeps its collection order after these. Only the order changes.
LONGEST_FIRST = (
    "test_contact_estimation_scenes.py",
    "test_contact_estimation.py",
    "test_pbd_fidelity.py",
    "test_estimation_motion.py",
    "test_estimation_bags.py",
    "test_calibration_outputs.py",
    "test_nodes_closed_loop.py",
    "test_demo_smoke.py",
    "test_mpc_fast.py",
    "test_estimation_online.py",
    "test_large_step.py",
    "test_dynamics_identities.py",
    "test_ros_graph.py",
    "test_derivatives.py",
    "test_online_replay.py",
    "test_pbd_fast.py",
    "test_estimation_torques.py",
    "test_bad_input_matrix.py",
)


def pytest_configure(config):
    # xdist would otherwise reorder the files by their number of tests (many cheap tests first).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: within a file, order kept
