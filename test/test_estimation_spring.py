"""The paper's two spring-calibration schemes on the same MuJoCo data."""

import numpy as np
import pytest

from diffsim_ros.estimation.data import Dataset, static_poses_from_intervals
from diffsim_ros.estimation.identification import identify
from diffsim_ros.estimation.spring_fit import fit_spring_curve
from diffsim_ros.model import load_robot_config
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth
from diffsim_ros.model.poses import random_poses
from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record
from oracles import BAXTER_LEFT

STIFFNESS_REL = 0.01
TRUE_K, TRUE_OFFSET = 6500.0, 0.13


def _poses(payload):
    config = load_robot_config(BAXTER_LEFT)
    model = config.build_model()
    rng = np.random.default_rng(4)
    truth = PlantTruth(payload, (0.0, 0.0, 0.05), {"left_s1": {"stiffness": TRUE_K, "offset": TRUE_OFFSET}})
    rec = record(MujocoPlant(model, config.urdf, truth, seed=1), model,
                 RecordingScenario(poses=nearest_neighbour_order(random_poses(model, 12, rng)), settle=2.0, hold=0.5))
    return model, static_poses_from_intervals(rec.joint_time, rec.q, rec.effort, rec.holds)


def test_both_schemes_agree_without_payload():
    model, poses = _poses(0.0)
    curve, _ = fit_spring_curve(model, poses, "left_s1")
    diff = identify(model, Dataset(static=poses), ("spring",)).values
    for values in (curve, diff):
        assert abs(values["left_s1.spring.stiffness"] - TRUE_K) < STIFFNESS_REL * TRUE_K


def test_spring_identified_through_pbd():
    from diffsim_ros.sim import PBDSimulator

    model, poses = _poses(0.0)
    result = identify(model, Dataset(static=poses.subset(slice(0, 8))), ("spring",), simulator=PBDSimulator(model, dt=0.01))
    assert "static torques (simulator)" in result.metrics_after
    assert abs(result.values["left_s1.spring.stiffness"] - TRUE_K) < STIFFNESS_REL * TRUE_K


def test_unknown_payload_biases_curve_fitting_but_not_joint_identification():
    model, poses = _poses(1.0)
    curve, _ = fit_spring_curve(model, poses, "left_s1")
    joint = identify(model, Dataset(static=poses), ("payload", "spring")).values
    assert abs(curve["left_s1.spring.stiffness"] - TRUE_K) > 3 * STIFFNESS_REL * TRUE_K
    assert abs(joint["left_s1.spring.stiffness"] - TRUE_K) < STIFFNESS_REL * TRUE_K
    with pytest.raises(ValueError, match="no spring element"):
        fit_spring_curve(model, poses, "left_e1")
