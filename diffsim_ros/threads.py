"""How many threads the library's numerical kernels use: one by default, in every process.

torch's intra-op pool and numba's parallel kernels each default to one thread per core. On a
robot workstation the cores are shared (a controller, a camera pipeline, other nodes), and
threads that wait for a busy core stall the whole operation: a calibration measured 2.5-3x
its single-threaded CPU time, and 1.5-10x its wall time, with the defaults on a busy 2-core
machine (issue 44). The batches here are small, so one thread loses little on an idle machine.
"""

import os

__all__ = ["DEFAULT_THREADS", "NATIVE_THREAD_VARIABLES", "limit_native_threads", "set_threads"]

DEFAULT_THREADS = 1
"""Threads of torch and numba unless a command or node parameter asks for more."""


NATIVE_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Environment variables that size the native pools (numpy's and scipy's BLAS, OpenMP) when they load."""


def limit_native_threads(threads=DEFAULT_THREADS):
    """Default the native thread pools to ``threads`` where the environment does not size them.

    BLAS and OpenMP read these variables once, when numpy, scipy or torch loads, so this must
    run before them: the command line and the nodes call it first. Measured on a busy 2-core
    machine: a rigid calibration's fit took 12.3 s of CPU with OpenBLAS's default of one
    thread per core and 5.3 s with one (its SVDs and covariances spin waiting for a core).
    A variable the user set is kept.
    """
    for name in NATIVE_THREAD_VARIABLES:
        os.environ.setdefault(name, str(int(threads)))


def set_threads(threads=DEFAULT_THREADS):
    """Use ``threads`` (>= 1) torch intra-op threads and, within numba's pool, numba threads.

    Raises:
        ValueError: ``threads`` below 1.
    """
    threads = int(threads)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a declared dependency
        return
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
