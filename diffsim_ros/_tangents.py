"""Forward-mode AD without torch's Python shape functions for zero tangents.

In forward mode, an operand without a tangent (a constant, a Python number) gets a zero
tangent that torch represents by a ``ZeroTensor``; each operation on one computes only its
result's shape, by calling the operation's meta kernel. Since torch 2.x that kernel is, for
the elementwise arithmetic and ``linalg_cross``, a Python reference implementation
(``torch._refs``) with symbolic-shape guards: 0.2-0.7 ms per call on CPU, 30-50x the operation
itself (measured: ``dual * tensor`` 430 us, ``dual * dual`` 15 us, torch 2.13). Identification
pushes tangents through the dynamics in thousands of such operations, and spent most of its
time there.

:func:`lean_zero_tangents` registers shape-only meta kernels for those operations while a
Jacobian is computed and restores torch's on exit. They give torch's shape and dtype (all a
``ZeroTensor`` keeps), so the values computed are unchanged, bit for bit
(``test/test_tangents.py``). Measured (``benchmarks/RESULTS.md``, zero-tangents): a product of a
tangent and a constant 450 -> 49 us; online estimation (``diffsim-ros replay``, 10 s windows)
15.5 -> 9.9 s of CPU, a rigid calibration from 20 s of motion 12.2 -> 9.9 s.
"""

import contextlib
import threading
import warnings

import torch

__all__ = ["lean_zero_tangents"]

_BINARY = ("add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar", "mul.Tensor", "mul.Scalar")
_DIVISION = ("div.Tensor", "div.Scalar")
_lock = threading.RLock()
_depth = 0
_library = None


def _broadcast(a, b):
    """Broadcast shape of two shapes (tuples); plain Python, no symbolic-shape machinery.

    Raises:
        RuntimeError: The shapes do not broadcast (as torch's kernels do).
    """
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at non-singleton dimension {k}")
    return tuple(y if x == 1 else x for x, y in zip(a, b))


def _binary_meta(self, other, *args, **kwargs):
    """Meta of add, sub and mul: broadcast shape, promoted dtype."""
    shape = _broadcast(getattr(self, "shape", ()), getattr(other, "shape", ()))
    return torch.empty(shape, dtype=torch.result_type(self, other), device="meta")


def _div_meta(self, other, *args, **kwargs):
    """Meta of true division: as :func:`_binary_meta`, integers and booleans divide to floats."""
    out = _binary_meta(self, other)
    return out if out.dtype.is_floating_point or out.dtype.is_complex else out.to(torch.get_default_dtype())


def _cross_meta(self, other, *, dim=-1):
    """Meta of ``linalg_cross``, with torch's checks: the first operand's dtype."""
    if self.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    if self.shape[dim] != 3 or other.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {self.shape[dim]} and {other.shape[dim]}")
    return torch.empty(_broadcast(self.shape, other.shape), dtype=self.dtype, device="meta")


def _register():
    """A library holding the lean kernels, or None where this torch cannot take them or could
    not undo them (its own kernels then stay: slower, same values)."""
    library = None
    try:
        library = torch.library.Library("aten", "IMPL", "Meta")
        if not callable(getattr(library, "_destroy", None)):
            return None
        with warnings.catch_warnings():  # "overriding a previously registered kernel": intended, undone on exit
            warnings.simplefilter("ignore")
            for op in _BINARY:
                library.impl(op, _binary_meta)
            for op in _DIVISION:
                library.impl(op, _div_meta)
            library.impl("linalg_cross", _cross_meta)
    except (AttributeError, RuntimeError, TypeError):
        if library is not None and callable(getattr(library, "_destroy", None)):
            library._destroy()  # no half-registered set outlives the failure
        return None
    return library


@contextlib.contextmanager
def lean_zero_tangents():
    """Within the block, a zero tangent costs a Python call, not torch's reference shape code
    (module docstring). Reentrant and thread-safe; torch's kernels return when the outermost
    block exits. The kernels are process-wide while any block is active: a meta computation
    elsewhere then gets torch's shape and dtype, with contiguous strides."""
    global _depth, _library
    with _lock:
        if _depth == 0:
            _library = _register()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _library is not None:
                _library._destroy()
                _library = None
