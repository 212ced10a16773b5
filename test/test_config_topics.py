"""A robot config's topics and command order, as a lab has them: no silent fallback, any arm.

A configured topic that the bag lacks is an error naming it and the bag's topics (with their
types), unless the user asked to do without it (``--torque-source effort``, ``--no-camera``,
or groups that use no camera poses). A Float64MultiArray command is read in the effort
controller's order (``robot.controller_joints``) by the bag reader and the estimator node.
Paths in errors are absolute, with what a relative one was relative to.

Bags look like a Franka Panda under ros2_control: a joint_state_broadcaster's
``/joint_states`` (every joint of the URDF in alphabetical order, fingers included, 250 Hz,
header stamps) and a JointGroupEffortController's ``/effort_controller/commands``.
"""

import os

import numpy as np
import pytest
import yaml

from diffsim_ros.cli import exits
from diffsim_ros.cli import main as cli_main
from diffsim_ros.io.bags import BagError, MissingTopicError, read_robot_bag, write_bag
from diffsim_ros.io.ros_messages import float64_multi_array_msg, joint_state_msg
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore
from diffsim_ros.model import RobotModel, RobotModelError, load_robot_config
from diffsim_ros.pipelines.calibration import read_bag_dataset
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from oracles import BAXTER_LEFT, example_robot_urdf

RATE = 250.0  # [Hz] a joint_state_broadcaster's usual rate
T0_NS = 1_700_000_000 * 10**9
EXACT = 0.0
PANDA_URDF = example_robot_urdf("panda_description/urdf/panda.urdf")
ARM = [f"panda_joint{i}" for i in range(1, 8)]
FINGERS = ["panda_finger_joint1", "panda_finger_joint2"]
PERMUTED = ["panda_joint7", "panda_joint1", "panda_joint3", "panda_joint2", "panda_joint6", "panda_joint5", "panda_joint4"]
JOINT_STATES, COMMANDS = "/joint_states", "/effort_controller/commands"
_PANDA = RobotModel.from_urdf(PANDA_URDF, base_link="panda_link0", tip_link="panda_link8")
MIDDLE = ((_PANDA.lower + _PANDA.upper) / 2).numpy()  # [rad] mid-range of each joint (joint 4 is all negative)


def panda_config(path, **changes):
    """A Panda robot config (URDF relative to it, chain panda_link0 -> panda_link8) with ``changes``.

    ``changes``: ``robot.<key>`` (``controller_joints``, ``urdf``) or ``topics`` entries.
    """
    (path.parent / "panda.urdf").write_text(PANDA_URDF.read_text())
    raw = {"robot": {"name": "panda", "urdf": "panda.urdf", "base_link": "panda_link0", "tip_link": "panda_link8",
                     "joints": list(ARM)},
           "payload": {"frame": "panda_link8"},
           "topics": {"joint_states": JOINT_STATES, "commanded_torques": COMMANDS}}
    for key, value in changes.items():
        (raw["topics"] if key in ("joint_states", "commanded_torques", "camera_pose") else raw["robot"])[key] = value
    path.write_text(yaml.safe_dump(raw))
    return path


def chain_torques(t):
    """Commanded torques in chain order [N·m], shape (len(t), 7): each joint its own."""
    k = np.arange(1, 8)
    return 10.0 * k + np.sin(np.outer(t, k))


