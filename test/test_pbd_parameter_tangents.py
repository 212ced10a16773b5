"""Exact parameter Jacobians of the compiled PBD step (sim.pbd.fast_tangents parameter directions).

The snapshot's parameter arrays (masses, inertias, COMs, joint frames, damping, friction,
armature, lever and torsion springs) carry tangents beside the state's through the very phases
of the compiled step; chained with the torch Jacobian of those arrays in the identification's
coordinates, they give d(q+, qd+)/d(coordinates). Held to autograd through the torch PBD step
(the same computed step: to rounding) and to central differences of the compiled rollout (an
independent reference, to its rounding noise) in those coordinates (payload, link inertials,
springs, damping, friction, armature), one step and a three-step rollout, with joint limits
active and not.
"""

import numpy as np
import pytest
import torch

from diffsim_ros.estimation.parameters import ParameterSpace
from diffsim_ros.estimation.solvers import forward_jacobian
from diffsim_ros.sim import PBDSimulator
from diffsim_ros.sim.pbd.fast import FastPBD
from diffsim_ros.sim.pbd.fast_jacobians import parameter_tensors, pbd_rollout_parameter_tangents
from test_pbd_references import baxter, random_state
from test_springs import TORSION, sprung_baxter

DT = 0.01  # [s]
STEP_TOL = 1e-10  # [rad, rad/s] the step the tangents come with vs the compiled rollout (fastmath rounding)
AUTOGRAD_RTOL = 1e-9  # tangents vs autograd through the torch step, relative to the largest entry
FD_STEP = 1e-5  # central-difference step relative to max(|coordinate|, FD_FLOOR)
FD_FLOOR = 1.0
# The compiled step's rounding noise (~1e-12) over the step dominates the differences' error:
FD_RTOL, FD_ATOL = 1e-4, 1e-6  # [1], [rad or rad/s per unit coordinate]
PAYLOAD = (1.5, (0.0, 0.02, 0.05))  # [kg], [m]
GROUPS = ("payload", "spring", "damping", "friction", "armature", "inertia")
SETTINGS = {
    "1x2": dict(substeps=1, iterations=2),
    "3x4-compliant": dict(substeps=3, iterations=4, compliance=1e-7),
    "1x2-no-limits": dict(substeps=1, iterations=2, limits=False),
}


def _model():
    """Baxter's arm with its lever spring and a torsion spring, a payload, friction and armature."""
    model = baxter().with_springs(baxter().springs + (TORSION,)).with_payload(*PAYLOAD)
    values = {f"{j}.friction": 0.3 for j in model.joint_names}
    values.update({f"{j}.armature": a for j, a in zip(model.joint_names, (0.3, 0.3, 0.1, 0.1, 0.02, 0.02, 0.005))})
    return model.with_parameters(values)


def _seeds(space, x):
    """The snapshot arrays' tangents in the coordinates, each (P, *shape), and the held ones' (Q, P)."""
    shapes = []

    def flat(z):
        seeded, held = parameter_tensors(space.apply(z)[0])
        shapes[:] = [t.shape for t in seeded]
        return torch.cat([t.reshape(-1) for t in seeded + held])

    _, jac = forward_jacobian(flat, x)
    seeds, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        seeds.append(jac[start : start + size].T.reshape(x.shape[0], *shape).numpy())
        start += size
    return seeds, jac[start:]


def _rollout(space, x, q0, qd0, tau, settings):
    model = space.apply(x)[0]
    sim = PBDSimulator(model, DT, **settings)
    q, qd, _ = FastPBD.from_model(model).rollout(q0, qd0, tau, DT, sim.settings)
    return np.concatenate([q, qd], -1)


def _autograd(space, x, q0, qd0, tau, settings):
    """d(q, qd after every step)/dx by autograd through the torch PBD step, (B, T, P, 2n)."""

    def states(z):
        sim = PBDSimulator(space.apply(z)[0], DT, on_residual="ignore", fast=False, **settings)
        q, qd = sim.rollout(torch.as_tensor(q0), torch.as_tensor(qd0), torch.as_tensor(tau))
        return torch.cat([q, qd], -1)

    return torch.autograd.functional.jacobian(states, x).numpy()


