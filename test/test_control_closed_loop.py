"""Closed loop against MuJoCo as the robot (hidden payload and spring): reduced versions of the
experiments in ``benchmarks/bench_control_experiments.py``.

Every command passes through the SafetyLayer, as on the robot.
"""

import numpy as np
import pytest

from diffsim_ros.control import (
    GravityCompensation,
    JointImpedanceController,
    MinimumJerkMove,
    ModelPredictiveController,
    MPCSettings,
    SafetyConfig,
    SafetyLayer,
    TorqueMapGrid,
    build_torque_map,
)
from diffsim_ros.sim import make_simulator
from diffsim_ros.estimation.data import Dataset
from diffsim_ros.estimation.identification import identify
from diffsim_ros.model import load_robot_config
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth
from diffsim_ros.model.poses import random_poses
from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record
from oracles import BAXTER_LEFT
from diffsim_ros.estimation.data import static_poses_from_intervals

PLANT_DT = 1e-3  # [s] MuJoCo step = control period of gravity compensation and impedance
HOLD_SECONDS = 3.0
RAMP_IN = 0.3  # [s] the default safety rate limit (200 N·m/s) ramps the holding torque in meanwhile
DRIFT_AFTER = 0.03  # [rad] largest drift of a pure gravity-compensation hold over 3 s, calibrated model
DRIFT_BEFORE = 0.5  # [rad] smallest drift with the nominal model (the 1.3 kg payload is unknown to it)
MAP_DEVIATION = 2e-3  # [rad] s1 deviation under 5 and 10 N·m with the map servo term
COMPLIANCE_TOL = 0.1  # relative: settled s1 deflection under a push vs push / K with the map feedforward term
SETTLED_TOL = 5e-3  # [rad] s1 error before the push with the map feedforward term
PD_DEVIATION = 0.04  # [rad] at least this much for PD only (K_s1 = 100 N·m/rad)
MPC_TRACKING = 0.01  # [rad] calibrated MPC tracking error on MuJoCo
TRUTH = PlantTruth(1.3, (0.02, -0.01, 0.06), {"left_s1": {"stiffness": 9600.0, "offset": 0.14}})
Q_START = np.array([0.0, 0.0, 0.0, 0.9, 0.0, 0.8, 0.0])
STIFFNESS = np.array([100.0, 100.0, 50.0, 50.0, 15.0, 15.0, 10.0])  # [N·m/rad]
STIFF_SAFETY = SafetyConfig(output="ros2_control", torque_rate_limit=5000.0)  # the map servo term is stiff


@pytest.fixture(scope="module")
def calibrated():
    """Nominal model, the plant's config, and the model calibrated from a MuJoCo recording."""
    config = load_robot_config(BAXTER_LEFT)
    nominal = config.build_model()
    plant = MujocoPlant(nominal, config.urdf, TRUTH, seed=3)
    poses = nearest_neighbour_order(random_poses(nominal, 16, np.random.default_rng(7)))
    rec = record(plant, nominal, RecordingScenario(poses=poses, settle=2.0, hold=0.5, camera_rate=0))
    result = identify(nominal, Dataset(static=_hold_averages(rec)), ("payload", "spring"))
    assert result.success
    return nominal, config, result.model


def _plant(config, nominal):
    return MujocoPlant(nominal, config.urdf, TRUTH, seed=5)


def _run(plant, controller, safety, seconds, external=lambda t: np.zeros(7), every=1, held=0.0):
    """Closed loop at 1 kHz (controller every ``every`` steps); true joint positions (T, n).

    For the first ``held`` seconds the arm is held at its start (while the safety layer ramps
    the torque in), as a position controller or a hand would before release.
    """
    positions, command = [], None
    start = plant.true_state()[0]
    for k in range(int(round(seconds / PLANT_DT))):
        t = k * PLANT_DT
        if t < held:
            plant.reset(start)
        plant.set_external_torque(external(t))
        if k % every == 0:
            q, qd, _ = plant.read_joint_state()
            command, status = safety.filter(t, controller.compute(t, q, qd), q, qd)
            assert status.active, status
        plant.step(command, steps=1)
        positions.append(plant.true_state()[0])
    return np.array(positions)


