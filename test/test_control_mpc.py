"""MPC through the differentiable simulator: tracking, initializations, warm start, bounded work."""

import numpy as np
import pytest
import torch

from diffsim_ros.control import (
    ControlError,
    MinimumJerkMove,
    ModelPredictiveController,
    MPCSettings,
    SafetyLayer,
    SetPoint,
)
from diffsim_ros.model import load_robot_config
from diffsim_ros.sim import RigidBodySimulator, make_simulator
from oracles import BAXTER_LEFT

DT = 0.01  # [s] MPC step (paper)
TRACKING_TOL = 2e-3  # [rad] perfect-model tracking of a 0.3 rad move, one Gauss-Newton step per call
SAME_SOLUTION_TOL = 1e-6  # [N·m] converged solutions from the three initializations
FD_STEP = 1e-4  # [N·m] central-difference step (PBD round-off ~1e-10 swamps smaller steps)
FD_ATOL = 1e-7  # relative to the largest Jacobian entry
VALUE_RTOL = 1e-10  # batched vs single rollout (round-off of batched kernels)
Q0 = np.array([0.0, -0.3, 0.0, 0.8, 0.0, 0.6, 0.0])


@pytest.fixture(scope="module")
def model():
    return load_robot_config(BAXTER_LEFT).build_model()


def _goal():
    goal = Q0.copy()
    goal[0], goal[1] = 0.2, -0.45
    return goal


def _track(model, settings, steps=60):
    """Close the loop on the prediction model itself; returns (max error [rad], controller)."""
    plant = make_simulator(model, DT, kind="rigid")
    reference = MinimumJerkMove(Q0, _goal(), 0.0, 0.6)
    mpc = ModelPredictiveController(plant, reference, settings)
    q, qd = torch.tensor(Q0), torch.zeros(7, dtype=torch.float64)
    worst = 0.0
    for k in range(steps):
        tau = mpc.compute(k * DT, q.numpy(), qd.numpy())
        assert mpc.last.iterations <= settings.max_iterations
        with torch.no_grad():
            q, qd = plant.joint_step(q, qd, torch.as_tensor(tau))
        worst = max(worst, np.abs(q.numpy() - reference((k + 1) * DT)[0]).max())
    return worst, mpc


@pytest.mark.parametrize("kind", ["rigid", "pbd"])
def test_rollout_jacobian_matches_finite_differences(model, kind):
    """The causal batched reverse pass gives the full (H 2n, H n) Jacobian of the rollout."""
    mpc = ModelPredictiveController(make_simulator(model, DT, substeps=1, kind=kind), SetPoint(Q0), MPCSettings())
    q, qd = torch.tensor(Q0), torch.full((7,), 0.2, dtype=torch.float64)
    u = torch.as_tensor(np.random.default_rng(4).normal(0.0, 3.0, 21))
    value, jac = mpc._rollout_jacobian(q, qd, u)
    rollout = mpc._rollout_fn(q, qd)
    eye = torch.eye(u.numel(), dtype=u.dtype) * FD_STEP
    with torch.no_grad():
        torch.testing.assert_close(value, rollout(u), atol=0, rtol=VALUE_RTOL)
        numeric = ((rollout(u + eye) - rollout(u - eye)) / (2 * FD_STEP)).T
    assert jac.shape == numeric.shape == (42, 21)
    torch.testing.assert_close(jac, numeric, atol=FD_ATOL * float(numeric.abs().max()), rtol=0)


@pytest.mark.parametrize("initialization", ["zero", "previous", "gravity"])
def test_tracks_on_a_perfect_model(model, initialization):
    worst, mpc = _track(model, MPCSettings(initialization=initialization, max_iterations=1))
    assert worst < TRACKING_TOL
    assert mpc.last.predicted_cost <= mpc.last.initial_cost


