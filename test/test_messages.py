"""Message conversions against the rosbags ROS 2 types: every message goes through a CDR round trip."""

import numpy as np
import pytest
import torch

from diffsim_ros.io.ros_messages import (
    NS_PER_S,
    TORQUE_MODE,
    JointMappingError,
    JointNameMap,
    MessageConversionError,
    clock_msg,
    float64_multi_array_msg,
    float64_multi_array_to_array,
    joint_command_msg,
    joint_command_to_array,
    joint_state_msg,
    joint_state_to_sample,
    ns_to_seconds,
    pose_stamped_msg,
    pose_stamped_to_sample,
    quaternion_wxyz_to_xyzw,
    quaternion_xyzw_to_wxyz,
    seconds_to_ns,
    time_msg,
    time_to_ns,
    time_to_seconds,
)
from diffsim_ros.io.ros_types import (
    BAXTER_MSG_DIR,
    CLOCK,
    FLOAT64_MULTI_ARRAY,
    JOINT_COMMAND,
    JOINT_STATE,
    POSE_STAMPED,
    SEA_JOINT_STATE,
    MessageTypeError,
    TypestoreMessages,
    make_typestore,
    normalize_type_name,
)

EXACT = 0.0  # CDR carries float64 bit-exactly
QUAT_TOL = 1e-15
MODEL_JOINTS = ["left_s0", "left_s1", "left_e0", "left_e1", "left_w0", "left_w1", "left_w2"]


@pytest.fixture(scope="module")
def factory():
    return TypestoreMessages(make_typestore())


def roundtrip(factory, msg):
    """Serialize to CDR with the typestore and decode again (what crosses a topic or a bag)."""
    type_name = msg.__msgtype__
    return factory.deserialize(factory.serialize(msg, type_name), type_name)


def test_type_names_normalize():
    assert normalize_type_name("sensor_msgs/JointState") == JOINT_STATE
    assert normalize_type_name(JOINT_STATE) == JOINT_STATE
    with pytest.raises(MessageTypeError, match="invalid message type name"):
        normalize_type_name("JointState")


def test_baxter_types_registered_with_definitions(factory):
    ts = factory.typestore
    msgdef, _ = ts.generate_msgdef(JOINT_COMMAND, ros_version=2)
    assert "int32 TORQUE_MODE=3" in msgdef and "float64[] command" in msgdef
    assert ts.hash_rihs01(JOINT_COMMAND).startswith("RIHS01_")
    assert ts.types[JOINT_COMMAND].TORQUE_MODE == TORQUE_MODE
    assert (BAXTER_MSG_DIR / "LICENSE").read_text().startswith("Copyright (c) 2013-2015, Rethink Robotics")
    sea = factory.new(SEA_JOINT_STATE, name=["left_s1"], actual_effort=[1.5], hyst_state=0.25)
    back = roundtrip(factory, sea)
    assert list(back.name) == ["left_s1"] and back.actual_effort[0] == 1.5 and back.hyst_state == 0.25


def test_factory_defaults_and_errors(factory):
    msg = factory.new("geometry_msgs/msg/PoseWithCovariance")
    assert msg.covariance.shape == (36,) and msg.covariance.dtype == np.float64
    assert roundtrip(factory, factory.new(JOINT_STATE)).name == []
    with pytest.raises(MessageTypeError, match="unknown message type"):
        factory.new("my_msgs/msg/Nope")
    with pytest.raises(MessageTypeError, match=r"no field\(s\) \['nmae'\]"):
        factory.new(JOINT_STATE, nmae=["a"])
    with pytest.raises(MessageTypeError, match="exactly 36 elements"):
        factory.new("geometry_msgs/msg/PoseWithCovariance", covariance=[0.0] * 35)
    with pytest.raises(MessageTypeError, match="name: expected a sequence"):
        factory.new(JOINT_STATE, name="left_s0")
    with pytest.raises(MessageTypeError, match="header: expected a std_msgs/msg/Header"):
        factory.new(JOINT_STATE, header=3)
    with pytest.raises(MessageTypeError, match="mode: expected a int32"):
        factory.new(JOINT_COMMAND, mode=2.5)


