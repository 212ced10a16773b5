"""Bags in both storages: robot data round trips, Humble-format bags, bad input, alignment and filtering."""

import sqlite3

import numpy as np
import pytest
import yaml

from diffsim_ros.io.bags import (
    STORAGES,
    BagError,
    BagTopics,
    BagWriter,
    bag_info,
    iter_bag,
    read_bag,
    read_robot_bag,
    write_bag,
)
from diffsim_ros.io.ros_messages import (
    NS_PER_S,
    float64_multi_array_msg,
    joint_command_msg,
    joint_state_msg,
    pose_stamped_msg,
)
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore
from diffsim_ros.estimation.signals import (
    check_increasing,
    detect_static_segments,
    filtered_derivatives,
    interpolate,
    interpolate_quaternions,
    nearest,
)
from diffsim_ros.model import load_robot_config
from diffsim_ros.resources import share_directory

EXACT = 0.0
TIME_TOL = 1e-9  # [s], float64 seconds relative to t0
INTERP_TOL = 1e-12
SLERP_TOL = 1e-12
# Savitzky-Golay on 100 Hz data with 1e-4 rad noise (the joint-angle noise).
NOISE_RAD = 1e-4
VELOCITY_TOL = 5e-3  # [rad/s]
ACCELERATION_TOL = 0.5  # [rad/s^2]
SEGMENT_EDGE_TOL = 0.15  # [s], static segment boundaries vs the true ones
T0_NS = 1_700_000_000 * NS_PER_S
RATE_HZ = 100.0
CAMERA_HZ = 30.0
DURATION_S = 3.0

CONFIG = load_robot_config(share_directory() / "config" / "baxter_left.yaml")
JOINTS = list(CONFIG.joints)
TOPICS = BagTopics.from_config(CONFIG)
FACTORY = TypestoreMessages()


def joint_positions(t):
    """Smooth test trajectory [rad], shape (len(t), 7)."""
    k = np.arange(1, len(JOINTS) + 1)
    return 0.3 * np.sin(np.outer(t, 0.5 * k) + k)


def robot_messages(torque_type="JointCommand", duration=DURATION_S, stamp_ns=None, positions=None):
    """(topic, msg, receive_ns) of 100 Hz joint states (shuffled + extra joints), 30 Hz poses, torques."""
    n = int(duration * RATE_HZ)
    t = np.arange(n) / RATE_HZ
    q = joint_positions(t) if positions is None else positions
    names = ["head_pan"] + JOINTS[::-1]
    for i in range(n):
        t_ns = T0_NS + int(round(t[i] * NS_PER_S))
        stamp = t_ns if stamp_ns is None else stamp_ns(i, t_ns)
        js = joint_state_msg(FACTORY, stamp, names, np.r_[0.5, q[i][::-1]], efforts=np.r_[0.0, -q[i][::-1]])
        yield TOPICS.joint_states, js, t_ns + 200_000  # received 0.2 ms after the stamp
        if torque_type == "JointCommand":
            cmd = joint_command_msg(FACTORY, JOINTS[::-1], 2.0 * q[i][::-1])
        else:
            cmd = float64_multi_array_msg(FACTORY, 2.0 * q[i])
        yield TOPICS.commanded_torques, cmd, t_ns + 300_000
    for j in range(int(duration * CAMERA_HZ)):
        t_ns = T0_NS + int(round(j / CAMERA_HZ * NS_PER_S))
        angle = 0.1 * j / CAMERA_HZ
        quaternion = [np.cos(angle / 2), 0.0, np.sin(angle / 2), 0.0]
        yield TOPICS.camera_pose, pose_stamped_msg(FACTORY, t_ns, "camera", [1.0, 0.1 * angle, 0.5], quaternion), t_ns


def sorted_by_receive_time(messages):
    return sorted(messages, key=lambda m: m[2])


