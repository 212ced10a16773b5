"""``diffsim-ros init`` and the robot config schema: a config from a URDF and a bag, a reference that is current.

Arms this package ships nothing for (a Panda, a UR5 from example-robot-data) and Baxter's
URDF; bags in ros2_control style (test_config_topics.panda_bag) and Baxter style (JointCommand).
"""

import numpy as np
import pytest
import yaml

from diffsim_ros.cli import exits
from diffsim_ros.cli import main as cli_main
from diffsim_ros.io.bags import BagTopics, read_robot_bag, write_bag
from diffsim_ros.io.ros_messages import joint_command_msg, joint_state_msg
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore
from diffsim_ros.model import RobotModelError, load_robot_config
from diffsim_ros.model.config_schema import allowed_keys, config_reference
from oracles import BAXTER_LEFT, BAXTER_URDF, REPO, example_robot_urdf
from test_config_topics import ARM, COMMANDS, EXACT, JOINT_STATES, PANDA_URDF, PERMUTED, T0_NS, panda_bag

UR5_URDF = example_robot_urdf("ur_description/urdf/ur5_robot.urdf")


def init(*argv):
    return cli_main(["init", *map(str, argv)])


# --- the schema -------------------------------------------------------------------------------


def test_the_config_reference_is_generated_from_the_schema():
    """docs/robot_config.md is config_reference(): regenerate it when the schema changes (its first lines say how)."""
    assert (REPO / "docs" / "robot_config.md").read_text() == config_reference()


def test_the_schema_lists_the_topics_the_bag_reader_reads():
    assert allowed_keys("topics") == [key for key in BagTopics.__dataclass_fields__]
    assert BagTopics().joint_states == "/joint_states"


@pytest.mark.parametrize("change, message", [
    ({"robot": {"tip_lnk": "left_hand"}}, r"\[robot\]: unknown key\(s\) \['tip_lnk'\]; allowed: \['name', 'urdf', "),
    ({"topic": {"joint_states": "/x"}}, r"unknown section\(s\) \['topic'\]; sections: \['robot', 'springs', "),
    ({"payload": {"mass_kg": 1.0}}, r"\[payload\]: unknown key\(s\) \['mass_kg'\]"),
    ({"topics": {"joint_state": "/x"}}, r"\[topics\]: unknown key\(s\) \['joint_state'\]"),
])
def test_a_misspelt_key_is_refused_not_ignored(tmp_path, change, message):
    raw = yaml.safe_load(BAXTER_LEFT.read_text())
    raw["robot"]["urdf"] = str(BAXTER_URDF)
    for section, values in change.items():
        raw.setdefault(section, {}).update(values)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(RobotModelError, match=message):
        load_robot_config(path)


# --- init ---------------------------------------------------------------------------------------


def test_init_writes_a_config_that_reads_a_ros2_control_bag_in_the_controllers_order(tmp_path, capsys):
    (tmp_path / "urdf").mkdir()
    urdf = tmp_path / "urdf" / "panda.urdf"
    urdf.write_text(PANDA_URDF.read_text())
    bag = panda_bag(tmp_path / "bag", 0.4, controller_joints=PERMUTED)
    controllers = tmp_path / "controllers.yaml"
    controllers.write_text(yaml.safe_dump({
        "controller_manager": {"ros__parameters": {"update_rate": 1000, "effort_controller": {
            "type": "effort_controllers/JointGroupEffortController"}}},
        "effort_controller": {"ros__parameters": {"joints": PERMUTED}},
        "joint_state_broadcaster": {"ros__parameters": {}}}))
    out = tmp_path / "robot.yaml"
    assert init("--urdf", urdf, "--bag", bag, "--controllers", controllers, "--out", out) == exits.OK
    printed = capsys.readouterr().out
    assert "assumed: base_link panda_link0: the URDF's root link" in printed
    assert "assumed: tip_link panda_hand: the chain forks there into 2 single joints" in printed
    assert f"assumed: controller_joints from {controllers}" in printed
    assert f"topics: joint states {JOINT_STATES} (about 250 Hz), commands {COMMANDS} (std_msgs/msg/Float64MultiArray)" in printed
    raw = yaml.safe_load(out.read_text())
    assert raw["robot"]["urdf"] == "urdf/panda.urdf" and raw["robot"]["joints"] == ARM
    assert raw["robot"]["controller_joints"] == PERMUTED
    assert raw["topics"] == {"joint_states": JOINT_STATES, "commanded_torques": COMMANDS}
    assert "# " in out.read_text()  # commented
    data = read_robot_bag(bag, load_robot_config(out))
    assert np.abs(data.commanded_torques.torques - data.joint_states.efforts).max() == EXACT


