"""Exact Jacobians of the compiled PBD step (sim.pbd.fast_jacobians) against autograd and finite differences.

The forward-mode tangents differentiate the computed step, the function autograd differentiates
through the torch PBD step: the two agree to the rounding of the two implementations (the
steps themselves agree to ~1e-12 here), at any iteration count. Central differences through
the compiled step confirm it independently, to their truncation and round-off error. The
kernel itself is tested on more models and settings in test_pbd_fast_tangents.py.
"""

import numpy as np
import pytest
import torch

from diffsim_ros.sim import PBDSimulator
from diffsim_ros.sim.pbd.fast import FastPBD
from diffsim_ros.sim.pbd.fast_jacobians import pbd_step_jacobians
from test_pbd_references import baxter

DT = 0.01  # [s]
AUTOGRAD_RTOL = 1e-9  # compiled Jacobians (forward-mode tangents) vs autograd through the torch step, relative to the largest entry
STEP_TOL = 1e-10  # [rad, rad/s] the step the Jacobians come with vs the compiled rollout
FD_RTOL = 1e-6  # central differences through the compiled step (step below) vs the compiled Jacobians
FD_STEP = 1e-5  # [rad, rad/s, N·m]
Q = np.array([0.2, -0.4, 0.3, 0.9, -0.2, 0.7, 0.4])
QD = np.array([0.5, -0.3, 0.4, 0.6, -0.8, 0.3, 0.9])
TAU = np.array([2.0, -25.0, 3.0, 8.0, 1.0, 2.0, 0.5])
CASES = {
    "1x2": (dict(substeps=1, iterations=2), Q),  # the MPC predictor's settings
    "3x4": (dict(substeps=3, iterations=4), Q),
    "1x2-on-limit": (dict(substeps=1, iterations=2), np.array([0.2, -0.4, 0.3, 0.9, -0.2, 2.093, 0.4])),  # w1 runs onto its upper limit
}


ARMATURE = (0.3, 0.3, 0.1, 0.1, 0.02, 0.02, 0.005)  # [kg·m²] rotor inertias (the free rows' momentum)


@pytest.fixture(scope="module", params=["friction", "friction-armature"])
def model(request):
    """Baxter's left arm with its shoulder spring, damping and friction (all terms of the step), and armature."""
    model = baxter()
    model = model.with_parameters({f"{name}.friction": 0.3 for name in model.joint_names})
    if request.param == "friction-armature":
        model = model.with_parameters({f"{name}.armature": a for name, a in zip(model.joint_names, ARMATURE)})
    return model


def _autograd(model, settings, q, qd, tau):
    """A (2n, 2n) and B (2n, n) by autograd through the torch PBD step."""
    simulator = PBDSimulator(model, DT, on_residual="ignore", fast=False, **settings)
    n = model.nq

    def step(x, u):
        q_next, qd_next = simulator.joint_step(x[:n], x[n:], u)
        return torch.cat([q_next, qd_next])

    x, u = torch.tensor(np.concatenate([q, qd])), torch.tensor(tau)
    a, b = torch.autograd.functional.jacobian(step, (x, u))
    return a.numpy(), b.numpy()


def _relative(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("settings, q", CASES.values(), ids=list(CASES))
def test_jacobians_match_autograd(model, settings, q):
    simulator = PBDSimulator(model, DT, **settings)
    pbd = FastPBD.from_model(model)
    q_next, qd_next, a, b = pbd_step_jacobians(pbd, q, QD, TAU, DT, simulator.settings)
    q_roll, qd_roll, _ = pbd.rollout(q[None], QD[None], TAU[None, None], DT, simulator.settings)
    assert np.abs(q_next - q_roll[0, 0]).max() < STEP_TOL and np.abs(qd_next - qd_roll[0, 0]).max() < STEP_TOL
    a_ref, b_ref = _autograd(model, settings, q, QD, TAU)
    assert _relative(a, a_ref) < AUTOGRAD_RTOL
    assert _relative(b, b_ref) < AUTOGRAD_RTOL


def test_jacobians_match_central_differences(model):
    simulator = PBDSimulator(model, DT, substeps=1, iterations=2)
    pbd, n = FastPBD.from_model(model), model.nq
    _, _, a, b = pbd_step_jacobians(pbd, Q, QD, TAU, DT, simulator.settings)
    x0 = np.concatenate([Q, QD])
    inputs = np.concatenate([x0, TAU])
    deltas = FD_STEP * np.eye(3 * n)
    batch = np.concatenate([inputs + deltas, inputs - deltas])  # (6n, 3n): every input moved up, then down
    q_out, qd_out, _ = pbd.rollout(batch[:, :n], batch[:, n : 2 * n], batch[:, None, 2 * n :], DT, simulator.settings)
    states = np.concatenate([q_out[:, 0], qd_out[:, 0]], axis=1)
    central = ((states[: 3 * n] - states[3 * n :]) / (2.0 * FD_STEP)).T  # (2n, 3n)
    assert _relative(a, central[:, : 2 * n]) < FD_RTOL
    assert _relative(b, central[:, 2 * n :]) < FD_RTOL


def test_torque_columns_alone(model):
    # the MPC's first step asks for B only (its start state is given): n tangent directions instead of 3n
    settings = PBDSimulator(model, DT, substeps=1, iterations=2).settings
    pbd = FastPBD.from_model(model)
    q_next, qd_next, _, b = pbd_step_jacobians(pbd, Q, QD, TAU, DT, settings)
    q_only, qd_only, a_only, b_only = pbd_step_jacobians(pbd, Q, QD, TAU, DT, settings, with_state=False)
    assert a_only is None
    np.testing.assert_array_equal(b_only, b)
    np.testing.assert_array_equal(q_only, q_next)
    np.testing.assert_array_equal(qd_only, qd_next)


def test_bad_shapes_are_named(model):
    pbd = FastPBD.from_model(model)
    with pytest.raises(ValueError, match=r"expected q, qd, tau of shape \(7,\)"):
        pbd_step_jacobians(pbd, Q[:6], QD, TAU, DT, PBDSimulator(model, DT).settings)
