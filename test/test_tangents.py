"""``lean_zero_tangents``: the same forward-mode Jacobians, bit for bit, with torch's shape
functions for zero tangents replaced while it is active and restored after.

The replaced meta kernels must give torch's own shape and dtype for every operation they cover:
checked against torch's kernels on a grid of broadcasts and dtype promotions (Python numbers
first or second, integer and boolean tensors, 0-d tensors, mixed precision) and on random
broadcastable shapes (hypothesis, derandomized).
"""

import itertools
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from diffsim_ros._tangents import lean_zero_tangents
from diffsim_ros.dynamics import rnea
from diffsim_ros.estimation.solvers import forward_jacobian
from diffsim_ros.model import load_robot_config
from oracles import BAXTER_LEFT

FD_STEP = 1e-6  # central differences, float64
FD_TOL = 1e-6  # relative to the Jacobian's largest entry
TORCH_META = "_meta_registrations.py"  # where torch registers its Python meta kernels

OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "cross": lambda a, b: torch.linalg.cross(a, b, dim=-1),
}
DTYPES = (torch.float64, torch.float32, torch.int64, torch.bool)


def _meta_kernel(op="aten::mul.Tensor"):
    """The active Meta registration of an operator, as the dispatcher lists it."""
    (line,) = [l for l in torch._C._dispatch_dump(op).splitlines() if l.startswith("Meta:")]
    return line


def _meta(value):
    return torch.empty(value.shape, dtype=value.dtype, device="meta") if isinstance(value, torch.Tensor) else value


def _result(op, a, b):
    """``(shape, dtype)`` of ``op(a, b)`` computed on meta tensors, or the error's type."""
    try:
        out = OPS[op](_meta(a), _meta(b))
    except (RuntimeError, TypeError) as err:
        return type(err)
    return tuple(out.shape), out.dtype


def _operands():
    shapes = [(), (3,), (2, 1), (2, 3), (4, 2, 3), (2,)]  # (2,) does not broadcast with (2, 3)
    for shape_a, shape_b, dtype_a, dtype_b in itertools.product(shapes, shapes, DTYPES, DTYPES):
        yield torch.ones(shape_a, dtype=dtype_a), torch.ones(shape_b, dtype=dtype_b)
    for dtype, number in itertools.product(DTYPES, (2, 2.5, True)):
        tensor = torch.ones((2, 3), dtype=dtype)
        yield tensor, number
        yield number, tensor


def _shape_error(a, b):
    try:
        torch.broadcast_shapes(getattr(a, "shape", ()), getattr(b, "shape", ()))
    except RuntimeError:
        return True
    return False


def _lean_result(op, a, b):
    with lean_zero_tangents():
        return _result(op, a, b)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_lean_meta_kernels_give_torchs_shape_and_dtype(op):
    cases = [(a, b) for a, b in _operands() if isinstance(a, torch.Tensor) or op in ("add", "mul")]
    expected = [_result(op, a, b) for a, b in cases]
    with lean_zero_tangents():
        lean = [_result(op, a, b) for a, b in cases]
    ok = [(e, l) for e, l in zip(expected, lean) if not isinstance(e, type)]
    assert len(ok) > 100
    assert [l for _, l in ok] == [e for e, _ in ok]
    # Shapes that do not broadcast fail with lean kernels too (dtype refusals, such as
    # subtracting booleans, are torch's kernels' concern: the lean ones only give shapes).
    mismatched = [(a, b) for a, b in cases if _shape_error(a, b)]
    assert mismatched and all(isinstance(r, type) for r in (_lean_result(op, a, b) for a, b in mismatched))


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=4), st.integers(0, 4), st.data())
def test_broadcast_shapes_of_random_operands_match_torch(shape, drop, data):
    # A broadcastable partner: a suffix of the shape with some entries set to 1.
    tail = shape[min(drop, len(shape)):]
    other = [data.draw(st.sampled_from([n, 1])) for n in tail]
    a, b = torch.ones(shape, dtype=torch.float64), torch.ones(other, dtype=torch.float32)
    expected = {op: _result(op, a, b) for op in ("add", "mul")} | {"flip": _result("sub", b, a)}
    with lean_zero_tangents():
        assert {op: _result(op, a, b) for op in ("add", "mul")} | {"flip": _result("sub", b, a)} == expected