def panda_bag(path, seconds, controller_joints=ARM, commands=True):
    """A ros2_control-style Panda bag: the efforts are what was commanded, in chain order.

    Args:
        controller_joints: The effort controller's joints in its order (its commands' order).
        commands: Record the controller's commands.
    """
    factory = TypestoreMessages(default_typestore())
    names = sorted(ARM + FINGERS)  # the broadcaster's order
    order = [ARM.index(name) for name in controller_joints]
    messages = []
    for i in range(int(round(seconds * RATE))):
        t = i / RATE
        stamp = T0_NS + int(round(t * 1e9))
        q_arm = MIDDLE + 0.3 * np.sin(2 * np.pi * 0.4 * t + np.arange(7))
        tau = chain_torques(np.array([t]))[0]
        by_name = {**dict(zip(ARM, q_arm)), **dict.fromkeys(FINGERS, 0.02)}
        efforts = {**dict(zip(ARM, tau)), **dict.fromkeys(FINGERS, 0.0)}
        messages.append((JOINT_STATES, joint_state_msg(factory, stamp, names, [by_name[n] for n in names],
                                                       np.zeros(len(names)), [efforts[n] for n in names]), stamp + 10**5))
        if commands:
            messages.append((COMMANDS, float64_multi_array_msg(factory, tau[order]), stamp + 2 * 10**5))
    return write_bag(path, sorted(messages, key=lambda m: m[2]), storage="mcap")


def calibrate(tmp_path, bag, config, *extra):
    return cli_main(["calibrate", "--bag", str(bag), "--config", str(config), "--out", str(tmp_path / "out"), *extra])


def replay(tmp_path, bag, config, *extra):
    return cli_main(["replay", "--bag", str(bag), "--config", str(config), "--out", str(tmp_path / "replayed"), *extra])


@pytest.fixture
def no_play(monkeypatch):
    """Replay fails the test if it starts playing the bag."""
    def play(*args):
        raise AssertionError("the bag was played")

    monkeypatch.setattr("diffsim_ros.cli.replay._play", play)


# --- no silent fallback ---------------------------------------------------------------------


def test_a_misspelt_command_topic_is_an_error_naming_the_bags_topics(tmp_path, capsys, no_play):
    """With /effort_controllers/commands (one letter off) calibrate used the efforts and exited 0."""
    config = panda_config(tmp_path / "robot.yaml", commanded_torques="/effort_controllers/commands")
    bag = panda_bag(tmp_path / "bag", 1.0)
    for command in (calibrate, replay):
        assert command(tmp_path, bag, config) == exits.BAD_INPUT
        err = capsys.readouterr().err
        assert ("topic /effort_controllers/commands (commanded_torques) is not in the bag; topics present: "
                "['/effort_controller/commands (std_msgs/msg/Float64MultiArray, 250 msgs)', "
                "'/joint_states (sensor_msgs/msg/JointState, 250 msgs)']") in err, err
        assert "--torque-source effort" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "replayed").exists()


def test_the_efforts_explain_the_motion_only_when_asked(tmp_path, capsys, no_play):
    """--torque-source effort reads past the missing commands (to the data check: 1 s is too little)."""
    config = panda_config(tmp_path / "robot.yaml")
    bag = panda_bag(tmp_path / "bag", 1.0, commands=False)
    assert calibrate(tmp_path, bag, config, "--estimate", "payload") == exits.BAD_INPUT
    assert "topic /effort_controller/commands (commanded_torques) is not in the bag" in capsys.readouterr().err
    assert calibrate(tmp_path, bag, config, "--estimate", "payload", "--torque-source", "effort") == exits.UNDETERMINED
    assert "s of usable motion and 0 rest pose(s); an estimate needs at least 3 s" in capsys.readouterr().err
    assert replay(tmp_path, bag, config, "--torque-source", "effort") == exits.UNDETERMINED
    assert "an estimate needs at least 3 s" in capsys.readouterr().err


def test_explicit_groups_without_effort_bias_are_said_to_leave_it_out(tmp_path, capsys):
    config = panda_config(tmp_path / "robot.yaml")
    bag = panda_bag(tmp_path / "bag", 4.0, commands=False)
    # The fit itself is not the point: stop it before it starts.
    code = calibrate(tmp_path, bag, config, "--estimate", "payload,effort_delay", "--torque-source", "effort",
                     "--max-iterations", "1")
    out = capsys.readouterr().out
    assert code in (exits.OK, exits.UNDETERMINED)
    assert "note: the torques are the measured efforts and --estimate leaves out effort_bias:" in out


