"""Online estimator on streamed MuJoCo joint states: convergence, tracking a change, rejection."""

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.estimation.online import OnlineEstimator, OnlineEstimatorConfig
from diffsim_ros.model import load_robot_config
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth
from diffsim_ros.model.poses import random_poses
from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record
from oracles import BAXTER_LEFT

PAYLOAD_TOL = 0.03  # [kg]
STIFFNESS_REL = 0.01
TORQUE_ESTIMATE_TOL = 0.5  # [N·m] causal inverse-dynamics estimate at rest vs measured effort


def _recording(model, config, payload, seed, count=14):
    rng = np.random.default_rng(seed)
    truth = PlantTruth(payload, (0.0, 0.0, 0.05), {"left_s1": {"stiffness": 8800.0}})
    plant = MujocoPlant(model, config.urdf, truth, seed=seed)
    return record(plant, model, RecordingScenario(poses=nearest_neighbour_order(random_poses(model, count, rng)), settle=2.0, hold=0.8))


def _stream(estimator, rec, offset):
    updates = []
    for t, q, qd, effort in zip(rec.joint_time + offset, rec.q, rec.qd, rec.effort):
        estimator.add_joint_state(t, q, qd, effort)
        update = estimator.update(t)
        if update is not None:
            updates.append(update)
    return updates


@pytest.fixture(scope="module")
def setup():
    config = load_robot_config(BAXTER_LEFT)
    model = config.build_model()
    return config, model, _recording(model, config, 1.0, 1), _recording(model, config, 2.0, 2)


def test_online_estimates_converge_and_track_a_payload_change(setup):
    config, model, first, second = setup
    cfg = OnlineEstimatorConfig(window_poses=10, min_poses=6, holdout=2, update_period=4.0, motion_rate=25.0)
    estimator = OnlineEstimator(model, cfg)
    updates = _stream(estimator, first, 0.0)
    assert estimator.pose_count >= 10 and any(u.accepted for u in updates)
    assert abs(estimator.values["payload.mass"] - 1.0) < PAYLOAD_TOL
    assert abs(estimator.values["left_s1.spring.stiffness"] - 8800.0) < STIFFNESS_REL * 8800.0
    assert estimator.stddev["payload.mass"] < 0.05
    _stream(estimator, second, first.joint_time[-1] + 1.0)
    assert abs(estimator.values["payload.mass"] - 2.0) < PAYLOAD_TOL
    # At rest, the causal torque estimate equals the measured holding effort.
    tau = estimator.estimated_torques()
    assert np.abs(tau - second.effort[-5:].mean(0)).max() < TORQUE_ESTIMATE_TOL


def test_out_of_bounds_candidates_are_rejected(setup):
    config, model, first, _ = setup
    cfg = OnlineEstimatorConfig(window_poses=10, min_poses=6, holdout=2, bounds={"payload.mass": (0.0, 0.5)},
                                update_period=6.0, motion_rate=25.0)
    estimator = OnlineEstimator(model, cfg)
    updates = [u for u in _stream(estimator, first, 0.0) if not u.reason.startswith("collecting")]
    assert updates and not any(u.accepted for u in updates)
    assert all("outside the configured bounds" in u.reason for u in updates)
    assert estimator.model is model  # nothing unsafe leaks into the published model


def test_updates_that_worsen_recent_poses_are_rejected(setup):
    config, model, first, second = setup
    cfg = OnlineEstimatorConfig(window_poses=12, min_poses=6, holdout=3, update_period=6.0, motion_rate=25.0)
    estimator = OnlineEstimator(model, cfg)
    _stream(estimator, first, 0.0)
    estimator._last_update_ns, estimator._fresh = None, True  # allow one update now
    # Corrupt the training poses (all but the held-back three): the fit must not be accepted.
    poses = list(estimator._rests)
    heavier = model.with_parameters({"payload.mass": model.get_parameter("payload.mass") + 0.4})

    def corrupt(change):
        estimator._rests.clear()
        for i, (start, stop, q, effort, std) in enumerate(poses):
            estimator._rests.append((start, stop, q, effort + (change(q) if i < len(poses) - 3 else 0.0), std))
        estimator._last_update_ns, estimator._fresh = None, True
        return estimator.update(first.joint_time[-1])

    # Rests of a payload 0.4 kg heavier than the motion's: a fit within the fit-quality check,
    # which the held-back poses refute.
    q_as_t = lambda q: torch.as_tensor(q)[None]  # noqa: E731
    update = corrupt(lambda q: (dyn.gravity_torques(heavier, q_as_t(q)) - dyn.gravity_torques(model, q_as_t(q)))[0].numpy())
    assert update is not None and not update.accepted and "held-back" in update.reason
    # Efforts 5 N·m off on every joint: no model explains them (the fit-quality check).
    update = corrupt(lambda q: 5.0)
    assert update is not None and not update.accepted and update.reason.startswith("rejected: poor fit")


def test_configuration_errors():
    model = load_robot_config(BAXTER_LEFT).build_model()
    with pytest.raises(ValueError, match="model"):
        OnlineEstimatorConfig(model="mujoco")
    with pytest.raises(ValueError, match="holdout_seconds"):
        OnlineEstimatorConfig(holdout_seconds=30.0, window_seconds=20.0)
    with pytest.raises(ValueError, match="camera_frame"):
        OnlineEstimator(model, OnlineEstimatorConfig(groups=("camera",)))
    with pytest.raises(ValueError, match="holdout"):
        OnlineEstimatorConfig(holdout=0)


def test_rests_the_estimate_cannot_explain_are_forgotten(setup):
    """A rest held by a hand (5 N·m the efforts do not show) is dropped; consistent rests stay."""
    from diffsim_ros.control.gravity import holding_torques
    from diffsim_ros.dynamics.fast import FastDynamics

    config, model, _, _ = setup
    estimator = OnlineEstimator(model, OnlineEstimatorConfig(rest_outlier=10.0))
    fast, std = FastDynamics.from_model(model), np.full(7, 0.01)
    poses = random_poses(model, 4, np.random.default_rng(3))
    for k, q in enumerate(poses):
        effort = holding_torques(fast, q) + (np.eye(7)[1] * 5.0 if k == 2 else 0.0)  # the hand on s1
        estimator._rests.append((k * 10**9, k * 10**9 + 5 * 10**8, q, effort, std))
    assert estimator._forget_unexplained_rests() == 1
    assert [r[0] for r in estimator._rests] == [0, 10**9, 3 * 10**9]
    assert estimator._forget_unexplained_rests() == 0
