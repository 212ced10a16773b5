"""The compiled MPC solves the torch MPC's problem: same iterates, limits, tracking, warm start, failures."""

import numpy as np
import pytest
import torch

from diffsim_ros.control import (
    ControlError,
    FastModelPredictiveController,
    MinimumJerkMove,
    ModelPredictiveController,
    MPCSettings,
    SetPoint,
    make_mpc,
)
from diffsim_ros.control.mpc_fast import FastPBDModelPredictiveController
from diffsim_ros.model import load_robot_config
from diffsim_ros.sim import RigidBodySimulator, make_simulator
from oracles import BAXTER_LEFT
from test_springs import sprung_baxter

DT = 0.01  # [s]
SAME_ITERATE_TOL = 1e-7  # [N·m] compiled vs torch Gauss-Newton iterates without Levenberg damping
SAME_COST_RTOL = 1e-9  # default Levenberg damping: the two scale it differently, costs agree
TRACKING_TOL = 2e-3  # [rad] perfect-model tracking of a 0.3 rad move (as test_control_mpc)
Q0 = np.array([0.0, -0.3, 0.0, 0.8, 0.0, 0.6, 0.0])
ARMATURE = (0.3, 0.3, 0.1, 0.1, 0.02, 0.02, 0.005)  # [kg·m²] rotor inertias
GOAL = Q0 + np.array([0.2, -0.15, 0.0, 0.0, 0.0, 0.0, 0.0])


@pytest.fixture(scope="module")
def model():
    return load_robot_config(BAXTER_LEFT).build_model()


def _pair(model, settings, reference=None):
    simulator = make_simulator(model, DT, kind="rigid")
    reference = reference or MinimumJerkMove(Q0, GOAL, 0.0, 0.6)
    return ModelPredictiveController(simulator, reference, settings), FastModelPredictiveController(simulator, reference, settings)


@pytest.mark.parametrize("horizon, iterations, init", [(3, 1, "gravity"), (5, 3, "zero"), (8, 2, "gravity")])
def test_same_iterates_as_the_torch_mpc(horizon, iterations, init):
    model = sprung_baxter().with_payload(1.0)  # springs, damping, friction, a payload and armature in the predictor
    model = model.with_parameters({f"{j}.armature": a for j, a in zip(model.joint_names, ARMATURE)})
    settings = MPCSettings(horizon=horizon, max_iterations=iterations, initialization=init, step_tolerance=0.0, levenberg=0.0)
    torch_mpc, fast_mpc = _pair(model, settings)
    q, qd = Q0 + 0.02, np.full(7, 0.1)
    for k in range(3):  # warm-started calls too
        expected, actual = torch_mpc.compute(0.05 + k * DT, q, qd), fast_mpc.compute(0.05 + k * DT, q, qd)
        np.testing.assert_allclose(fast_mpc.last.torques, torch_mpc.last.torques, rtol=0, atol=SAME_ITERATE_TOL)
        np.testing.assert_allclose(actual, expected, rtol=0, atol=SAME_ITERATE_TOL)
        assert fast_mpc.last.iterations == torch_mpc.last.iterations == iterations
        np.testing.assert_allclose(fast_mpc.last.initial_cost, torch_mpc.last.initial_cost, rtol=SAME_COST_RTOL)
        np.testing.assert_allclose(fast_mpc.last.predicted_cost, torch_mpc.last.predicted_cost, rtol=SAME_COST_RTOL)


def test_default_levenberg_reaches_the_same_cost(model):
    torch_mpc, fast_mpc = _pair(model, MPCSettings(horizon=4, max_iterations=3, step_tolerance=0.0))
    torch_mpc.compute(0.1, Q0, np.zeros(7))
    fast_mpc.compute(0.1, Q0, np.zeros(7))
    cost = [m.cost(0.1, Q0, np.zeros(7), m.last.torques) for m in (torch_mpc, fast_mpc)]
    np.testing.assert_allclose(cost[1], cost[0], rtol=SAME_COST_RTOL)


def test_torques_stay_within_the_effort_limits_like_the_reference(model):
    settings = MPCSettings(horizon=4, max_iterations=2, levenberg=0.0)
    torch_mpc, fast_mpc = _pair(model, settings, SetPoint(Q0 + 2.0))  # a 2 rad jump needs more than the limits
    limit = model.effort_limit.numpy()
    for k in range(4):
        expected, actual = torch_mpc.compute(k * DT, Q0, np.zeros(7)), fast_mpc.compute(k * DT, Q0, np.zeros(7))
        assert np.all(np.abs(fast_mpc.last.torques) <= limit)
        assert np.any(np.abs(fast_mpc.last.torques) == limit)  # the limits are active
        np.testing.assert_allclose(actual, expected, rtol=0, atol=SAME_ITERATE_TOL)


