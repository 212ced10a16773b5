"""Message conversions and building blocks of the nodes, against the rosbags ROS 2 types:
the estimates layout (through CDR), command outputs (Baxter JointCommand, ros2_control
Float64MultiArray in the controller's joint order), the sim robot's joint states and camera
poses, the waypoint reference, and the emulated hardware command interfaces.
"""

import ast
import sys

import numpy as np
import pytest

from diffsim_ros.io.ros_messages import (
    TORQUE_MODE,
    JointNameMap,
    MessageConversionError,
    float64_multi_array_msg,
    joint_state_to_sample,
    pose_stamped_to_sample,
)
from diffsim_ros.io.ros_types import EMPTY, FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE, POSE_STAMPED, TypestoreMessages
from diffsim_ros.model import load_robot_config
from diffsim_ros.testbed.hardware import POSITION, TORQUE, BaxterLimbEmulator, EffortControllerEmulator
from diffsim_ros.nodes.messages import ESTIMATE_ROWS_LABEL, estimates_from_msg, estimates_msg, flatten_parameters
from diffsim_ros.nodes.outputs import CommandOutput, baxter_topics, controller_joint_order, effort_controller_topic
from diffsim_ros.control.references import WaypointSequence, make_reference
from diffsim_ros.nodes.references import waypoint_array
from diffsim_ros.nodes.sim_robot_node import SimRobotNode
from diffsim_ros.control import SetPoint
from diffsim_ros.control.gravity import holding_torques
from diffsim_ros.runtime import COMMAND_QOS, SENSOR_QOS
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from diffsim_ros.runtime.params import ParameterError
from oracles import BAXTER_LEFT, REPO

FACTORY = TypestoreMessages()
JOINTS = ("left_s0", "left_s1", "left_e0", "left_e1", "left_w0", "left_w1", "left_w2")
EXACT = 0.0
ROUNDING = 1e-12  # [rad] minimum-jerk evaluation at segment boundaries
POSE_TOL = 1e-9  # [m] noise-free camera pose vs MuJoCo kinematics
JOINT_NOISE_TOL = 1e-3  # [rad] 10 sigma of the sim's position noise


def cdr(msg, type_name):
    """The message after a CDR round trip, as every subscriber receives it."""
    return FACTORY.deserialize(FACTORY.serialize(msg, type_name), type_name)


class Recorder:
    def __init__(self, handle, msg_type, topic, qos=COMMAND_QOS):
        self.messages = []
        handle.create_subscription(msg_type, topic, self.messages.append, qos)


# --- estimates layout ------------------------------------------------------------------------


def test_estimates_round_trip_through_cdr_with_self_describing_labels():
    values = {"payload.mass": np.array(1.25), "payload.com": [0.01, -0.02, 0.03], "left_s1.spring.stiffness": 9600.0}
    stddev = {"payload.mass": 0.001, "payload.com": [1e-4, 2e-4, 3e-4]}
    msg = cdr(estimates_msg(FACTORY, values, stddev), FLOAT64_MULTI_ARRAY)
    rows, columns = msg.layout.dim
    assert (rows.label, rows.size, rows.stride) == (ESTIMATE_ROWS_LABEL, 2, 10)
    assert columns.label == "payload.mass;payload.com[0];payload.com[1];payload.com[2];left_s1.spring.stiffness"
    assert (columns.size, columns.stride) == (5, 5)
    assert msg.data.tolist()[:5] == [1.25, 0.01, -0.02, 0.03, 9600.0]
    decoded, sigma = estimates_from_msg(msg)
    assert decoded["payload.mass"] == 1.25 and decoded["left_s1.spring.stiffness"] == 9600.0
    assert decoded["payload.com"].tolist() == [0.01, -0.02, 0.03]
    assert sigma["payload.com"].tolist() == [1e-4, 2e-4, 3e-4]
    assert np.isnan(sigma["left_s1.spring.stiffness"])  # unknown stddev
    assert flatten_parameters({"a": 1.0, "b": [2.0, 3.0]})[0] == ["a", "b[0]", "b[1]"]
    empty = estimates_from_msg(cdr(estimates_msg(FACTORY, {}), FLOAT64_MULTI_ARRAY))
    assert empty == ({}, {})


