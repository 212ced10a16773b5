"""The NumPy rotation companion agrees with the torch rotation module it mirrors."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from diffsim_ros.dynamics import spatial, spatial_np

AGREEMENT_TOL = 1e-14  # same formulas, float64: only the libraries' rounding differs
ORTHONORMAL_TOL = 1e-13

# Angles from the Taylor branches (below 1e-4 rad) up to past pi, in any direction.
_angle = st.one_of(st.floats(0.0, 1e-5), st.floats(1e-5, 4.0))
_unit = st.tuples(*[st.floats(-1.0, 1.0)] * 3).filter(lambda v: np.linalg.norm(v) > 0.1)


def _rotvec(angle, axis):
    axis = np.asarray(axis)
    return angle * axis / np.linalg.norm(axis)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_angle, _unit)
def test_so3_exp_and_quat_exp_match_torch(angle, axis):
    rotvec = _rotvec(angle, axis)
    torch_r = spatial.so3_exp(torch.as_tensor(rotvec)).numpy()
    torch_q = spatial.quat_exp(torch.as_tensor(rotvec)).numpy()
    np.testing.assert_allclose(spatial_np.so3_exp(rotvec), torch_r, rtol=0, atol=AGREEMENT_TOL)
    np.testing.assert_allclose(spatial_np.quat_exp(rotvec), torch_q, rtol=0, atol=AGREEMENT_TOL)
    # The two exponentials describe the same rotation.
    np.testing.assert_allclose(spatial_np.quat_to_matrix(spatial_np.quat_exp(rotvec)), torch_r, rtol=0, atol=1e-13)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(_angle, _unit, _angle, _unit)
def test_quat_multiply_composes_rotations_as_torch_does(a1, u1, a2, u2):
    qa, qb = spatial_np.quat_exp(_rotvec(a1, u1)), spatial_np.quat_exp(_rotvec(a2, u2))
    product = spatial_np.quat_multiply(qa, qb)
    np.testing.assert_allclose(
        product, spatial.quat_multiply(torch.as_tensor(qa), torch.as_tensor(qb)).numpy(), rtol=0, atol=AGREEMENT_TOL
    )
    composed = spatial_np.quat_to_matrix(qa) @ spatial_np.quat_to_matrix(qb)
    np.testing.assert_allclose(spatial_np.quat_to_matrix(product), composed, rtol=0, atol=ORTHONORMAL_TOL)


def test_batched_shapes_and_normalization():
    rng = np.random.default_rng(0)
    rotvec = rng.normal(size=(5, 2, 3))
    assert spatial_np.so3_exp(rotvec).shape == (5, 2, 3, 3)
    q = spatial_np.quat_exp(rotvec)
    assert q.shape == (5, 2, 4)
    r = spatial_np.quat_to_matrix(3.0 * q)  # normalized first: a scaled quaternion is the same rotation
    np.testing.assert_allclose(r, spatial_np.so3_exp(rotvec), rtol=0, atol=ORTHONORMAL_TOL)
    np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2), np.broadcast_to(np.eye(3), r.shape), atol=ORTHONORMAL_TOL)


@pytest.mark.parametrize("name", spatial_np.__all__)
def test_every_companion_function_has_its_torch_namesake(name):
    assert name in spatial.__all__
