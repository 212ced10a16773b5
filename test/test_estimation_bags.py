"""Recorded bag (MuJoCo plant, sqlite3 and mcap) -> dataset -> staged identification."""

import dataclasses

import numpy as np
import pytest

from diffsim_ros.estimation.data import Dataset
from diffsim_ros.estimation.identification import identify
from diffsim_ros.io.bags import BagTopics, read_robot_bag
from diffsim_ros.estimation.preparation import DatasetOptions, prepare_dataset
from diffsim_ros.io.recording import write_recording_bag
from diffsim_ros.model import load_robot_config
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth, random_camera_pose
from diffsim_ros.model.poses import random_poses
from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record
from oracles import BAXTER_LEFT

PAYLOAD_MASS_REL = 0.02
STIFFNESS_REL = 0.01
DAMPING_REL = 0.10  # issue #4 target
TRUE_DAMPING = (0.9, 0.6, 0.8, 0.5, 0.3, 0.4, 0.2)


@pytest.fixture(scope="module")
def recording():
    config = load_robot_config(BAXTER_LEFT)
    model = config.build_model()
    rng = np.random.default_rng(5)
    truth = PlantTruth(
        payload_mass=0.8, payload_com=(0.0, 0.02, 0.05), springs={"left_s1": {"stiffness": 7000.0, "offset": 0.07}},
        damping=TRUE_DAMPING, camera_pose=random_camera_pose(rng),
    )
    plant = MujocoPlant(model, config.urdf, truth, seed=2)
    scenario = RecordingScenario(
        poses=nearest_neighbour_order(random_poses(model, 16, rng)), camera_frame="left_hand",
        excitation=12.0, excitation_amplitude=(3, 6, 3, 3, 1, 1, 0.5),
    )
    return config, model, truth, record(plant, model, scenario)


def _same(a, b):
    """Whether two datasets (dataclasses, tuples, arrays, scalars) are identical, value for value."""
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.fixture(scope="module")
def identified():
    """``[(Dataset, statics, dynamics)]``: identifications done in this module."""
    return []


def _identify(model, dataset, identified):
    """Statics (payload, spring, camera), then damping from the trajectories by inverse dynamics.

    Identification is deterministic: a dataset identical to one identified already (the same
    recording read back from the other storage) reuses its result instead of computing it again.
    """
    for seen, statics, dynamics in identified:
        if _same(seen, dataset):
            return statics, dynamics
    statics = identify(model, dataset, ("payload", "spring", "camera"))
    dynamics = identify(statics.model, Dataset(trajectories=dataset.trajectories), ("damping",), trajectory_loss="inverse_dynamics")
    identified.append((dataset, statics, dynamics))
    return statics, dynamics


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_to_calibration(tmp_path, recording, identified, storage):
    config, model, truth, rec = recording
    path = write_recording_bag(tmp_path / "bag", rec, BagTopics.from_config(config), storage=storage)
    bag = read_robot_bag(path, config, required=("joint_states", "camera_pose", "commanded_torques"))
    dataset, summary = prepare_dataset(bag.streams(), "left_hand", DatasetOptions())
    assert summary.static_poses >= 12 and summary.torque_source == "commanded"
    assert summary.camera_observations > 100
    statics, dynamics = _identify(model, dataset, identified)
    assert abs(statics.values["payload.mass"] - 0.8) < PAYLOAD_MASS_REL * 0.8
    assert abs(statics.values["left_s1.spring.stiffness"] - 7000.0) < STIFFNESS_REL * 7000.0
    damping = np.array([dynamics.values[f"{j}.damping"] for j in model.joint_names])
    np.testing.assert_array_less(np.abs(damping - TRUE_DAMPING), DAMPING_REL * np.array(TRUE_DAMPING))