def test_gravity_compensation_drift_before_and_after_calibration(calibrated):
    nominal, config, model = calibrated
    poses = random_poses(nominal, 4, np.random.default_rng(11), margin=0.4)
    drift = {}
    for name, m in (("nominal", nominal), ("calibrated", model)):
        plant = _plant(config, nominal)
        drift[name] = []
        for q0 in poses:
            plant.reset(q0)
            q = _run(plant, GravityCompensation(m), SafetyLayer(m), HOLD_SECONDS + RAMP_IN, held=RAMP_IN)
            drift[name].append(np.abs(q - q0).max())
    assert max(drift["calibrated"]) < DRIFT_AFTER
    assert min(drift["nominal"]) > DRIFT_BEFORE


def _disturbance(t):
    tau = np.zeros(7)
    tau[1] = 5.0 if 3.0 <= t < 5.0 else 10.0 if 6.0 <= t < 8.0 else 0.0
    return tau


def test_impedance_with_torque_map_is_compliant_or_a_stiff_servo(calibrated):
    """Fig. 13, shortened: s1 goal -0.45 rad, 5 N·m then 10 N·m on s1.

    The map as feedforward along the reference leaves K as the only stiffness (a push of tau
    deflects s1 by tau / K); the map as a one-step servo rejects the pushes.
    """
    nominal, config, model = calibrated
    goal = Q_START.copy()
    goal[1] = -0.45
    tmap = build_torque_map(make_simulator(model, 0.01, kind="rigid"), TorqueMapGrid(angle_points=11, velocity_points=11, inertia_contexts=3))
    deviation, error = {}, {}
    for term in ("none", "map", "map_servo"):
        plant = _plant(config, nominal)
        plant.reset(Q_START)
        reference = MinimumJerkMove(Q_START, goal, 0.0, 1.5)
        controller = JointImpedanceController(model, STIFFNESS, STIFFNESS / 10, reference, model_term=term, torque_map=tmap)
        q = _run(plant, controller, SafetyLayer(model, STIFF_SAFETY), 8.5, _disturbance)
        t = np.arange(len(q)) * PLANT_DT
        pushed = (t >= 3.0) & (t < 5.0) | (t >= 6.0) & (t < 8.0)
        deviation[term] = np.abs(q[pushed, 1] - goal[1]).max()
        error[term] = {when: q[int(round(when / PLANT_DT)), 1] - goal[1] for when in (2.9, 4.9, 7.9)}
    assert deviation["map_servo"] < MAP_DEVIATION
    assert deviation["none"] > PD_DEVIATION
    assert abs(error["map"][2.9]) < SETTLED_TOL
    for when, push in ((4.9, 5.0), (7.9, 10.0)):  # settled deflection = push / K (pushes raise s1)
        assert error["map"][when] == pytest.approx(push / STIFFNESS[1], rel=COMPLIANCE_TOL)


def test_mpc_tracks_on_mujoco_after_calibration(calibrated):
    nominal, config, model = calibrated
    goal = Q_START.copy()
    goal[0], goal[1] = 0.3, -0.45
    errors = {}
    for name, m in (("nominal", nominal), ("calibrated", model)):
        plant = _plant(config, nominal)
        plant.reset(Q_START)
        reference = MinimumJerkMove(Q_START, goal, 0.0, 1.0)
        mpc = ModelPredictiveController(make_simulator(m, 0.01, kind="rigid"), reference, MPCSettings(max_iterations=1, jacobian_every=5))
        q = _run(plant, mpc, SafetyLayer(m, STIFF_SAFETY), 1.3, every=10)  # 100 Hz, zero-order hold
        t = np.arange(1, len(q) + 1) * PLANT_DT
        errors[name] = np.abs(q - np.array([reference(x)[0] for x in t])).max()
    assert errors["calibrated"] < MPC_TRACKING
    assert errors["nominal"] > 3 * errors["calibrated"]


def _hold_averages(rec):
    """Static poses averaged over the settled holds of a recording."""
    return static_poses_from_intervals(rec.joint_time, rec.q, rec.effort, rec.holds)