def test_estimates_in_another_layout_are_refused():
    with pytest.raises(MessageConversionError, match="expected a 2 x K array"):
        estimates_from_msg(float64_multi_array_msg(FACTORY, [1.0, 2.0]))
    msg = estimates_msg(FACTORY, {"a": 1.0, "b": 2.0})
    msg.data = msg.data[:3]
    with pytest.raises(MessageConversionError, match="2 names, size 2 and 3 values disagree"):
        estimates_from_msg(msg)
    msg = estimates_msg(FACTORY, {"a": 1.0, "b": 2.0})
    msg.layout.dim[1].label = "a;b[1]"
    with pytest.raises(MessageConversionError, match=r"element 'b\[1\]' out of order"):
        estimates_from_msg(msg)


# --- command outputs -------------------------------------------------------------------------


def test_baxter_output_is_a_torque_mode_joint_command_plus_suppress():
    with EmbeddedRuntime() as runtime:
        node = runtime.create_node("controller")
        output = CommandOutput(node, "baxter", JOINTS, side="right")
        commands = Recorder(runtime.create_node("robot"), JOINT_COMMAND, "/robot/limb/right/joint_command")
        suppress = Recorder(runtime.create_node("robot2"), EMPTY, "/robot/limb/right/suppress_gravity_compensation")
        output.publish(np.arange(7.0))
        output.suppress_gravity_compensation()
        runtime.spin_for(0.01)
    (msg,), (_,) = commands.messages, suppress.messages
    assert msg.mode == TORQUE_MODE and list(msg.names) == list(JOINTS) and msg.command.tolist() == list(range(7))
    assert runtime.topics()["/robot/limb/right/joint_command"] == JOINT_COMMAND
    assert output.published == 1 and output.topic == "/robot/limb/right/joint_command"


def test_ros2_control_output_is_exactly_the_controllers_joints_in_its_order():
    controller_joints = ["left_w2", "left_s0", "left_s1", "left_e0", "left_e1", "left_w0", "left_w1"]
    with EmbeddedRuntime() as runtime:
        output = CommandOutput(runtime.create_node("controller"), "ros2_control", JOINTS, controller_name="/arm_effort/",
                               controller_joints=controller_joints)
        recorder = Recorder(runtime.create_node("ros2_control"), FLOAT64_MULTI_ARRAY, "/arm_effort/commands")
        output.publish(np.arange(7.0))
        output.suppress_gravity_compensation()  # no-op without Baxter
        runtime.spin_for(0.01)
    (msg,) = recorder.messages
    assert msg.data.tolist() == [6.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert [t for t in runtime.topics() if "suppress" in t] == []
    assert controller_joint_order(JOINTS, []).tolist() == list(range(7))
    with pytest.raises(ParameterError, match="controller_name must not be empty"):
        effort_controller_topic("/")
    with pytest.raises(ParameterError, match="side must be one of"):
        baxter_topics("both")


# --- sim robot ----------------------------------------------------------------------------


def test_sim_robot_publishes_baxter_like_joint_states_and_camera_poses():
    extra = ["head_pan", "torso_t0", "right_s0"]
    start = [0.1, -0.5, 0.2, 1.2, 0.3, 0.9, -0.4]
    with EmbeddedRuntime() as runtime:
        sim = runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides={
            "extra_joints": extra, "initial_positions": start, "camera_rate_hz": 50.0,
            "truth.camera_pose": [1.5, 0.2, 0.8, 0.0, 0.0, 0.7071067811865476, 0.7071067811865476],
            "noise.camera_position": 0.0, "noise.camera_rotation": 0.0})
        probe = runtime.create_node("probe")
        states = Recorder(probe, JOINT_STATE, "/robot/joint_states", SENSOR_QOS)
        poses = Recorder(probe, POSE_STAMPED, "/camera/left_hand/pose", SENSOR_QOS)
        runtime.spin_for(0.1)
        link = sim.plant.link_pose("left_hand")
        camera = sim.plant.truth.camera_pose
    assert len(states.messages) == 10 and len(poses.messages) == 5  # 100 Hz and 50 Hz
    msg = states.messages[-1]
    assert list(msg.name) == sorted(list(JOINTS) + extra)
    sample = joint_state_to_sample(msg, JointNameMap(JOINTS))
    assert np.abs(sample.positions - start).max() < JOINT_NOISE_TOL  # held in position mode
    assert msg.position[list(msg.name).index("head_pan")] == EXACT
    # The camera sees the tracked link at inverse(camera) @ link.
    pose = pose_stamped_to_sample(poses.messages[-1])
    expected = np.linalg.inv(camera) @ link
    assert pose.frame_id == "camera" and np.abs(pose.position - expected[:3, 3]).max() < POSE_TOL
    assert camera[:3, 3].tolist() == [1.5, 0.2, 0.8]