def test_time_conversions(factory):
    stamp_ns = 1_700_000_123 * NS_PER_S + 456_789_012
    msg = roundtrip(factory, clock_msg(factory, stamp_ns))
    assert msg.__msgtype__ == CLOCK
    assert (msg.clock.sec, msg.clock.nanosec) == (1_700_000_123, 456_789_012)
    assert time_to_ns(msg.clock) == stamp_ns
    assert time_to_seconds(time_msg(factory, 1_500_000_000)) == 1.5
    assert seconds_to_ns(0.1) == 100_000_000 and ns_to_seconds(250_000_000) == 0.25
    negative = time_msg(factory, -1)  # one ns before the epoch: sec -1, nanosec 999999999
    assert (negative.sec, negative.nanosec) == (-1, NS_PER_S - 1) and time_to_ns(negative) == -1


def test_joint_state_maps_by_name_any_order_extra_joints(factory):
    rng = np.random.default_rng(0)
    order = list(rng.permutation(len(MODEL_JOINTS)))
    names = ["head_pan"] + [MODEL_JOINTS[i] for i in order] + ["torso_t0"]
    q, qd, tau = rng.normal(size=(3, len(MODEL_JOINTS)))
    in_msg_order = lambda v: [99.0] + [v[i] for i in order] + [-99.0]  # noqa: E731
    msg = joint_state_msg(factory, 42, names, in_msg_order(q), in_msg_order(qd), in_msg_order(tau), frame_id="base")
    sample = joint_state_to_sample(roundtrip(factory, msg), JointNameMap(MODEL_JOINTS))
    assert sample.stamp_ns == 42
    np.testing.assert_allclose(sample.positions, q, atol=EXACT)
    np.testing.assert_allclose(sample.velocities, qd, atol=EXACT)
    np.testing.assert_allclose(sample.efforts, tau, atol=EXACT)
    assert sample.is_finite()


def test_joint_state_optional_fields_and_tensors(factory):
    positions = torch.linspace(-1.0, 1.0, 7, dtype=torch.float64, requires_grad=True)
    msg = roundtrip(factory, joint_state_msg(factory, 1, MODEL_JOINTS, positions))
    sample = joint_state_to_sample(msg, JointNameMap(MODEL_JOINTS))
    assert sample.velocities is None and sample.efforts is None
    np.testing.assert_allclose(sample.positions, positions.detach().numpy(), atol=EXACT)


def test_joint_state_bad_names_are_named(factory):
    joint_map = JointNameMap(MODEL_JOINTS)
    missing = roundtrip(factory, joint_state_msg(factory, 1, MODEL_JOINTS[:-1], np.zeros(6)))
    with pytest.raises(JointMappingError, match=r"missing joint\(s\) \['left_w2'\]"):
        joint_state_to_sample(missing, joint_map)
    twice = roundtrip(factory, joint_state_msg(factory, 1, MODEL_JOINTS + ["left_s0"], np.zeros(8)))
    with pytest.raises(JointMappingError, match="'left_s0' appears twice"):
        joint_state_to_sample(twice, joint_map)
    short = factory.new(JOINT_STATE, name=MODEL_JOINTS, position=np.zeros(7), effort=np.zeros(3))
    with pytest.raises(JointMappingError, match="7 names but 3 effort"):
        joint_state_to_sample(short, joint_map)
    with pytest.raises(MessageConversionError, match="3 values for 7 joint names"):
        joint_state_msg(factory, 1, MODEL_JOINTS, np.zeros(3))
    with pytest.raises(JointMappingError, match="duplicate model joint names"):
        JointNameMap(["a", "a"])