@pytest.mark.parametrize("extra, code", [
    ((), exits.BAD_INPUT),  # the default groups read every configured stream
    (("--estimate", "camera"), exits.BAD_INPUT),
    (("--no-camera",), exits.UNDETERMINED),
    (("--estimate", "payload"), exits.UNDETERMINED),  # no group that uses camera poses: not read
    (("--no-camera", "--estimate", "payload,camera"), exits.BAD_INPUT),
])
def test_a_configured_camera_topic_must_be_in_the_bag_unless_not_used(tmp_path, capsys, extra, code):
    config = panda_config(tmp_path / "robot.yaml", camera_pose="/camera/hand/pose")
    bag = panda_bag(tmp_path / "bag", 1.0)
    assert calibrate(tmp_path, bag, config, *extra) == code
    err = capsys.readouterr().err
    if extra[:1] == ("--no-camera",) and code == exits.BAD_INPUT:
        assert "--no-camera: group(s) ['camera'] need camera poses" in err
    elif code == exits.BAD_INPUT:
        assert "topic /camera/hand/pose (camera_pose) is not in the bag; topics present: [" in err
        assert "for a bag recorded without the camera: --no-camera" in err
    else:
        assert "an estimate needs at least 3 s" in err


def test_a_missing_joint_state_topic_names_the_config_key(tmp_path, capsys, no_play):
    config = panda_config(tmp_path / "robot.yaml", joint_states="/franka/joint_states")
    bag = panda_bag(tmp_path / "bag", 0.2)
    assert calibrate(tmp_path, bag, config) == exits.BAD_INPUT
    refused = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("diffsim-ros calibrate: ")
    assert "topic /franka/joint_states (joint_states) is not in the bag" in refused
    assert "the robot config's topics.joint_states (default /joint_states)" in refused
    assert replay(tmp_path, bag, config) == exits.BAD_INPUT
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"diffsim-ros replay: {refused}"


def test_the_library_names_what_may_be_left_out(tmp_path):
    config = load_robot_config(panda_config(tmp_path / "robot.yaml", camera_pose="/camera/hand/pose"))
    bag = panda_bag(tmp_path / "bag", 0.2)
    with pytest.raises(MissingTopicError, match=r"/camera/hand/pose \(camera_pose\) is not in the bag") as caught:
        read_bag_dataset(bag, config, config.build_model())
    assert (caught.value.stream, caught.value.topic) == ("camera_pose", "/camera/hand/pose")
    with pytest.raises(ValueError, match="without: unknown stream"):
        read_bag_dataset(bag, config, config.build_model(), without=("joint_states",))
    _, summary = read_bag_dataset(bag, config, config.build_model(), without=("camera_pose",))
    assert summary.torque_source == "commanded"


# --- the effort controller's joint order ------------------------------------------------------


@pytest.mark.parametrize("controller_joints", [ARM, PERMUTED], ids=["chain_order", "permuted"])
def test_float64_commands_are_read_in_the_controllers_order(tmp_path, controller_joints):
    config = load_robot_config(panda_config(tmp_path / "robot.yaml", controller_joints=list(controller_joints)))
    bag = panda_bag(tmp_path / "bag", 0.4, controller_joints=controller_joints)
    data = read_robot_bag(bag, config)
    assert data.commanded_torques.torques.shape == (100, 7)
    # The commands in chain order are what the arm measured (this bag's efforts).
    assert np.abs(data.commanded_torques.torques - data.joint_states.efforts).max() == EXACT
    assert np.abs(data.commanded_torques.torques - chain_torques(np.arange(100) / RATE)).max() < 1e-12


def test_commands_in_another_order_than_configured_disagree_with_the_efforts(tmp_path):
    """Without robot.controller_joints the permuted commands are read in chain order: wrong by tens of N·m."""
    config = load_robot_config(panda_config(tmp_path / "robot.yaml"))
    data = read_robot_bag(panda_bag(tmp_path / "bag", 0.4, controller_joints=PERMUTED), config)
    assert np.abs(data.commanded_torques.torques - data.joint_states.efforts).max() > 10.0


