"""Object pose estimates from bags: camera-frame PoseStamped -> base-frame observations -> mu.

The poses come from MuJoCo (a cube sliding on a table, 1 mm noise), are expressed in a
camera frame with a known camera pose, written to sqlite3 and mcap bags as
geometry_msgs/msg/PoseStamped, read back and fitted.
"""

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from diffsim_ros.estimation.objects import estimate_object_parameters
from diffsim_ros.io.bags import BagError, read_pose_topics, write_bag
from diffsim_ros.io.object_poses import object_poses_from_bag
from diffsim_ros.io.ros_messages import joint_state_msg, pose_stamped_msg
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore
from diffsim_ros.sim.contact import Box, ContactWorld, RigidObject
from diffsim_ros.testbed.contact_reference import simulate_mujoco

ROUNDTRIP_TOL = 1e-9  # [m] / quaternion components: float64 through the camera frame and back
MU_REL_TOL = 0.02  # the target for mu
HALF = 0.05  # cube half size [m]
MU = 0.3
TOPIC = "/camera/cube/pose"
STAMP0_NS = 1_700_000_000_000_000_000


def _camera_pose():
    """Camera 1.2 m above and in front of the table, looking down and back."""
    pose = np.eye(4)
    pose[:3, :3] = Rotation.from_euler("xyz", [2.6, 0.1, -1.4]).as_matrix()
    pose[:3, 3] = (0.9, -0.3, 1.2)
    return pose


@pytest.fixture(scope="module")
def sliding():
    cube = RigidObject("cube", Box((HALF, HALF, HALF)), mass=0.5, friction=MU)
    world = ContactWorld.create([cube], solver="cone", dt=0.01)
    state = world.initial_state(position=[[0.0, 0.0, HALF]], linear_velocity=[[1.5, 0.0, 0.0]])
    observations, _ = simulate_mujoco(
        world, state, duration=0.4, timestep=0.001, sample_period=0.01, skip=0.03,
        position_noise=1e-3, orientation_noise=1e-3, seed=3,
    )
    return world, observations["cube"]


def _camera_frame_messages(observation, camera_pose, topic=TOPIC):
    """PoseStamped messages of base-frame poses, expressed in the camera frame."""
    factory = TypestoreMessages(default_typestore())
    inverse = np.linalg.inv(camera_pose)
    position = observation["position"] @ inverse[:3, :3].T + inverse[:3, 3]
    rotation = Rotation.from_matrix(inverse[:3, :3]) * Rotation.from_quat(observation["orientation"][:, [1, 2, 3, 0]])
    quaternion = rotation.as_quat()[:, [3, 0, 1, 2]]
    for t, p, q in zip(observation["times"], position, quaternion):
        ns = STAMP0_NS + int(round(t * 1e9))
        yield topic, pose_stamped_msg(factory, ns, "camera", p, q), ns


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_poses_come_back_in_the_base_frame(tmp_path, sliding, storage):
    _, observation = sliding
    bag = write_bag(tmp_path / "objects", _camera_frame_messages(observation, _camera_pose()), storage=storage)
    poses = object_poses_from_bag(bag, {"cube": TOPIC}, camera_pose=_camera_pose())["cube"]
    np.testing.assert_allclose(poses.times, observation["times"] - observation["times"][0], atol=1e-9)
    np.testing.assert_allclose(poses.position, observation["position"], atol=ROUNDTRIP_TOL)
    sign = np.sign((poses.orientation * observation["orientation"]).sum(-1, keepdims=True))
    np.testing.assert_allclose(poses.orientation * sign, observation["orientation"], atol=ROUNDTRIP_TOL)


def test_friction_from_a_bag_of_camera_poses(tmp_path, sliding):
    world, observation = sliding
    bag = write_bag(tmp_path / "objects", _camera_frame_messages(observation, _camera_pose()))
    poses = object_poses_from_bag(bag, {"cube": TOPIC}, camera_pose=_camera_pose())
    estimate = estimate_object_parameters(world, poses, ["cube.friction"], initial={"cube.friction": 0.6})
    assert abs(estimate.values["cube.friction"] / MU - 1) < MU_REL_TOL, estimate.values