# --- waypoint reference ----------------------------------------------------------------------


def test_waypoint_sequence_moves_holds_and_loops():
    start, a, b = np.zeros(2), np.array([1.0, -1.0]), np.array([2.0, 0.5])
    reference = WaypointSequence(start, np.stack([a, b]), t_start=10.0, move_duration=2.0, hold_duration=1.0)
    assert reference(9.0)[0].tolist() == start.tolist()  # before the start: at the start
    q, qd, qdd = reference(11.0)
    assert np.allclose(q, (start + a) / 2, atol=ROUNDING) and np.all(qd != 0)
    for t in (12.0, 12.5, 13.0 - 1e-9):
        q, qd, _ = reference(t)
        assert np.abs(q - a).max() <= ROUNDING and np.abs(qd).max() <= 1e-6
    assert np.abs(reference(16.0)[0] - b).max() <= ROUNDING
    assert np.abs(reference(100.0)[0] - b).max() <= ROUNDING and reference.duration == 6.0
    looping = WaypointSequence(start, np.stack([a, b]), 0.0, 2.0, 1.0, loop=True)
    assert np.abs(looping(6.0 + 2.5)[0] - a).max() <= ROUNDING  # the second pass: b -> a
    assert isinstance(make_reference(start, waypoint_array([], 2), 0.0, 1.0, 1.0), SetPoint)
    with pytest.raises(ParameterError, match="must be finite"):
        waypoint_array([0.0, np.nan], 2)


# --- emulated hardware -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def nominal():
    return load_robot_config(BAXTER_LEFT).build_model()


def test_baxter_limb_adds_its_gravity_compensation_and_falls_back_without_commands(nominal):
    q, qd = np.array([0.1, -0.5, 0.2, 1.2, 0.3, 0.9, -0.4]), np.zeros(7)
    limb = BaxterLimbEmulator(nominal, q, command_timeout=0.2, suppress_timeout=0.2)
    hold = holding_torques(limb.position.fast, q)
    assert limb.mode == POSITION and np.allclose(limb.torques(0.0, q, qd), hold)  # holding its start
    command = np.full(7, 0.5)
    limb.command(1.0, command)
    assert limb.mode == TORQUE and np.allclose(limb.torques(1.01, q, qd), command + hold)  # own compensation added
    limb.suppress_gravity_compensation(1.01)
    assert limb.torques(1.1, q, qd).tolist() == command.tolist()
    limb.command(1.15, command)
    assert np.allclose(limb.torques(1.25, q, qd), command + hold)  # suppress expired after 0.2 s
    moved = q + 0.05
    torques = limb.torques(1.36, moved, qd)  # no command for more than 0.2 s
    assert limb.mode == POSITION and limb.fallbacks == 1
    assert np.allclose(torques, holding_torques(limb.position.fast, moved))  # holds where it is


def test_effort_controller_holds_until_the_first_command_then_keeps_the_last(nominal):
    q, qd = np.zeros(7), np.zeros(7)
    controller = EffortControllerEmulator(nominal, q)
    assert controller.mode == POSITION and np.all(controller.torques(0.0, q + 0.1, qd) != 0)
    controller.command(0.0, np.ones(7))
    assert controller.mode == TORQUE and controller.torques(100.0, q, qd).tolist() == [1.0] * 7


# --- console scripts -------------------------------------------------------------------------


@pytest.mark.parametrize("node", ["estimator_node", "controller_node", "sim_robot_node"])
def test_node_entry_points_say_clearly_that_ros_is_missing(node, monkeypatch):
    from diffsim_ros.runtime.rclpy_backend import RosNotAvailableError

    monkeypatch.setitem(sys.modules, "rclpy", None)  # `import rclpy` fails, also where it is installed
    main = __import__(f"diffsim_ros.nodes.{node}", fromlist=["main"]).main
    with pytest.raises(RosNotAvailableError, match="source a ROS 2 installation"):
        main([])


def test_setup_registers_a_console_script_per_node():
    tree = ast.parse((REPO / "setup.py").read_text())
    scripts = next(ast.literal_eval(kw.value)["console_scripts"] for node in ast.walk(tree)
                   if isinstance(node, ast.Call) for kw in node.keywords if kw.arg == "entry_points")
    entries = dict(line.replace(" ", "").split("=") for line in scripts)
    for name in ("estimator_node", "controller_node", "sim_robot_node"):
        module, function = entries[name].split(":")
        assert module == f"diffsim_ros.nodes.{name}" and function == "main"
        assert callable(getattr(__import__(module, fromlist=[function]), function))