def test_joint_state_nonfinite_detection(factory):
    positions = np.zeros(7)
    positions[3] = np.nan
    msg = roundtrip(factory, joint_state_msg(factory, 1, MODEL_JOINTS, positions, efforts=np.full(7, np.inf)))
    sample = joint_state_to_sample(msg, JointNameMap(MODEL_JOINTS))
    assert not sample.is_finite()
    assert sample.nonfinite_joints(MODEL_JOINTS) == MODEL_JOINTS  # efforts are inf everywhere


def test_pose_stamped_quaternion_order(factory):
    angle = 0.7
    q_wxyz = np.array([np.cos(angle / 2), 0.0, 0.0, np.sin(angle / 2)])  # rotation about z
    msg = roundtrip(factory, pose_stamped_msg(factory, 7, "camera", [0.1, -0.2, 1.5], q_wxyz))
    assert msg.pose.orientation.w == q_wxyz[0] and msg.pose.orientation.z == q_wxyz[3]  # ROS stores x, y, z, w
    assert msg.header.frame_id == "camera"
    sample = pose_stamped_to_sample(msg)
    np.testing.assert_allclose(sample.quaternion, q_wxyz, atol=QUAT_TOL)
    np.testing.assert_allclose(sample.position, [0.1, -0.2, 1.5], atol=EXACT)
    assert sample.stamp_ns == 7 and sample.frame_id == "camera" and sample.is_finite()


def test_pose_stamped_bad_quaternions(factory):
    zero = factory.new(POSE_STAMPED)  # all-zero orientation, as a buggy tracker would send
    with pytest.raises(MessageConversionError, match="norm 0"):
        pose_stamped_to_sample(zero)
    nan = roundtrip(factory, pose_stamped_msg(factory, 1, "camera", [0, 0, np.nan], [1, 0, 0, 0]))
    assert not pose_stamped_to_sample(nan).is_finite()
    slightly_off = pose_stamped_msg(factory, 1, "camera", [0, 0, 0], [1.01, 0, 0, 0])
    assert pose_stamped_to_sample(slightly_off).quaternion[0] == pytest.approx(1.0, abs=QUAT_TOL)


def test_quaternion_conversions_are_inverse():
    q = np.random.default_rng(1).normal(size=(5, 4))
    np.testing.assert_array_equal(quaternion_wxyz_to_xyzw(quaternion_xyzw_to_wxyz(q)), q)
    np.testing.assert_array_equal(quaternion_xyzw_to_wxyz([1, 2, 3, 4]), [4, 1, 2, 3])


def test_float64_multi_array(factory):
    msg = roundtrip(factory, float64_multi_array_msg(factory, [1.0, -2.0, 3.5], label="joints"))
    assert msg.__msgtype__ == FLOAT64_MULTI_ARRAY
    assert msg.layout.dim[0].label == "joints" and msg.layout.dim[0].size == 3 and msg.layout.dim[0].stride == 3
    np.testing.assert_array_equal(float64_multi_array_to_array(msg, 3), [1.0, -2.0, 3.5])
    with pytest.raises(MessageConversionError, match="expected 7 values, got 3"):
        float64_multi_array_to_array(msg, 7)


def test_joint_command_torque_mode(factory):
    command = np.arange(7.0)
    names = list(reversed(MODEL_JOINTS))
    msg = roundtrip(factory, joint_command_msg(factory, names, command[::-1]))
    assert msg.mode == TORQUE_MODE == 3 and list(msg.names) == names
    np.testing.assert_array_equal(joint_command_to_array(msg, JointNameMap(MODEL_JOINTS)), command)
    position = roundtrip(factory, joint_command_msg(factory, names, command, mode=1))
    with pytest.raises(MessageConversionError, match="mode 1, expected 3"):
        joint_command_to_array(position, JointNameMap(MODEL_JOINTS))
    with pytest.raises(MessageConversionError, match="2 commands for 7 names"):
        joint_command_msg(factory, names, [0.0, 1.0])
    with pytest.raises(MessageConversionError, match="unknown mode 9"):
        joint_command_msg(factory, names, command, mode=9)