def test_initializations_converge_to_one_solution_and_warm_start_helps(model):
    simulator = make_simulator(model, DT, kind="rigid")
    reference = MinimumJerkMove(Q0, _goal(), 0.0, 0.6)
    solutions = {}
    for init in ("zero", "previous", "gravity"):
        mpc = ModelPredictiveController(simulator, reference, MPCSettings(initialization=init, max_iterations=8, step_tolerance=1e-9))
        solutions[init] = mpc.compute(0.1, Q0, np.zeros(7))
    np.testing.assert_allclose(solutions["zero"], solutions["gravity"], atol=SAME_SOLUTION_TOL)
    np.testing.assert_allclose(solutions["previous"], solutions["gravity"], atol=SAME_SOLUTION_TOL)
    # One step later, on the state the first torque produced: the paper's three starts.
    with torch.no_grad():
        q, qd = (x.numpy() for x in simulator.joint_step(torch.tensor(Q0), torch.zeros(7, dtype=torch.float64), torch.tensor(solutions["previous"])))
    costs = {init: mpc.cost(0.1 + DT, q, qd, mpc.initial_torques(0.1 + DT, q, init)) for init in ("zero", "previous", "gravity")}
    assert costs["previous"] < costs["gravity"] < costs["zero"]


def test_jacobian_reuse_and_bounds(model):
    settings = MPCSettings(max_iterations=2, jacobian_every=3)
    worst, _ = _track(model, settings, steps=30)
    assert worst < TRACKING_TOL
    mpc = ModelPredictiveController(make_simulator(model, DT, kind="rigid"), SetPoint(Q0 + 2.0), settings)
    jacobians = []
    for k in range(6):
        tau = mpc.compute(k * DT, Q0, np.zeros(7))
        jacobians.append(mpc.last.jacobians)
        assert np.all(np.abs(tau) <= model.effort_limit.numpy())  # a 2 rad jump needs more than the limits
        assert np.all(np.abs(mpc.last.torques) <= model.effort_limit.numpy())
    assert jacobians[0] >= 1 and jacobians[3] >= 1 and jacobians[1] == jacobians[2] == jacobians[4] == 0


def test_warm_start_shifts_by_elapsed_steps(model):
    mpc = ModelPredictiveController(make_simulator(model, DT, kind="rigid"), MinimumJerkMove(Q0, _goal(), 0.0, 0.5), MPCSettings(horizon=4))
    mpc.compute(0.0, Q0, np.zeros(7))
    solution = mpc.last.torques
    np.testing.assert_array_equal(mpc.initial_torques(0.004, Q0), solution)  # a 1 kHz caller: same step
    np.testing.assert_array_equal(mpc.initial_torques(0.02, Q0), np.concatenate([solution[2:], solution[-1:], solution[-1:]]))


def test_bad_settings(model):
    simulator = make_simulator(model, DT, kind="rigid")
    for bad in (MPCSettings(horizon=0), MPCSettings(initialization="random"), MPCSettings(position_tolerance=0.0)):
        with pytest.raises(ControlError):
            ModelPredictiveController(simulator, SetPoint(Q0), bad)


class _Diverging(RigidBodySimulator):
    """A simulator that blows up (NaN) or raises, as a diverging PBD step does."""

    raises = False

    def joint_step(self, q, qd, tau):
        if self.raises:
            raise ValueError("simulation diverged")
        q_next, qd_next = super().joint_step(q, qd, tau)
        return q_next * float("nan"), qd_next


@pytest.mark.parametrize("raises", [False, True])
def test_simulator_failure_gives_no_command(model, raises):
    simulator = _Diverging(model, DT)
    simulator.raises = raises
    mpc = ModelPredictiveController(simulator, SetPoint(Q0), MPCSettings())
    assert mpc.compute(0.0, Q0, np.zeros(7)) is None
    assert mpc.last.failure and mpc.last.torques is None
    safety = SafetyLayer(model)
    command, status = safety.filter(0.0, None, Q0, np.zeros(7))
    assert command is None and status.reason == "no_command"


def test_runs_through_the_pbd_simulator(model):
    mpc = ModelPredictiveController(make_simulator(model, DT, substeps=1), MinimumJerkMove(Q0, _goal(), 0.0, 0.6), MPCSettings())
    for k in range(3):
        tau = mpc.compute(k * DT, Q0, np.zeros(7))
        assert tau is not None and np.all(np.isfinite(tau)), mpc.last.failure
        assert mpc.last.predicted_cost <= mpc.last.initial_cost