@pytest.mark.parametrize("initialization", ["zero", "previous", "gravity"])
def test_tracks_a_move_on_a_plant(model, initialization):
    settings = MPCSettings(horizon=10, max_iterations=1, initialization=initialization)
    plant = RigidBodySimulator(model, DT, substeps=4)  # finer than the predictor
    reference = MinimumJerkMove(Q0, GOAL, 0.0, 0.6)
    mpc = FastModelPredictiveController(make_simulator(model, DT, kind="rigid"), reference, settings)
    q, qd = torch.tensor(Q0), torch.zeros(7, dtype=torch.float64)
    worst = 0.0
    for k in range(80):
        tau = mpc.compute(k * DT, q.numpy(), qd.numpy())
        assert tau is not None, mpc.last.failure
        assert mpc.last.predicted_cost <= mpc.last.initial_cost
        with torch.no_grad():
            q, qd = plant.joint_step(q, qd, torch.as_tensor(tau))
        worst = max(worst, np.abs(q.numpy() - reference((k + 1) * DT)[0]).max())
    assert worst < TRACKING_TOL
    np.testing.assert_allclose(q.numpy(), GOAL, atol=TRACKING_TOL)


def test_horizon_fifty_and_warm_start(model):
    mpc = FastModelPredictiveController(make_simulator(model, DT, kind="rigid"), MinimumJerkMove(Q0, GOAL, 0.0, 0.6),
                                        MPCSettings(horizon=50, max_iterations=1))
    first = mpc.compute(0.0, Q0, np.zeros(7))
    assert first is not None and mpc.last.torques.shape == (50, 7)
    solution = mpc.last.torques
    np.testing.assert_array_equal(mpc.initial_torques(0.02, Q0), np.concatenate([solution[2:], solution[-1:], solution[-1:]]))


def test_failures_give_no_command_and_factory_picks_the_solver(model):
    mpc = make_mpc(make_simulator(model, DT, kind="rigid"), SetPoint(Q0), MPCSettings())
    assert isinstance(mpc, FastModelPredictiveController)
    assert mpc.compute(0.0, np.full(7, np.nan), np.zeros(7)) is None
    assert "non-finite" in mpc.last.failure and mpc.last.torques is None
    assert mpc.compute(0.01, Q0, np.zeros(7)) is not None  # recovers once the state is sane
    pbd = make_simulator(model, DT, substeps=1, kind="pbd")
    assert type(make_mpc(pbd, SetPoint(Q0), MPCSettings())) is FastPBDModelPredictiveController
    assert type(make_mpc(RigidBodySimulator(model, DT, integrator="rk4"), SetPoint(Q0), MPCSettings())) is ModelPredictiveController
    with pytest.raises(ControlError, match="rigid implicit-Euler"):
        FastModelPredictiveController(pbd, SetPoint(Q0), MPCSettings())
    with pytest.raises(ControlError, match="rigid implicit-Euler"):
        FastModelPredictiveController(RigidBodySimulator(model, DT, integrator="rk4"), SetPoint(Q0), MPCSettings())


@pytest.mark.parametrize("armature", [False, True], ids=["plain", "armature"])
def test_pbd_predictor_same_iterates_as_the_torch_pbd_mpc(model, armature):
    # exact PBD step Jacobians (forward-mode tangents, test_pbd_fast_tangents.py) in the Riccati solver:
    # the torch MPC's Gauss-Newton iterates through the torch PBD step, warm-started calls too
    if armature:  # the rotors' inertia in both predictors (issue 46)
        model = model.with_parameters({f"{j}.armature": a for j, a in zip(model.joint_names, ARMATURE)})
    simulator = make_simulator(model, DT, substeps=1, kind="pbd")
    reference = MinimumJerkMove(Q0, GOAL, 0.0, 0.6)
    settings = MPCSettings(max_iterations=2, step_tolerance=0.0, levenberg=0.0)
    torch_mpc, fast_mpc = ModelPredictiveController(simulator, reference, settings), make_mpc(simulator, reference, settings)
    assert isinstance(fast_mpc, FastPBDModelPredictiveController)
    q, qd = Q0 + 0.02, np.full(7, 0.2)
    for k in range(2):
        expected, actual = torch_mpc.compute(0.05 + k * DT, q, qd), fast_mpc.compute(0.05 + k * DT, q, qd)
        np.testing.assert_allclose(fast_mpc.last.torques, torch_mpc.last.torques, rtol=0, atol=SAME_ITERATE_TOL)
        np.testing.assert_allclose(actual, expected, rtol=0, atol=SAME_ITERATE_TOL)
        np.testing.assert_allclose(fast_mpc.last.initial_cost, torch_mpc.last.initial_cost, rtol=SAME_COST_RTOL)
        np.testing.assert_allclose(fast_mpc.last.predicted_cost, torch_mpc.last.predicted_cost, rtol=SAME_COST_RTOL)
    assert fast_mpc.compute(0.1, np.full(7, np.nan), np.zeros(7)) is None and "non-finite" in fast_mpc.last.failure
    with pytest.raises(ControlError, match="PBDSimulator"):
        FastPBDModelPredictiveController(make_simulator(model, DT, kind="rigid"), reference, MPCSettings())