def _check(space, q0, qd0, tau, settings):
    x = torch.as_tensor(space.x0, dtype=torch.float64)
    seeds, held = _seeds(space, x)
    assert float(held.abs().max()) == 0.0  # these groups move only seeded arrays
    model = space.apply(x)[0]
    batch, steps, n = tau.shape
    size = x.shape[0]
    zeros = np.zeros((batch, size, n))
    q, qd, dq, dqd = pbd_rollout_parameter_tangents(
        FastPBD.from_model(model), DT, PBDSimulator(model, DT, **settings).settings, seeds, q0, qd0, zeros, zeros, tau,
        np.zeros((batch, steps, size, n)))
    assert np.abs(np.concatenate([q, qd], -1) - _rollout(space, x, q0, qd0, tau, settings)).max() < STEP_TOL
    tangents = np.concatenate([dq, dqd], -1)  # (B, T, P, 2n)
    reference = _autograd(space, x, q0, qd0, tau, settings)  # (B, T, 2n, P)
    assert np.abs(tangents - reference.swapaxes(-1, -2)).max() < AUTOGRAD_RTOL * np.abs(reference).max()
    for i in range(size):
        h = FD_STEP * max(abs(float(x[i])), FD_FLOOR)
        e = torch.zeros_like(x)
        e[i] = h
        fd = (_rollout(space, x + e, q0, qd0, tau, settings) - _rollout(space, x - e, q0, qd0, tau, settings)) / (2 * h)
        error = np.abs(tangents[:, :, i] - fd).max()
        assert error < FD_RTOL * np.abs(fd).max() + FD_ATOL, (i, error, np.abs(fd).max())


def _inputs(model, seeds, steps):
    q0, qd0 = (np.stack([random_state(model, s, speed=1.0)[k].numpy() for s in seeds]) for k in (0, 1))
    rng = np.random.default_rng(7)
    bias = np.array([0.0, -20.0, 0.0, 6.0, 0.0, 1.0, 0.0])  # [N·m] holding-like
    tau = bias + 6.0 * rng.uniform(-1.0, 1.0, (len(seeds), steps, model.nq))
    return q0, qd0, tau


@pytest.mark.parametrize("name", list(SETTINGS))
def test_one_step_parameter_tangents_match_central_differences(name):
    model = _model()
    space = ParameterSpace(model, GROUPS)
    _check(space, *_inputs(model, (3, 11), 1), SETTINGS[name])


def test_rollout_chains_the_tangents_through_every_step():
    model = _model()
    space = ParameterSpace(model, ("payload", "spring", "damping", "armature"))
    _check(space, *_inputs(model, (29,), 3), SETTINGS["1x2"])


def test_friction_from_zero_is_differentiated():
    """A nominal friction of 0 (the primal skips the law) still has its derivative."""
    model = baxter()
    space = ParameterSpace(model, ("friction",))
    _check(space, *_inputs(model, (5,), 1), SETTINGS["1x2"])


def test_joint_limits_active():
    """States pressed against the limits: the limit rows are active in the step."""
    model = _model()
    space = ParameterSpace(model, ("payload", "damping", "armature"))
    q0 = model.upper.numpy()[None] - 1e-4
    qd0 = np.full((1, model.nq), 1.5)
    tau = np.full((1, 1, model.nq), 5.0)
    _check(space, q0, qd0, tau, SETTINGS["1x2"])


def test_point_springs_are_outside_the_seeded_arrays():
    """A point spring's stiffness moves an array the tangents hold constant: the caller sees it."""
    model = sprung_baxter()
    space = ParameterSpace(model, ("spring",))
    _, held = _seeds(space, torch.as_tensor(space.x0, dtype=torch.float64))
    assert float(held.abs().max()) > 0.0
