"""``njit`` from numba, or a no-op stand-in so the same kernels run as plain Python without it."""

try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a declared dependency

    def njit(*args, **kwargs):
        return args[0] if args and callable(args[0]) else (lambda fn: fn)


__all__ = ["njit"]