def test_init_refuses_float64_commands_without_their_order(tmp_path, capsys):
    bag = panda_bag(tmp_path / "bag", 0.2)
    assert init("--urdf", PANDA_URDF, "--bag", bag, "--out", tmp_path / "robot.yaml") == exits.BAD_INPUT
    assert ("the commands on /effort_controller/commands are std_msgs/msg/Float64MultiArray, which name no joints: "
            "give their order with --controller-joints") in capsys.readouterr().err
    assert init("--urdf", PANDA_URDF, "--bag", bag, "--out", tmp_path / "robot.yaml", "--controller-joints",
                ",".join(ARM[:6])) == exits.BAD_INPUT
    assert "--controller-joints ['panda_joint1'" in (err := capsys.readouterr().err) and "missing ['panda_joint7']" in err
    assert not (tmp_path / "robot.yaml").exists()


def test_init_without_a_bag_proposes_the_chain_of_a_ur5(tmp_path, capsys):
    out = tmp_path / "ur5.yaml"
    assert init("--urdf", UR5_URDF, "--out", out, "--controller-joints",
                "wrist_3_joint,wrist_2_joint,wrist_1_joint,elbow_joint,shoulder_lift_joint,shoulder_pan_joint") == exits.OK
    assert "assumed: tip_link wrist_3_link: the end of the chain of movable joints below world" in capsys.readouterr().out
    config = load_robot_config(out)
    assert config.build_model().joint_names == ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint",
                                                "wrist_1_joint", "wrist_2_joint", "wrist_3_joint")
    assert config.controller_joints[0] == "wrist_3_joint" and config.urdf == UR5_URDF
    assert yaml.safe_load(out.read_text())["topics"] == {"joint_states": "/joint_states"}


def test_an_ambiguous_chain_lists_the_candidates(tmp_path, capsys):
    assert init("--urdf", BAXTER_URDF, "--out", tmp_path / "robot.yaml") == exits.BAD_INPUT
    err = capsys.readouterr().err
    assert "the URDF's chain from base is ambiguous: it forks at torso into 3 branches with movable joints" in err
    assert "left_wrist (7 movable joints)" in err and "right_wrist (7 movable joints)" in err and "head (1" in err
    assert init("--urdf", BAXTER_URDF, "--tip", "left_hnd", "--out", tmp_path / "robot.yaml") == exits.BAD_INPUT
    assert "--tip left_hnd: no such link in" in capsys.readouterr().err
    assert not (tmp_path / "robot.yaml").exists()


def test_init_takes_a_joint_commands_names_from_the_bag(tmp_path, capsys):
    """Baxter style: JointCommand names its joints, so no controller order is needed."""
    config = load_robot_config(BAXTER_LEFT)
    factory = TypestoreMessages(default_typestore())
    joints = list(config.joints)
    messages = []
    for i in range(50):
        stamp = T0_NS + i * 10**7
        messages.append(("/robot/joint_states", joint_state_msg(factory, stamp, ["head_pan"] + joints,
                                                                np.r_[0.0, np.full(7, 0.1)], efforts=np.zeros(8)), stamp))
        messages.append(("/robot/limb/left/joint_command", joint_command_msg(factory, joints[::-1], np.arange(7.0)),
                         stamp + 1))
    bag = write_bag(tmp_path / "bag", messages)
    out = tmp_path / "baxter.yaml"
    assert init("--urdf", BAXTER_URDF, "--base", "base", "--tip", "left_hand", "--bag", bag, "--out", out) == exits.OK
    raw = yaml.safe_load(out.read_text())
    assert "controller_joints" not in raw["robot"]
    assert raw["topics"] == {"joint_states": "/robot/joint_states", "commanded_torques": "/robot/limb/left/joint_command"}
    data = read_robot_bag(bag, load_robot_config(out))
    assert data.commanded_torques.torques[0].tolist() == list(np.arange(7.0)[::-1])
    assert init("--urdf", BAXTER_URDF, "--base", "base", "--tip", "left_hand", "--bag", bag, "--out", out) == \
        exits.BAD_INPUT
    assert "exists; use --force" in capsys.readouterr().err