@pytest.mark.parametrize("controller_joints, message", [
    (ARM[:6], r"6 joints for the chain's 7; missing \['panda_joint7'\]"),
    (ARM[:6] + ["panda_finger_joint1"], r"not in the chain \['panda_finger_joint1'\]; missing \['panda_joint7'\]"),
    (ARM + ["panda_joint1"], r"8 joints for the chain's 7; duplicate\(s\) \['panda_joint1'\]"),
    ("panda_joint1", "'controller_joints' must be a list of joint names"),
])
def test_a_wrong_controller_joint_list_is_refused_when_the_config_loads(tmp_path, capsys, controller_joints, message):
    config = panda_config(tmp_path / "robot.yaml", controller_joints=controller_joints)
    with pytest.raises(RobotModelError, match=message):
        load_robot_config(config)
    assert calibrate(tmp_path, tmp_path / "no_bag_needed", config) == exits.BAD_INPUT
    assert f"{config} [robot]: 'controller_joints'" in capsys.readouterr().err


def test_controller_joints_are_checked_against_the_chain_without_robot_joints(tmp_path):
    config = load_robot_config(panda_config(tmp_path / "robot.yaml", joints=[], controller_joints=PERMUTED[:6]))
    with pytest.raises(RobotModelError, match=r"6 joints for the chain's 7; missing \['panda_joint4'\]"):
        config.build_model()


def test_a_wrong_length_command_names_the_order_expected(tmp_path):
    config = load_robot_config(panda_config(tmp_path / "robot.yaml"))
    factory = TypestoreMessages(default_typestore())
    bag = write_bag(tmp_path / "bag", [
        (JOINT_STATES, joint_state_msg(factory, T0_NS, ARM, np.zeros(7), efforts=np.zeros(7)), T0_NS),
        (COMMANDS, float64_multi_array_msg(factory, np.zeros(9)), T0_NS + 1)])
    with pytest.raises(BagError, match=r"one torque per joint \['panda_joint1', .*'panda_joint7'\]\): expected 7 "
                                       "values, got 9"):
        read_robot_bag(bag, config)


def test_the_estimator_node_reads_commands_in_the_controllers_order(tmp_path):
    config = panda_config(tmp_path / "robot.yaml", controller_joints=PERMUTED)
    from diffsim_ros.nodes.estimator_node import EstimatorNode

    with EmbeddedRuntime() as runtime:
        node = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
            "robot_config": str(config), "commanded_torques_topic": COMMANDS, "save_on_shutdown": False,
            "torque_estimate": "off", "groups": ["payload"]})
        received = []
        node.estimator.add_commanded_torque = lambda t, tau: received.append(np.array(tau))
        publisher = runtime.create_node("controller").create_publisher("std_msgs/msg/Float64MultiArray", COMMANDS, 10)
        tau = chain_torques(np.array([0.0]))[0]
        publisher.publish(float64_multi_array_msg(runtime.messages, tau[[ARM.index(n) for n in PERMUTED]]))
        runtime.spin_for(0.05)
    assert len(received) == 1 and np.abs(received[0] - tau).max() == EXACT


# --- documented behaviour ----------------------------------------------------------------------


def test_movable_joints_off_the_chain_are_locked_at_zero_and_merged():
    """README, "How the URDF becomes the model": the Panda's fingers below panda_link8."""
    from diffsim_ros.model.urdf import describe_tree
    from diffsim_ros.model.urdf_document import read_urdf

    urdf = read_urdf(PANDA_URDF)
    tree = describe_tree(urdf, "panda_link0", "panda_link8")
    assert [joint.name for joint in tree.joints] == ARM
    last = tree.joints[-1]
    merged = ["panda_link7", "panda_link8", "panda_hand", "panda_hand_tcp", "panda_leftfinger", "panda_rightfinger"]
    assert last.merged_links == merged
    masses = {link.name: link.inertial.mass if link.inertial else 0.0 for link in urdf.links}
    assert abs(last.mass - sum(masses[name] for name in merged)) < 1e-12
    finger = next(j for j in urdf.joints if j.name == "panda_finger_joint1")
    assert (finger.limit.lower, finger.type) == (0.0, "prismatic")  # q = 0 is inside its limits: the finger closed
    hand, left = tree.frames["panda_hand"].placement, tree.frames["panda_leftfinger"].placement
    assert np.abs(np.linalg.inv(hand) @ left - finger.origin).max() < 1e-12


