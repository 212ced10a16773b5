"""3-vectors as tuples in compiled kernels: ``(x, y, z)`` values, no array allocation.

A kernel that builds many small vectors (the RNEA derivative sweeps, the box-contact geometry)
keeps them in registers as tuples; these are their operations. All lengths in the caller's
units; ``m`` and ``a`` arrays are float64.
"""

from diffsim_ros._compiled import njit

__all__ = ["add3", "cross3", "dot3", "mat3_vec", "put3", "row3", "scale3", "sub3"]


@njit(cache=True)
def row3(a, i):
    return (a[i, 0], a[i, 1], a[i, 2])


@njit(cache=True)
def put3(a, i, x):
    a[i, 0], a[i, 1], a[i, 2] = x[0], x[1], x[2]


@njit(cache=True)
def cross3(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


@njit(cache=True)
def add3(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


@njit(cache=True)
def sub3(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


@njit(cache=True)
def scale3(a, s):
    return (a[0] * s, a[1] * s, a[2] * s)


@njit(cache=True)
def dot3(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@njit(cache=True)
def mat3_vec(m, a):
    """``m @ a`` for m (3, 3)."""
    return (
        m[0, 0] * a[0] + m[0, 1] * a[1] + m[0, 2] * a[2],
        m[1, 0] * a[0] + m[1, 1] * a[1] + m[1, 2] * a[2],
        m[2, 0] * a[0] + m[2, 1] * a[1] + m[2, 2] * a[2],
    )