def test_cross_meta_matches_torch():
    cases = [((3,), (3,)), ((5, 3), (3,)), ((2, 1, 3), (4, 3)), ((4, 3), (4, 3))]
    pairs = [(torch.ones(s, dtype=torch.float64), torch.ones(t, dtype=d)) for s, t in cases for d in (torch.float64, torch.float32)]
    expected = [_result("cross", a, b) for a, b in pairs]
    with lean_zero_tangents():
        assert [_result("cross", a, b) for a, b in pairs] == expected


def _dynamics_residual(model, q, qd, qdd):
    """Inverse dynamics as a function of the payload and a link's centre of mass: dual tangents
    meet constants and Python numbers in the products, sums and cross products of the recursion."""
    body = model.body_names[-2]

    def residual(x):
        candidate = model.with_parameters({"payload.mass": x[0], "payload.com": x[1:4], f"{body}.com": x[4:7]})
        return rnea(candidate, q, qd, qdd).reshape(-1)

    return residual, torch.cat([model.get_parameter(n).detach().reshape(-1) for n in ("payload.mass", "payload.com", f"{body}.com")])


def test_forward_jacobians_are_bit_identical_and_match_finite_differences():
    model = load_robot_config(BAXTER_LEFT).build_model()
    gen = torch.Generator().manual_seed(0)
    q, qd, qdd = (torch.rand(6, model.nq, generator=gen, dtype=torch.float64) for _ in range(3))
    fn, masses = _dynamics_residual(model, q, qd, qdd)
    masses = masses + 0.1  # a payload of 0.1 kg at 0.1 m: every column non-zero
    plain = torch.func.jacfwd(fn)(masses)  # torch's own kernels
    value, lean = forward_jacobian(fn, masses)  # inside lean_zero_tangents
    assert torch.equal(lean, plain) and torch.equal(value, fn(masses))
    columns = [(fn(masses + FD_STEP * e) - fn(masses - FD_STEP * e)) / (2 * FD_STEP) for e in torch.eye(len(masses), dtype=torch.float64)]
    assert torch.allclose(lean, torch.stack(columns, 1), atol=FD_TOL * float(lean.abs().max()), rtol=0)


def test_torchs_kernels_return_after_nesting_errors_and_threads():
    before = _meta_kernel()
    assert TORCH_META in before
    with pytest.raises(ValueError):
        with lean_zero_tangents():
            assert TORCH_META not in _meta_kernel()
            with lean_zero_tangents():  # reentrant: the inner exit keeps the outer's kernels
                pass
            assert TORCH_META not in _meta_kernel()
            raise ValueError("inside")
    assert _meta_kernel() == before
    barrier = threading.Barrier(4)

    def worker():
        for _ in range(20):
            with lean_zero_tangents():
                barrier.wait(timeout=10) if _ == 0 else None
                torch.ones(2, 3, device="meta") * torch.ones(3, device="meta")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _meta_kernel() == before
    for op in ("aten::add.Tensor", "aten::sub.Scalar", "aten::div.Tensor", "aten::linalg_cross"):
        assert TORCH_META in _meta_kernel(op)


def test_a_registration_that_fails_half_way_leaves_torchs_kernels(monkeypatch):
    impl = torch.library.Library.impl

    def refuse_cross(self, op, *args, **kwargs):
        if op == "linalg_cross":
            raise RuntimeError("refused")
        return impl(self, op, *args, **kwargs)

    monkeypatch.setattr(torch.library.Library, "impl", refuse_cross)
    with lean_zero_tangents():  # still usable: torch's own kernels, the same values
        assert TORCH_META in _meta_kernel()
        assert _result("mul", torch.ones(2, 3), 2.0) == ((2, 3), torch.float32)
    assert TORCH_META in _meta_kernel()