def test_readme_and_calibrate_help_list_the_same_groups(capsys, monkeypatch):
    """The README's usage line listed 7 of the 9 groups that --help offers."""
    import re

    monkeypatch.setenv("COLUMNS", "1000")  # argparse would break the long list inside a word

    from diffsim_ros.vocabulary import GROUPS
    from oracles import REPO

    readme = (REPO / "README.md").read_text()
    usage = readme.split("diffsim-ros calibrate --bag BAG", 1)[1].split("diffsim-ros replay", 1)[0]
    (listed,) = re.findall(r"\[--estimate ([a-z_,]+)\]", usage)
    with pytest.raises(SystemExit):
        cli_main(["calibrate", "--help"])
    help_text = capsys.readouterr().out
    (offered,) = re.findall(r"parameter groups from ([a-z_,]+)", help_text)
    assert listed.split(",") == offered.split(",") == list(GROUPS)


# --- paths in errors ----------------------------------------------------------------------------


def test_a_missing_urdf_is_shown_resolved_with_what_it_was_relative_to(tmp_path, capsys, monkeypatch):
    """This said 'URDF file not found: panda.urdf'."""
    config = panda_config(tmp_path / "robot.yaml", urdf="urdf/panda.urdf")
    monkeypatch.chdir(tmp_path)
    assert calibrate(tmp_path, tmp_path / "bag", "robot.yaml") == exits.BAD_INPUT
    assert (f"URDF file not found: {tmp_path}/urdf/panda.urdf ('urdf/panda.urdf' relative to the config file "
            f"{config})") in capsys.readouterr().err


def test_missing_inputs_given_relative_are_shown_resolved(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert calibrate(tmp_path, "bag", "nothing.yaml") == exits.BAD_INPUT
    assert (f"robot config not found: {tmp_path}/nothing.yaml ('nothing.yaml' relative to the current directory "
            f"{tmp_path})") in capsys.readouterr().err
    panda_config(tmp_path / "robot.yaml")
    assert calibrate(tmp_path, "bag", "robot.yaml") == exits.BAD_INPUT
    assert f"bag not found: {tmp_path}/bag ('bag' relative to the current directory {tmp_path})" in \
        capsys.readouterr().err
    assert os.path.isabs(load_robot_config("robot.yaml").path)


@pytest.mark.parametrize("command, message", [
    (["replay", "--bag", "bag", "--config", "CONFIG", "--out", "o", "--calibration", "cal.yaml"],
     "calibration file not found: {tmp}/cal.yaml ('cal.yaml' relative to the current directory {tmp})"),
    (["estimate-objects", "--bag", "bag", "--scene", "scene.yaml", "--out", "o"],
     "scene file not found: {tmp}/scene.yaml ('scene.yaml' relative to the current directory {tmp})"),
    (["torque-map", "show", "map.npz"], "torque map not found: {tmp}/map.npz ('map.npz' relative to the current "
                                        "directory {tmp})"),
])
def test_every_input_file_not_found_is_shown_resolved(tmp_path, capsys, monkeypatch, command, message):
    monkeypatch.chdir(tmp_path)
    config = panda_config(tmp_path / "robot.yaml")
    panda_bag(tmp_path / "bag", 0.2)
    assert cli_main([str(config) if arg == "CONFIG" else arg for arg in command]) == exits.BAD_INPUT
    assert message.format(tmp=tmp_path) in capsys.readouterr().err


def test_the_baxter_config_still_loads_with_model_order_commands():
    config = load_robot_config(BAXTER_LEFT)
    assert config.controller_joints == () and config.path.is_absolute()