# --- the whole way: a new arm, as a lab has it ----------------------------------------------


PAYLOAD_TOL = 0.01  # relative; the fit reads 1.0 kg to 1e-4 on this 250 Hz recording of an independent MuJoCo arm
COM_TOL = 2e-3  # [m]


def mujoco_panda_bag(path, config, payload_mass, payload_com, controller_joints):
    """An independent MuJoCo Panda with a hidden payload, recorded as ros2_control records it:
    /joint_states of a joint_state_broadcaster (every joint, alphabetical, fingers at 0, 250 Hz)
    and the effort controller's Float64MultiArray commands in ``controller_joints``' order."""
    from diffsim_ros.io.ros_messages import float64_multi_array_msg, seconds_to_ns
    from diffsim_ros.model.poses import random_poses
    from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth
    from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record
    from test_config_topics import FINGERS

    model = config.build_model()
    plant = MujocoPlant(model, config.urdf, PlantTruth(payload_mass=payload_mass, payload_com=payload_com), seed=1)
    poses = nearest_neighbour_order(random_poses(model, 4, np.random.default_rng(0)))
    rec = record(plant, model, RecordingScenario(poses=poses, excitation=6.0, joint_rate=250.0,
                                                 excitation_amplitude=(3, 6, 3, 3, 1, 1, 0.5), seed=0))
    factory, names = TypestoreMessages(default_typestore()), sorted(ARM + FINGERS)
    order, messages = [ARM.index(name) for name in controller_joints], []
    for i, t in enumerate(rec.joint_time):
        ns = seconds_to_ns(1.7e9 + float(t))
        values = [{**dict(zip(ARM, column[i])), **dict.fromkeys(FINGERS, 0.0)} for column in (rec.q, rec.qd, rec.effort)]
        messages.append((JOINT_STATES, joint_state_msg(factory, ns, names, *([v[n] for n in names] for v in values)),
                         ns + 10**5))
    for t, command in zip(rec.command_time, rec.command):
        ns = seconds_to_ns(1.7e9 + float(t))
        messages.append((COMMANDS, float64_multi_array_msg(factory, command[order]), ns + 2 * 10**5))
    return write_bag(path, sorted(messages, key=lambda m: m[2]), storage="mcap")


def test_a_new_arm_from_its_urdf_and_bag_to_a_calibrated_payload(tmp_path, capsys):
    """init from the URDF, the bag and the controllers YAML, then calibrate: the hidden payload."""
    from test_config_topics import panda_config

    bag = mujoco_panda_bag(tmp_path / "bag", load_robot_config(panda_config(tmp_path / "nominal.yaml")), 1.0,
                           (0.0, 0.0, 0.05), PERMUTED)
    controllers = tmp_path / "controllers.yaml"
    controllers.write_text(yaml.safe_dump({"effort_controller": {"ros__parameters": {"joints": PERMUTED}}}))
    config = tmp_path / "robot.yaml"
    assert init("--urdf", PANDA_URDF, "--tip", "panda_link8", "--bag", bag, "--controllers", controllers,
                "--out", config) == exits.OK
    out = tmp_path / "out"
    assert cli_main(["calibrate", "--bag", str(bag), "--config", str(config), "--out", str(out), "--estimate",
                     "payload"]) == exits.OK
    assert "at 250 Hz (commanded torques)" in capsys.readouterr().out
    values = yaml.safe_load((out / "calibration.yaml").read_text())["parameters"]
    assert abs(values["payload.mass"] - 1.0) < PAYLOAD_TOL
    assert np.abs(np.array(values["payload.com"]) - [0.0, 0.0, 0.05]).max() < COM_TOL
