"""Vector forward-mode Jacobians of the compiled PBD step (sim.pbd.fast_tangents) against autograd.

Both differentiate the same computed step (the same projection sweeps, the active limit set
decided on the values): the tangents propagated beside one float64 run must equal autograd
through the torch PBD step to the rounding of the two implementations, through friction, armature,
every spring law, a payload, compliant and rigid joint rows, and joint-limit rows active and inactive.
Central differences through the compiled step, an independent reference, are compared with them
in test_pbd_fast_jacobians.py.
"""

import numpy as np
import pytest

from diffsim_ros.sim import PBDSimulator
from diffsim_ros.sim.pbd.fast import FastPBD, kernel_options
from diffsim_ros.sim.pbd.fast_tangents import step_tangents_into
from test_pbd_fast_jacobians import _autograd
from test_pbd_references import baxter, random_state
from test_springs import sprung_baxter

DT = 0.01  # [s]
AUTOGRAD_RTOL = 1e-9  # tangents vs autograd through the torch step, relative to the largest entry
STEP_TOL = 1e-10  # [rad, rad/s] the step the tangents come with vs the compiled rollout
SAME_COLUMNS_RTOL = 1e-13  # B from the n torque directions alone vs from all 3n
SEEDS = (3, 11, 29)  # random starts inside the limits
PAYLOAD = 1.5  # [kg] on the tip frame
TORQUE_SCALE = 6.0  # [N·m] random torques on top of the holding-like bias below
BIAS = np.array([0.0, -20.0, 0.0, 6.0, 0.0, 1.0, 0.0])  # [N·m]
ARMATURE = (0.3, 0.3, 0.1, 0.1, 0.02, 0.02, 0.005)  # [kg·m²]
LIMIT_EFFECT = 1e-3  # [rad] at least this change of a joint's step by its limit row (the row is active)


def _friction(model):
    return model.with_parameters({f"{name}.friction": 0.3 for name in model.joint_names})


def _armature(model):
    """Rotor inertias on every joint, a tenth to a third of Baxter's link inertias about the axes [kg·m²]."""
    return model.with_parameters({f"{name}.armature": a for name, a in zip(model.joint_names, ARMATURE)})


MODELS = {
    "lever-friction": lambda: _friction(baxter()),
    "armature-friction": lambda: _armature(_friction(baxter())),
    "every-spring-payload": lambda: sprung_baxter().with_payload(PAYLOAD, (0.0, 0.0, 0.05)),
}
SETTINGS = {
    "1x2": dict(substeps=1, iterations=2),  # the MPC predictor's settings
    "3x4": dict(substeps=3, iterations=4),
    "2x3-compliant": dict(substeps=2, iterations=3, compliance=1e-7),  # the block-tridiagonal solve
    "1x2-no-limits": dict(substeps=1, iterations=2, limits=False),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return MODELS[request.param]()


def _inputs(model, seed):
    q, qd = (x.numpy() for x in random_state(model, seed, speed=1.0))
    tau = BIAS + TORQUE_SCALE * np.random.default_rng(seed).uniform(-1.0, 1.0, model.nq)
    return q, qd, tau


def _jacobians(kernel, pbd, options, q, qd, tau, with_state=True):
    n = pbd.nq
    q_next, qd_next, a, b = np.empty(n), np.empty(n), np.full((2 * n, 2 * n), np.nan), np.empty((2 * n, n))
    kernel(pbd.fk, pbd.phys, pbd.springs, options, q, qd, tau, with_state, q_next, qd_next, a, b)
    return q_next, qd_next, a, b


def _relative(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def _check(model, settings, q, qd, tau):
    """Tangents vs the compiled rollout (the step) and autograd (A and B)."""
    simulator = PBDSimulator(model, DT, **settings)
    pbd, options = FastPBD.from_model(model), kernel_options(DT, simulator.settings)
    q_next, qd_next, a, b = _jacobians(step_tangents_into, pbd, options, q, qd, tau)
    q_roll, qd_roll, _ = pbd.rollout(q[None], qd[None], tau[None, None], DT, simulator.settings)
    assert np.abs(q_next - q_roll[0, 0]).max() < STEP_TOL and np.abs(qd_next - qd_roll[0, 0]).max() < STEP_TOL
    a_ref, b_ref = _autograd(model, settings, q, qd, tau)
    assert _relative(a, a_ref) < AUTOGRAD_RTOL
    assert _relative(b, b_ref) < AUTOGRAD_RTOL


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("settings", list(SETTINGS))
def test_tangents_match_autograd(model, settings, seed):
    _check(model, SETTINGS[settings], *_inputs(model, seed))


@pytest.mark.parametrize("settings", ["1x2", "3x4", "2x3-compliant"])
def test_tangents_through_active_limit_rows(model, settings):
    # The elbow starts just above its lower limit moving down: its limit row is active within
    # the step and changes it (w1, pushed towards its upper limit, is caught there on the
    # plain arm; with the sprung arm's payload it is predicted inside and overshoots, as in
    # the torch step)
    q, qd, tau = _inputs(model, SEEDS[0])
    q[5], qd[5], tau[5] = float(model.upper[5]) - 0.002, 2.0, 3.0
    q[3], qd[3], tau[3] = float(model.lower[3]) + 0.002, -1.2, -3.0
    pbd, steps = FastPBD.from_model(model), []
    for limits in (True, False):
        simulator = PBDSimulator(model, DT, **{**SETTINGS[settings], "limits": limits})
        steps.append(pbd.rollout(q[None], qd[None], tau[None, None], DT, simulator.settings)[0][0, 0])
    assert abs(steps[0][3] - steps[1][3]) > LIMIT_EFFECT
    _check(model, SETTINGS[settings], q, qd, tau)


def test_torque_directions_alone_give_the_same_b(model):
    # the MPC's first step asks for B only (its start state is given): A is left untouched
    pbd = FastPBD.from_model(model)
    options = kernel_options(DT, PBDSimulator(model, DT, substeps=1, iterations=2).settings)
    q, qd, tau = _inputs(model, SEEDS[1])
    q_next, qd_next, _, b = _jacobians(step_tangents_into, pbd, options, q, qd, tau)
    q_only, qd_only, a_only, b_only = _jacobians(step_tangents_into, pbd, options, q, qd, tau, with_state=False)
    assert np.isnan(a_only).all()
    assert _relative(b_only, b) < SAME_COLUMNS_RTOL
    np.testing.assert_array_equal(q_only, q_next)
    np.testing.assert_array_equal(qd_only, qd_next)
