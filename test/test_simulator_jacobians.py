"""Exact Jacobians of the PBD residual blocks from compiled tangents (estimation.simulator_jacobians).

The simulator-dynamics and rollout residuals through the compiled PBD step, with their
Jacobians in the identification's coordinates from the step's parameter tangents chained with
the torch linearization of the snapshot, the applied torques and the mass matrices: held to
forward-mode AD through the torch PBD step (the same function, to rounding), for every group
the tangents cover (payload, link inertials, springs, damping, friction, armature, effort bias
and delay), measured efforts and commanded torques, and every rollout scheme. Coordinates
that move what the tangents hold constant (joint origins) are named, not differentiated wrong.
"""

import numpy as np
import pytest
import torch

from diffsim_ros.estimation import simulator_jacobians, solvers
from diffsim_ros.estimation.data import Trajectory
from diffsim_ros.estimation.identification import IdentificationSettings
from diffsim_ros.estimation.parameters import ParameterSpace
from diffsim_ros.estimation.residuals import RolloutResidual, SimulatorDynamicsResidual
from diffsim_ros.sim import PBDSimulator
from test_pbd_parameter_tangents import _model

FORWARD_RTOL = 1e-8  # compiled tangents vs forward mode through the torch step, relative to the largest entry
# Residuals vs the compiled rollout's [normalized]: the two kernels' steps differ by fastmath
# rounding (~1e-12 rad/s), which the simulator-dynamics loss divides by its 1 ms step.
VALUE_TOL = 1e-7
GROUPS = ("payload", "spring", "damping", "friction", "armature", "inertia", "effort_bias", "effort_delay")


def _trajectories(model, samples=12, dt=0.01, efforts=True):
    """Smooth joint motion with torques near the holding torques, as filtered data."""
    t = np.arange(samples)[:, None] * dt
    phase = np.arange(model.nq)
    mid = 0.5 * (model.lower + model.upper).numpy()
    q = mid + 0.3 * np.sin(2.0 * t + phase)
    qd = 0.6 * np.cos(2.0 * t + phase)
    qdd = -1.2 * np.sin(2.0 * t + phase)
    rng = np.random.default_rng(3)
    tau = np.array([0.0, -20.0, 0.0, 6.0, 0.0, 1.0, 0.0]) + rng.normal(0.0, 2.0, q.shape)
    rate = rng.normal(0.0, 5.0, q.shape)
    return [Trajectory(dt=dt, q=q, qd=qd, tau=tau, qdd=qdd, filter_span=2, measured_efforts=efforts, tau_rate=rate)]


def _forward(block, space, z):
    return solvers.forward_jacobian(lambda w: block(space.apply(w)[0]), z)


def _compare(block, space):
    z = torch.as_tensor(space.x0, dtype=torch.float64) + 1e-3  # off the nominal values
    apply = lambda w: space.apply(w)[0]  # noqa: E731
    assert simulator_jacobians.tangent_support(block, apply, z) is None
    value, jac = simulator_jacobians.value_and_jacobian(block, apply, z)
    _, expected = _forward(block, space, z)
    with torch.no_grad():
        compiled = block(apply(z))
    assert torch.abs(value - compiled).max() < VALUE_TOL
    assert torch.abs(jac - expected).max() < FORWARD_RTOL * torch.abs(expected).max()
    assert float(torch.abs(expected).amax(0).min()) > 0.0  # every coordinate moves the residual


@pytest.mark.parametrize("efforts", [True, False], ids=["efforts", "commands"])
def test_simulator_dynamics_jacobian_matches_forward_mode(efforts):
    model = _model()
    sim = PBDSimulator(model, 0.001, substeps=1)
    block = SimulatorDynamicsResidual.from_trajectories(_trajectories(model, efforts=efforts), model, sim, 0.05)
    groups = GROUPS if efforts else GROUPS[:-2]  # commanded torques carry no effort nuisances
    _compare(block, ParameterSpace(model, groups))


@pytest.mark.parametrize("scheme", ["angle", "velocity", "both", "torque"])
def test_rollout_jacobian_matches_forward_mode(scheme):
    """Windows of 3 samples, 2 simulator steps per sample: the tangents chain through 6 steps."""
    model = _model()
    sim = PBDSimulator(model, 0.005, substeps=2)
    block = RolloutResidual(_trajectories(model, efforts=True), model, sim, horizon=3, scheme=scheme)
    _compare(block, ParameterSpace(model, ("payload", "spring", "damping", "friction", "armature", "effort_bias")))


def test_joint_origins_are_named_not_differentiated():
    model = _model()
    sim = PBDSimulator(model, 0.001, substeps=1)
    block = SimulatorDynamicsResidual.from_trajectories(_trajectories(model), model, sim, 0.05)
    space = ParameterSpace(model, ("link_lengths",))
    why = simulator_jacobians.tangent_support(block, lambda w: space.apply(w)[0], torch.as_tensor(space.x0))
    assert why is not None and "joint origins" in why


def test_identification_through_pbd_uses_the_tangents():
    """A PBD fit reports its Jacobian's source; jacobian='tangents' refuses a block it cannot serve."""
    model = _model()
    sim = PBDSimulator(model, 0.001, substeps=1)
    trajectories = _trajectories(model, samples=40)
    block = SimulatorDynamicsResidual.from_trajectories(trajectories, model, sim, 0.05)
    from diffsim_ros.estimation.identification import _Problem  # the fit's stacked problem

    space = ParameterSpace(model, ("payload", "damping"))
    x0 = torch.as_tensor(space.x0, dtype=torch.float64)
    problem = _Problem(space, [block], x0, IdentificationSettings())
    assert problem.modes == [("tangents", "")]
    lengths = ParameterSpace(model, ("link_lengths",))
    with pytest.raises(ValueError, match="joint origins"):
        _Problem(lengths, [block], torch.as_tensor(lengths.x0, dtype=torch.float64), IdentificationSettings(jacobian="tangents"))
    auto = _Problem(lengths, [block], torch.as_tensor(lengths.x0, dtype=torch.float64), IdentificationSettings())
    assert auto.modes[0][0] == "finite_difference" and "joint origins" in auto.modes[0][1]
