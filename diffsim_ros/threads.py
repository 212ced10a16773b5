"""How many threads the library's numerical kernels use: one by default, in every process.

torch's intra-op pool and numba's parallel kernels each default to one thread per core. On a
robot workstation the cores are shared (a controller, a camera pipeline, other nodes), and
threads that wait for a busy core stall the whole operation: a calibration measured 2.5-3x
its single-threaded CPU time, and 1.5-10x its wall time, with the defaults on a busy 2-core
machine (issue 44). The batches here are small, so one thread loses little on an idle machine.
"""

__all__ = ["DEFAULT_THREADS", "set_threads"]

DEFAULT_THREADS = 1
"""Threads of torch and numba unless a command or node parameter asks for more."""


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