@pytest.fixture(scope="module", params=STORAGES)
def robot_bag(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("bags") / f"robot_{request.param}"
    write_bag(path, sorted_by_receive_time(robot_messages()), storage=request.param)
    return path, request.param


def test_write_then_read_robot_bag(robot_bag):
    path, storage = robot_bag
    data = read_robot_bag(path, CONFIG, required=("joint_states", "camera_pose", "commanded_torques"))
    assert data.storage == storage and data.t0_ns == T0_NS and data.absent == ()
    js = data.joint_states
    n = int(DURATION_S * RATE_HZ)
    t = np.arange(n) / RATE_HZ
    assert js.joint_names == tuple(JOINTS) and js.positions.shape == (n, 7) and js.velocities is None
    np.testing.assert_allclose(js.times, t, atol=TIME_TOL)
    np.testing.assert_allclose(js.positions, joint_positions(t), atol=EXACT)
    np.testing.assert_allclose(js.efforts, -joint_positions(t), atol=EXACT)
    assert js.stats.kept == n and js.stats.dropped_nan == 0 and js.stats.stamp_from_receive == 0
    cam = data.camera_poses
    assert cam.frame_id == "camera" and cam.position.shape == (int(DURATION_S * CAMERA_HZ), 3)
    np.testing.assert_allclose(np.linalg.norm(cam.orientation, axis=1), 1.0, atol=SLERP_TOL)
    torques = data.commanded_torques
    np.testing.assert_allclose(torques.torques, 2.0 * joint_positions(t), atol=EXACT)
    np.testing.assert_allclose(torques.times, t + 300e-6, atol=TIME_TOL)  # no header: receive time


def test_bag_info_and_storage_files(robot_bag):
    path, storage = robot_bag
    info = bag_info(path)
    assert info.storage == storage
    assert info.topics[TOPICS.joint_states] == ("sensor_msgs/msg/JointState", 300)
    assert info.topics[TOPICS.commanded_torques] == ("baxter_core_msgs/msg/JointCommand", 300)
    assert info.start_ns == T0_NS and info.offered_qos[TOPICS.camera_pose][0].depth == 10
    storage_file = next(path.glob("*.db3" if storage == "sqlite3" else "*.mcap"))
    meta = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 8 and meta["relative_file_paths"] == [storage_file.name]
    assert all(t["topic_metadata"]["type_description_hash"].startswith("RIHS01_") for t in meta["topics_with_message_count"])
    # The storage file alone is a readable bag too.
    assert read_bag(storage_file, JOINTS, topics=TOPICS).joint_states.stats.kept == 300


def test_iter_bag_in_receive_order(robot_bag):
    records = list(iter_bag(robot_bag[0], topics=[TOPICS.camera_pose]))
    assert len(records) == 90 and all(r.msgtype == "geometry_msgs/msg/PoseStamped" for r in records)
    check_increasing([r.timestamp_ns for r in records])
    with pytest.raises(BagError, match=r"\['/nope'\] not in the bag"):
        list(iter_bag(robot_bag[0], topics=["/nope"]))


@pytest.mark.parametrize("storage", STORAGES)
def test_float64_multi_array_torques(tmp_path, storage):
    path = write_bag(tmp_path / "b", sorted_by_receive_time(robot_messages("Float64MultiArray", 0.5)), storage=storage)
    data = read_robot_bag(path, CONFIG)
    np.testing.assert_allclose(data.commanded_torques.torques[:5], 2.0 * joint_positions(np.arange(5) / RATE_HZ))


def write_humble_sqlite3_bag(path, messages):
    """A bag as Humble's rosbag2 writes it: sqlite3 schema 3, metadata v5, no message definitions."""
    path.mkdir()
    topics = {}
    db = sqlite3.connect(path / "humble_0.db3")
    db.executescript(
        "CREATE TABLE schema(schema_version INTEGER PRIMARY KEY, ros_distro TEXT NOT NULL);"
        "INSERT INTO schema VALUES (3, 'humble');"
        "CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL, "
        "serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL);"
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL, timestamp INTEGER NOT NULL, "
        "data BLOB NOT NULL);"
    )
    for topic, msg, t_ns in messages:
        if topic not in topics:
            topics[topic] = [len(topics) + 1, msg.__msgtype__, 0]
            db.execute("INSERT INTO topics VALUES (?, ?, ?, 'cdr', '')", (topics[topic][0], topic, msg.__msgtype__))
        topics[topic][2] += 1
        db.execute("INSERT INTO messages (topic_id, timestamp, data) VALUES (?, ?, ?)",
                   (topics[topic][0], t_ns, FACTORY.serialize(msg)))
    db.commit()
    db.close()
    stamps = [t for _, _, t in messages]
    info = {
        "version": 5,
        "storage_identifier": "sqlite3",
        "relative_file_paths": ["humble_0.db3"],
        "duration": {"nanoseconds": max(stamps) - min(stamps)},
        "starting_time": {"nanoseconds_since_epoch": min(stamps)},
        "message_count": len(messages),
        "topics_with_message_count": [
            {"topic_metadata": {"name": name, "type": msgtype, "serialization_format": "cdr", "offered_qos_profiles": ""},
             "message_count": count}
            for name, (_, msgtype, count) in topics.items()
        ],
        "compression_format": "",
        "compression_mode": "",
        "files": [],
    }
    (path / "metadata.yaml").write_text(yaml.safe_dump({"rosbag2_bagfile_information": info}))
    return path


def test_humble_bag_without_definitions_uses_default_typestore(tmp_path):
    path = write_humble_sqlite3_bag(tmp_path / "humble", sorted_by_receive_time(robot_messages(duration=0.2)))
    data = read_robot_bag(path, CONFIG)
    assert data.joint_states.stats.kept == 20 and data.commanded_torques.torques.shape == (20, 7)


# --- bad input ------------------------------------------------------------------------------


def test_missing_and_empty_bags(tmp_path):
    with pytest.raises(BagError, match="bag not found"):
        read_bag(tmp_path / "nothing", JOINTS)
    (tmp_path / "plain_dir").mkdir()
    with pytest.raises(BagError, match="no metadata.yaml"):
        read_bag(tmp_path / "plain_dir", JOINTS)
    empty = write_bag(tmp_path / "empty", [])
    with pytest.raises(BagError, match="the bag is empty"):
        read_bag(empty, JOINTS)


def test_missing_topic_lists_topics_present(tmp_path):
    js_only = [m for m in robot_messages(duration=0.1) if m[0] == TOPICS.joint_states]
    path = write_bag(tmp_path / "b", js_only)
    with pytest.raises(BagError, match=r"/camera/left_hand/pose \(camera_pose\) is not in the bag; "
                                       r"topics present: \['/robot/joint_states \(sensor_msgs/msg/JointState, 10 msgs\)'\]"):
        read_robot_bag(path, CONFIG, required=("joint_states", "camera_pose"))
    data = read_robot_bag(path, CONFIG)  # optional streams may be absent
    assert data.camera_poses is None and set(data.absent) == {"camera_pose", "commanded_torques"}
    other = write_bag(tmp_path / "other", [("/tf", FACTORY.new("tf2_msgs/msg/TFMessage"), T0_NS)])
    with pytest.raises(BagError, match=r"/robot/joint_states \(joint_states\) is not in the bag; topics present: \['/tf"):
        read_robot_bag(other, CONFIG)


def test_wrong_message_type(tmp_path):
    path = write_bag(tmp_path / "b", [(TOPICS.joint_states, float64_multi_array_msg(FACTORY, [1.0]), T0_NS)])
    with pytest.raises(BagError, match="message type std_msgs/msg/Float64MultiArray; joint_states must be one of "
                                       r"\['sensor_msgs/msg/JointState'\]"):
        read_robot_bag(path, CONFIG)


def test_joint_names_not_matching_the_model(tmp_path):
    partial = [(TOPICS.joint_states, joint_state_msg(FACTORY, T0_NS, JOINTS[:-1], np.zeros(6)), T0_NS)]
    with pytest.raises(BagError, match=r"message 0 .*missing joint\(s\) \['left_w2'\]"):
        read_robot_bag(write_bag(tmp_path / "partial", partial), CONFIG)
    right_arm = [(TOPICS.joint_states, joint_state_msg(FACTORY, T0_NS, ["right_s0"], [0.0]), T0_NS)]
    with pytest.raises(BagError, match="none of its 1 messages name the model joints"):
        read_robot_bag(write_bag(tmp_path / "right", right_arm), CONFIG)


def test_messages_of_other_joints_are_skipped(tmp_path):
    gripper = joint_state_msg(FACTORY, T0_NS + 5, ["l_gripper_l_finger_joint"], [0.01])
    messages = sorted_by_receive_time(list(robot_messages(duration=0.1)) + [(TOPICS.joint_states, gripper, T0_NS + 5)])
    data = read_robot_bag(write_bag(tmp_path / "b", messages), CONFIG)
    assert data.joint_states.stats.skipped == 1 and data.joint_states.stats.kept == 10


def test_nan_samples_dropped_and_counted_or_rejected(tmp_path):
    def q_with_nan_burst():
        q = joint_positions(np.arange(50) / RATE_HZ)
        q[10:13, 2] = np.nan
        return q

    path = write_bag(tmp_path / "b", sorted_by_receive_time(robot_messages(duration=0.5, positions=q_with_nan_burst())))
    data = read_robot_bag(path, CONFIG)
    assert data.joint_states.stats.dropped_nan == 3 and data.joint_states.stats.kept == 47
    assert data.commanded_torques.stats.dropped_nan == 3  # torques were derived from the NaN positions
    assert np.isfinite(data.joint_states.positions).all()
    with pytest.raises(BagError, match=r"/robot/joint_states\]: sample 10 .* has NaN/inf values"):
        read_robot_bag(path, CONFIG, nan_policy="raise")


def test_non_monotonic_stamps(tmp_path):
    def swapped(i, t_ns):  # messages 5 and 6 carry each other's stamps; 8 repeats 7's
        return {5: t_ns + 10_000_000, 6: t_ns - 10_000_000, 8: t_ns - 10_000_000}.get(i, t_ns)

    path = write_bag(tmp_path / "b", sorted_by_receive_time(robot_messages(duration=0.2, stamp_ns=swapped)))
    with pytest.raises(BagError, match="non-monotonic header stamps: sample 6 .* is not after sample 5"):
        read_robot_bag(path, CONFIG)
    data = read_robot_bag(path, CONFIG, order_policy="sort")
    stats = data.joint_states.stats
    assert stats.sorted and stats.dropped_duplicate == 1 and stats.kept == 19
    check_increasing(data.joint_states.stamps_ns)


def test_zero_stamps_fall_back_to_receive_time(tmp_path):
    path = write_bag(tmp_path / "b", sorted_by_receive_time(robot_messages(duration=0.1, stamp_ns=lambda i, t: 0)))
    js = read_robot_bag(path, CONFIG).joint_states
    assert js.stats.stamp_from_receive == 10
    np.testing.assert_array_equal(js.stamps_ns, T0_NS + 200_000 + np.arange(10) * 10_000_000)


def test_policy_and_config_validation(tmp_path):
    with pytest.raises(ValueError, match="nan_policy must be one of"):
        read_bag(tmp_path, JOINTS, nan_policy="ignore")
    with pytest.raises(ValueError, match=r"unknown stream\(s\) \['camera'\]"):
        read_bag(tmp_path, JOINTS, required=("joint_states", "camera"))
    with pytest.raises(BagError, match="unknown keys"):
        BagTopics.from_config({"joint_state": "/js"})


# --- writing --------------------------------------------------------------------------------


def test_writer_is_atomic(tmp_path):
    target = tmp_path / "bag"
    with pytest.raises(RuntimeError, match="boom"):
        with BagWriter(target, "mcap") as writer:
            writer.write("/js", joint_state_msg(FACTORY, T0_NS, JOINTS, np.zeros(7)), T0_NS)
            assert not target.exists()
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []  # neither the bag nor its temporary directory
    write_bag(target, [("/js", joint_state_msg(FACTORY, T0_NS, JOINTS, np.zeros(7)), T0_NS)])
    with pytest.raises(BagError, match="already exists"):
        write_bag(target, [])
    write_bag(target, [("/x", float64_multi_array_msg(FACTORY, [1.0]), T0_NS)], storage="mcap", overwrite=True)
    assert set(bag_info(target).topics) == {"/x"} and sorted(p.name for p in tmp_path.iterdir()) == ["bag"]


def test_writer_errors(tmp_path):
    with pytest.raises(BagError, match="storage must be one of"):
        BagWriter(tmp_path / "b", "rosbag1")
    with BagWriter(tmp_path / "b") as writer:
        with pytest.raises(BagError, match="add_topic"):
            writer.write("/raw", b"\x00\x01\x00\x00", T0_NS)
        writer.write("/js", joint_state_msg(FACTORY, 1, ["a"], [1.0]), T0_NS)
        with pytest.raises(BagError, match="already has type sensor_msgs/msg/JointState"):
            writer.write("/js", float64_multi_array_msg(FACTORY, [1.0]), T0_NS)
    assert default_typestore() is default_typestore()


# --- alignment and filtering ----------------------------------------------------------------


def test_interpolate_multi_rate_streams(robot_bag):
    data = read_robot_bag(robot_bag[0], CONFIG)
    js, cam = data.joint_states, data.camera_poses
    q_at_camera, valid = interpolate(js.times, js.positions, cam.times)
    assert valid.all()  # camera samples lie inside the joint-state time range
    # Linear interpolation of a smooth 100 Hz signal: error ~ |q''| dt^2 / 8.
    np.testing.assert_allclose(q_at_camera, joint_positions(cam.times), atol=0.3 * 3.5**2 * 0.01**2 / 8 * 1.01)
    out, valid = interpolate([0.0, 1.0, 5.0], [[0.0], [1.0], [5.0]], [-0.1, 0.5, 3.0, 5.0, 5.1], max_gap=2.0)
    np.testing.assert_array_equal(valid, [False, True, False, True, False])
    assert out[1, 0] == pytest.approx(0.5, abs=INTERP_TOL) and np.isnan(out[2, 0])
    index, valid = nearest(js.times, [0.004, 0.006, 10.0], tolerance=0.005)
    np.testing.assert_array_equal(index[:2], [0, 1])
    np.testing.assert_array_equal(valid, [True, True, False])


def test_slerp_is_exact_for_constant_rate_rotation():
    times = np.array([0.0, 1.0, 2.0])
    angles = np.array([0.0, 1.0, 2.5])
    quats = np.stack([np.cos(angles / 2), np.zeros(3), np.zeros(3), np.sin(angles / 2)], axis=1)
    quats[1] *= -1  # same rotation, other hemisphere
    query = np.array([0.25, 1.5, 3.0])
    out, valid = interpolate_quaternions(times, quats, query)
    expected_angle = np.array([0.25, 1.75])
    expected = np.stack([np.cos(expected_angle / 2), 0 * expected_angle, 0 * expected_angle, np.sin(expected_angle / 2)], 1)
    np.testing.assert_allclose(np.abs(np.sum(out[:2] * expected, axis=1)), 1.0, atol=SLERP_TOL)
    assert valid.tolist() == [True, True, False]


def test_filtered_derivatives_of_noisy_positions():
    rng = np.random.default_rng(3)
    t = np.arange(400) / RATE_HZ
    q = np.sin(2 * t)[:, None] + NOISE_RAD * rng.standard_normal((400, 1))
    signal = filtered_derivatives(t, q, window=0.15, polyorder=3)
    inner = slice(10, -10)
    assert signal.valid.all()
    assert np.max(np.abs(signal.velocities[inner, 0] - 2 * np.cos(2 * t[inner]))) < VELOCITY_TOL
    assert np.max(np.abs(signal.accelerations[inner, 0] + 4 * np.sin(2 * t[inner]))) < ACCELERATION_TOL
    raw = np.diff(q[:, 0]) * RATE_HZ  # why we filter: raw differences amplify the noise
    assert np.max(np.abs(raw - 2 * np.cos(2 * (t[:-1] + t[1:]) / 2))) > VELOCITY_TOL


def test_filtered_derivatives_jitter_gaps_and_short_segments():
    rng = np.random.default_rng(4)
    t = np.arange(300) / RATE_HZ + rng.uniform(-2e-3, 2e-3, 300)  # 20 % jitter: resampled
    t = np.delete(t, np.arange(150, 160))  # a 0.1 s gap
    t = np.concatenate([t, t[-1] + 1.0 + np.arange(4) / RATE_HZ])  # a 4-sample segment after a gap
    signal = filtered_derivatives(t, np.sin(t), window=0.1)
    good = signal.valid.copy()
    assert not good[-4:].any() and np.isnan(signal.velocities[-4:]).all()
    inner = good & (np.abs(t - 1.55) > 0.1) & (t > 0.1) & (t < 2.9)
    assert np.max(np.abs(signal.velocities[inner] - np.cos(t[inner]))) < VELOCITY_TOL
    with pytest.raises(ValueError, match="not strictly increasing at index 2"):
        filtered_derivatives([0.0, 0.1, 0.1], [0.0, 1.0, 2.0])


def test_static_segments():
    t = np.arange(600) / RATE_HZ  # rest [0, 1.5), move [1.5, 2.5), rest [2.5, 4.5), move, rest [5.5, 6)
    ramp = np.clip(t - 1.5, 0, 1) - np.clip(t - 4.5, 0, 1)
    move = 0.5 * (1 - np.cos(np.pi * ramp))
    q = np.stack([move, -move], axis=1) + NOISE_RAD * np.random.default_rng(5).standard_normal((600, 2))
    segments = detect_static_segments(t, q, velocity_tolerance=0.02, min_duration=0.3)
    assert len(segments) == 3
    first, second, last = segments
    assert first.t_start < SEGMENT_EDGE_TOL and abs(first.t_stop - 1.5) < SEGMENT_EDGE_TOL
    assert abs(second.t_start - 2.5) < SEGMENT_EDGE_TOL and abs(second.t_stop - 4.5) < SEGMENT_EDGE_TOL
    assert abs(last.t_start - 5.5) < SEGMENT_EDGE_TOL
    np.testing.assert_allclose(second.mean(q), [1.0, -1.0], atol=1e-4)
    assert second.duration > 1.5