def test_bad_input_is_named(tmp_path, sliding):
    _, observation = sliding
    bag = write_bag(tmp_path / "objects", _camera_frame_messages(observation, _camera_pose()))
    with pytest.raises(BagError, match="/camera/other/pose.*is not in the bag"):
        object_poses_from_bag(bag, {"cube": "/camera/other/pose"})
    with pytest.raises(ValueError, match="rotation"):
        object_poses_from_bag(bag, {"cube": TOPIC}, camera_pose=np.diag([2.0, 1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="non-empty mapping"):
        object_poses_from_bag(bag, {})
    with pytest.raises(ValueError, match="distinct"):
        read_pose_topics(bag, [TOPIC, TOPIC])
    with pytest.raises(BagError, match="bag not found"):
        object_poses_from_bag(tmp_path / "missing", {"cube": TOPIC})
    # A topic of another type.
    factory = TypestoreMessages(default_typestore())
    other = write_bag(
        tmp_path / "joints",
        [("/joint_states", joint_state_msg(factory, STAMP0_NS, ["a"], [0.0], [0.0], [0.0]), STAMP0_NS)],
    )
    with pytest.raises(BagError, match=r"object pose must be one of \['geometry_msgs/msg/PoseStamped'\]"):
        object_poses_from_bag(other, {"cube": "/joint_states"})


def test_nan_poses_are_dropped_or_refused(tmp_path, sliding):
    _, observation = sliding
    messages = list(_camera_frame_messages(observation, _camera_pose()))
    broken = dict(observation, position=observation["position"].copy())
    broken["position"][5] = math.nan
    messages[5] = next(iter(_camera_frame_messages({k: v[5:6] for k, v in broken.items()}, _camera_pose())))
    bag = write_bag(tmp_path / "objects", messages)
    poses = object_poses_from_bag(bag, {"cube": TOPIC}, camera_pose=_camera_pose())["cube"]
    assert len(poses) == len(messages) - 1 and poses.stats.dropped_nan == 1  # counted, for the user's report
    with pytest.raises(BagError, match="NaN"):
        object_poses_from_bag(bag, {"cube": TOPIC}, nan_policy="raise")


def _retimed(messages, topic, frame="camera", shift_ns=0):
    """The messages on another topic, in another frame, stamped ``shift_ns`` later."""
    factory = TypestoreMessages(default_typestore())
    for _, msg, ns in messages:
        p, q = msg.pose.position, msg.pose.orientation
        stamp = ns + shift_ns
        yield topic, pose_stamped_msg(factory, stamp, frame, [p.x, p.y, p.z], [q.w, q.x, q.y, q.z]), stamp


def test_topics_in_other_frames_or_clocks_are_refused(tmp_path, sliding):
    """Two objects seen by one camera share its frame and its clock: poses of one topic in
    another frame, or stamped 100 s apart (a topic whose clock disagrees), are named, not fitted."""
    _, observation = sliding
    messages = list(_camera_frame_messages(observation, _camera_pose()))
    topics = {"cube": TOPIC, "other": "/camera/other/pose"}
    for name, extra, match in (("frames", _retimed(messages, topics["other"], frame="base"),
                                r"pose topics are in different frames \(/camera/cube/pose in 'camera', /camera/other/pose in 'base'\)"),
                               ("clocks", _retimed(messages, topics["other"], shift_ns=100 * 10**9),
                                r"pose topics do not overlap in time \(/camera/cube/pose 0.000..0.400 s, /camera/other/pose 100.000..100.400 s")):
        bag = write_bag(tmp_path / name, sorted([*messages, *extra], key=lambda m: m[2]))
        with pytest.raises(BagError, match=match):
            object_poses_from_bag(bag, topics, camera_pose=_camera_pose())
