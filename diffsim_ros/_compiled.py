"""``njit`` / ``prange`` from numba, or stand-ins so the same kernels run as plain Python without it."""

try:
    from numba import njit, prange
except ImportError:  # pragma: no cover - numba is a declared dependency
    prange = range

    def njit(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda fn: fn)


__all__ = ["njit", "prange"]
