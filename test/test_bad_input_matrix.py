"""Bad input and faults, case by case (issue 16): every case with its expected behaviour.

Each row is a case tried "as a new user with a bad day would", or a sibling of one; the
parametrized tests below use the case names as their ids (``pytest -k <case>``). Cases marked
*lead* live in the calibrate command and identification (``cli/calibrate.py``,
``estimation/``, ``io/bags.py``, ``estimation/preparation.py``) and are tested with them.

Unsafe on a real arm
====================

============================  =====================================================================
case                          expected behaviour
============================  =====================================================================
stamp_100s_in_the_future      one joint state stamped +100 s is dropped and logged ("stamped +100 s
                              away from the stream's time base"); controller and estimator accept
                              the next sample (``test_node_inputs_recover_from_a_future_stamp``)
clock_jumps_back_5s           ``/clock`` jumping back 5 s: both nodes reset their order checks at
                              once and log it; the controller keeps commanding; the controller's
                              safety layer counts the jump as no time elapsed
                              (``test_nodes_recover_from_clock_jumps``)
sender_clock_jumps            the robot's stamps jump (-5 s or +100 s) against the receive time: two
                              samples dropped, the third adopts the new clock (test_runtime_inputs)
baxter_emulator_clock_jump    the emulated Baxter's 0.2 s command timeout runs on elapsed time: a
                              clock jumping back does not keep it in torque mode
clock_jumps_forward           the rate limit credits at most 0.1 s (no torque step); Baxter re-engages
                              from the holding torque (test_control_safety)
reference_clock_jump          references run on a jump-free clock: a jump does not skip back to an
                              old waypoint or ahead to the last one
limit_zone_large_command      at 0.01 rad from s0's upper limit, +1000 N·m goes out as 0.5 N·m
                              (clipped 50 x fade 0.1 - spring 4.5), never full effort into the limit
rate_limit_vs_limit_zone      a joint reaching its limit while the command pushes into it: the push
                              is cut at once (the only change faster than the rate limit)
estimate_payload_-50kg        rejected (outside [0, 25] kg), model kept, logged
estimate_payload_1e6kg        rejected, model kept, logged
estimate_stiffness_-1e6       rejected (stiffness must be > 0), model kept, logged
estimate_damping_-100         rejected (damping must be >= 0), model kept, logged
estimate_nan                  rejected (not finite), model kept, logged
estimate_other_robot          names of another robot's joints are ignored and named in the log
waypoints_100rad              start-up error naming every waypoint outside the joint limits
start_beyond_limit            the hold set-point at start is clipped into the joint limits
camera_pose_1e300m            dropped as outside the workspace (default: the 50 m camera plausibility
                              bound; robot config ``camera.workspace``), logged
joint_state_absurd            positions > 0.25 rad past a limit or speeds > 4x the velocity limit are
                              sensor faults: dropped by the nodes' inputs, refused by the safety layer
effort_controller_stop        stale states ramp a ros2_control effort controller to the hold (the
                              model's holding torque: the arm stays, test_safe_hold) at the rate
                              limit (no torque step); Baxter: nothing is published
============================  =====================================================================

Silent wrong results
====================

============================  =====================================================================
nan_samples_nodes             NaN/inf joint states are dropped *with* a log line (first at once, then
                              a count every 5 s) — bags: *lead*
estimate_bogus_groups         ``--estimate bogus`` / ``,`` / ``payload,bogus``: *lead*
config_spring_-8000           robot config refused: spring stiffness must be > 0
config_payload_-2kg           robot config refused: payload mass must be >= 0
config_gravity_nan            robot config refused: gravity must be finite (never reaches
                              identification as "not identifiable")
config_string_number          robot config refused, the key named ("'mass' must be a finite number")
config_structure              springs/payload not mappings, unknown keys, wrong lengths, bad
                              ``plausibility`` section: named errors
calibration_negative_stiffness   refused by ``torque-map build`` (exit 2) and the controller node
calibration_negative_payload  refused by ``torque-map build`` (exit 2) and the controller node
calibration_other_robot       a calibration made for another robot is refused by name
pinned_bound_stddev_0         *lead*
damping_1e-20_2s              *lead*
============================  =====================================================================

Confusing or raw
================

============================  =====================================================================
order_policy_hint             *lead*
out_unwritable                refused before any work, exit 2, one line naming the directory
out_parent_is_a_file          refused before any work, exit 2
force_over_a_file             ``--force`` does not replace a regular file with a directory: exit 2
force_leaves_no_old           a forced replace leaves no hidden ``.old-*`` behind
ctrl_c                        every subcommand: exit 130, one line on stderr, no traceback, nothing
                              half-written
ctrl_c_swallowed              a Ctrl-C that a library catches and drops: every atomic writer refuses
                              to create or to commit anything after it; the command exits 130
torque_map_missing_dir        ``torque-map build`` into a missing directory creates it; a parent
                              that is a file or unwritable fails before the build
torque_map_arguments          --dt 0, --angle-points 1, --contexts 0, --threads 0, --substeps 0,
                              show --calibration without --config: exit 2 before any work
calibration_string_number     named error ("parameters.payload.mass must be a number ...") exit 2
calibration_structure         bad robot/groups/stddev entries: named errors
torque_map_corrupt            unknown grid keys, non-numbers, absurd torques, non-positive inertias:
                              named TorqueMapError, exit 2
sigkill_leftovers             hidden temp directories/files of a killed writer are removed by the
                              next write to the same path; a previous version moved aside is restored
unexpected_error              one line, exit 1 (``DIFFSIM_ROS_TRACEBACK=1`` for the traceback)
estimator_output_path         an estimator that saves on shutdown refuses an unwritable
                              ``calibration_output`` at start-up, not after hours of estimation
wrong_arm_bag                 *lead*
============================  =====================================================================
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from diffsim_ros.cli import main as cli_main
from diffsim_ros.control import (
    ControlError,
    ControlLoop,
    GravityCompensation,
    SafetyConfig,
    SafetyLayer,
    check_within_limits,
)
from diffsim_ros.control.loop import ReferenceClock
from diffsim_ros.control.torque_map import TorqueMap, TorqueMapError
from diffsim_ros.io.bags import BagWriter
from diffsim_ros.io.calibration import CalibrationError, apply_calibration, load_calibration
from diffsim_ros.io.ros_messages import NS_PER_S, clock_msg
from diffsim_ros.io.ros_types import CLOCK, TypestoreMessages, default_typestore
from diffsim_ros.model import RobotModelError, load_robot_config
from diffsim_ros.nodes.controller_node import ControllerNode
from diffsim_ros.nodes.estimator_node import EstimatorNode
from diffsim_ros.nodes.sim_robot_node import SimRobotNode
from diffsim_ros.outputs import OutputPathError, atomic_directory, check_output_path, atomic_file, clean_stale_siblings, record_interrupts
from diffsim_ros.runtime.embedded import DEFAULT_START_NS, EmbeddedRuntime
from diffsim_ros.runtime.qos import CLOCK_QOS
from diffsim_ros.testbed.hardware import POSITION, TORQUE, BaxterLimbEmulator
from ctrl_c import python_sigint_handler, swallow_a_ctrl_c, terminal_sigint
from oracles import BAXTER_LEFT, REPO
from test_nodes_faults import PARAMS, CommandMonitor, logs

CONFIG = yaml.safe_load(BAXTER_LEFT.read_text())
SMALL_MAP = ["--angle-points", "3", "--velocity-points", "3", "--contexts", "1", "--validate", "0",
             "--simulator", "rigid"]


@pytest.fixture(scope="module")
def model():
    return load_robot_config(BAXTER_LEFT).build_model()


def write_config(tmp_path, edit):
    """A copy of the Baxter config (URDF path made absolute) changed by ``edit(raw)``."""
    raw = yaml.safe_load(BAXTER_LEFT.read_text())
    raw["robot"]["urdf"] = str(REPO / "urdf" / "baxter.urdf")
    edit(raw)
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def write_calibration_file(tmp_path, parameters, **extra):
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump({"robot": "baxter_left", "parameters": parameters, **extra}))
    return path


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


# --- unsafe on a real arm: time jumps in the node graph ------------------------------------------


def jumping_clock(runtime, at_s, jump_s):
    """Publish ``/clock`` every 1 ms: the runtime time, shifted by ``jump_s`` from ``at_s`` on."""
    node = runtime.create_node("jumping_clock")
    publisher = node.create_publisher(CLOCK, "/clock", CLOCK_QOS)

    def tick():
        now = runtime.now_ns()
        shift = int(jump_s * NS_PER_S) if now - DEFAULT_START_NS >= at_s * NS_PER_S else 0
        publisher.publish(clock_msg(runtime.messages, now + shift))

    node.create_timer(0.001, tick)


def sim_graph(runtime, sim_time=False):
    overrides = {"use_sim_time": True} if sim_time else {}
    sim = runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides=overrides)
    controller = runtime.add_node(ControllerNode, "controller", parameter_overrides={**overrides, "follow_estimates": False})
    estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={**overrides, "save_on_shutdown": False})
    monitor = CommandMonitor(runtime.create_node("monitor", parameter_overrides=overrides), "baxter")
    return sim, controller, estimator, monitor


@pytest.mark.parametrize("jump_s", [-5.0, 100.0], ids=["clock_jumps_back_5s", "clock_jumps_forward_100s"])
def test_nodes_recover_from_clock_jumps(jump_s):
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        jumping_clock(runtime, 1.0, jump_s)
        sim, controller, estimator, monitor = sim_graph(runtime, sim_time=True)
        runtime.spin_for(1.0)
        before = len(monitor.commands), controller.joints.counters.accepted, estimator.joints.counters.accepted
        runtime.spin_for(1.0)
    commands = len(monitor.commands) - before[0]
    assert commands > 180  # ~200 Hz on after the jump: no lock-out
    assert controller.joints.counters.accepted - before[1] > 95 and estimator.joints.counters.accepted - before[2] > 95
    assert not monitor.unsafe and sim.hardware.mode == TORQUE and controller.status.active
    warnings = logs(runtime, "warning")
    if jump_s < 0:
        assert sum("/robot/joint_states: node clock jumped back 4.9" in m for m in warnings) == 2  # both nodes
        assert "clock jumped backwards: counted as no time elapsed, commanding on" in warnings
    assert controller.loop.reference_time.jumps == 1  # the reference did not jump with the clock


def test_node_inputs_recover_from_a_future_stamp():
    def future(msg, now_ns):
        if abs(now_ns - DEFAULT_START_NS - 0.5 * NS_PER_S) < 5_000_000:
            msg.header.stamp.sec += 100
        return [(0.0, msg)]

    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller, estimator, monitor = sim_graph(runtime)
        runtime.inject_fault("/robot/joint_states", future)
        runtime.spin_for(1.0)
    for node in (controller, estimator):
        c = node.joints.counters
        assert c.dropped_time_jump == 1 and c.accepted == c.received - 1 and c.time_jumps == 0
    assert sim.hardware.fallbacks == 0 and not monitor.unsafe and monitor.times().max() > 0.99
    assert sum("dropped a sample stamped +100 s away from the stream's time base" in m
               for m in logs(runtime, "warning")) == 2


def test_baxter_emulator_clock_jump(model):
    q = np.zeros(7)
    limb = BaxterLimbEmulator(model, q)
    limb.command(10.0, np.ones(7))
    assert limb.torques(10.1, q, q) is not None and limb.mode == TORQUE
    limb.torques(5.1, q, q)  # /clock jumped back 5 s: no time elapsed
    limb.torques(5.19, q, q)
    assert limb.mode == TORQUE  # 0.19 s since the command
    limb.torques(5.25, q, q)
    assert limb.mode == POSITION and limb.fallbacks == 1  # 0.25 s of elapsed time without a command


def test_reference_clock_jump():
    clock = ReferenceClock(max_step=0.5)
    assert [clock(t) for t in (10.0, 10.01, 5.0, 5.01, 105.01, 105.02)] == pytest.approx(
        [10.0, 10.01, 10.01, 10.02, 10.02, 10.03])
    assert clock.jumps == 2 and clock(105.02) == pytest.approx(10.03)


# --- unsafe on a real arm: estimates, references, poses -------------------------------------------


ESTIMATE_CASES = {
    "estimate_payload_-50kg": ({"payload.mass": -50.0}, "payload.mass: -50 kg is outside [>= 0, <= 25]"),
    "estimate_payload_1e6kg": ({"payload.mass": 1e6}, "payload.mass: 1e+06 kg is outside"),
    "estimate_stiffness_-1e6": ({"left_s1.spring.stiffness": -1e6}, "left_s1.spring.stiffness: -1e+06 N/m or N·m/rad is outside [> 0"),
    "estimate_damping_-100": ({"left_e1.damping": -100.0}, "left_e1.damping: -100 N·m·s/rad is outside [>= 0"),
    "estimate_nan": ({"payload.mass": float("nan")}, "payload.mass: not finite"),
    "estimate_mixed": ({"payload.mass": 0.5, "left_e1.damping": -100.0}, "left_e1.damping"),
}


@pytest.mark.parametrize("values, reason", ESTIMATE_CASES.values(), ids=ESTIMATE_CASES.keys())
def test_implausible_estimates_are_rejected_and_the_model_kept(model, values, reason):
    loop = ControlLoop(GravityCompensation(model), SafetyLayer(model), model)
    decision = loop.apply_estimates(values)
    assert not decision.applied and loop.model is model and loop.model_updates == 0
    assert decision.message.startswith("estimates not applied (implausible, model kept): ") and reason in decision.message


def test_estimate_other_robot(model):
    loop = ControlLoop(GravityCompensation(model), SafetyLayer(model), model)
    decision = loop.apply_estimates({"payload.mass": 0.7, "right_s1.spring.stiffness": 9000.0, "camera.pose": [0] * 7})
    assert decision.applied and decision.ignored == ("right_s1.spring.stiffness",)
    assert "ignored ['right_s1.spring.stiffness']: not parameters of this model" in decision.message
    assert loop.model.get_parameter("payload.mass").item() == 0.7
    decision = loop.apply_estimates({"right_s1.spring.stiffness": 9000.0})
    assert not decision.applied and "no parameter of this model" in decision.message


def test_estimates_in_the_node_graph_are_gated():
    from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY
    from diffsim_ros.nodes.messages import estimates_msg
    from diffsim_ros.runtime import LATCHED_QOS

    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim = runtime.add_node(SimRobotNode, "sim_robot")
        controller = runtime.add_node(ControllerNode, "controller", parameter_overrides={"follow_estimates": True})
        monitor = CommandMonitor(runtime.create_node("monitor"), "baxter")
        node = runtime.create_node("fake_estimator")
        publisher = node.create_publisher(FLOAT64_MULTI_ARRAY, "/estimator/estimates", LATCHED_QOS)
        for values in ({"payload.mass": -50.0}, {"payload.mass": 1e6}, {"left_s1.spring.stiffness": -1e6},
                       {"left_e1.damping": -100.0}):
            publisher.publish(estimates_msg(node.messages, values))
            runtime.spin_for(0.2)
    errors = [m for m in logs(runtime, "error") if m.startswith("estimates not applied (implausible, model kept)")]
    assert len(errors) == 4 and controller.model_updates == 0
    assert not monitor.unsafe and not any(np.any(np.abs(c) >= np.array([50, 100, 50, 50, 15, 15, 15]))
                                          for _, c in monitor.commands)  # never saturated
    assert sim.hardware.mode == TORQUE


@pytest.mark.parametrize("waypoints, match", [
    ([100.0] * 7, r"#0 left_s0 = 100 rad outside \[-1.70\d+, 1.70\d+\]"),
    ([0.0] * 7 + [0.0, 0.0, 0.0, -100.0, 0.0, 0.0, 0.0], r"#1 left_e1 = -100 rad outside"),
], ids=["waypoints_100rad", "waypoints_second_row"])
def test_waypoints_outside_the_joint_limits_are_refused_at_start_up(waypoints, match):
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        with pytest.raises(ControlError, match=match):
            runtime.add_node(ControllerNode, "controller", parameter_overrides={"reference.waypoints": waypoints})


def test_check_within_limits_names_every_target(model):
    targets = np.zeros((2, 7))
    targets[0, 0], targets[1, 3], targets[1, 4] = 9.0, -1.0, np.nan
    with pytest.raises(ControlError, match=r"#0 left_s0 = 9 rad .*; #1 left_e1 = -1 rad .*; #1 left_w0 = nan rad"):
        check_within_limits(targets, model)
    assert check_within_limits(np.zeros(7), model).shape == (1, 7)


def test_start_beyond_limit():
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        start = [0.0, -0.55, 0.0, -0.1, 0.0, 0.8, 0.0]  # left_e1 0.05 rad below its lower limit
        runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides={"initial_positions": start})
        controller = runtime.add_node(ControllerNode, "controller", parameter_overrides={"follow_estimates": False})
        runtime.spin_for(0.1)
        q_d, _, _ = controller.reference(controller.loop.reference_time(controller.control_time(runtime.now_ns())))
    assert q_d[3] == pytest.approx(-0.05)  # held at the limit, not beyond it


def test_camera_pose_1e300m_is_dropped_by_the_estimator():
    from diffsim_ros.io.ros_messages import pose_stamped_msg
    from diffsim_ros.io.ros_types import POSE_STAMPED
    from diffsim_ros.runtime import SENSOR_QOS

    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={"save_on_shutdown": False})
        node = runtime.create_node("bad_camera")
        publisher = node.create_publisher(POSE_STAMPED, "/camera/left_hand/pose", SENSOR_QOS)
        for k in range(3):
            publisher.publish(pose_stamped_msg(node.messages, runtime.now_ns(), "camera", [1e300, 0.0, 0.0], [1, 0, 0, 0]))
            runtime.spin_for(0.01)
    assert estimator.camera.counters.dropped_invalid == 3 and estimator.camera.latest is None
    assert sum("is outside the workspace" in m for m in logs(runtime, "error")) == 1  # then counted, every 5 s


def test_camera_workspace_from_the_robot_config(tmp_path):
    from diffsim_ros.io.ros_messages import pose_stamped_msg

    config = write_config(tmp_path, lambda raw: raw["camera"].update(workspace={"min": [0, 0, 0], "max": [1, 1, 1]}))
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
            "save_on_shutdown": False, "robot_config": str(config)})
        for position, accepted in (([2.0, 0.5, 0.5], False), ([0.5, 0.5, 0.5], True)):
            msg = pose_stamped_msg(runtime.messages, runtime.now_ns(), "camera", position, [1, 0, 0, 0])
            assert (estimator.camera.update(msg, runtime.now_ns()) is not None) == accepted
        bad = write_config(tmp_path, lambda raw: raw["camera"].update(workspace={"min": [0, 0, 0]}))
        with pytest.raises(ValueError, match="camera.workspace: expected a mapping with 'min' and 'max'"):
            runtime.add_node(EstimatorNode, "estimator2", parameter_overrides={
                "robot_config": str(bad), "groups": ["payload", "camera"], "save_on_shutdown": False})


def test_joint_state_absurd(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control"))
    q = np.zeros(7)
    q[1] = 1e6
    out, status = layer.filter(0.0, np.zeros(7), q, np.zeros(7))
    assert status.reason == "implausible_state" and "left_s1 position 1e+06 rad" in status.detail
    np.testing.assert_array_equal(out, np.zeros(7))  # the hold command, not a full-effort push back


# --- silent wrong results: robot configs and calibration files ------------------------------------


CONFIG_CASES = {
    "config_spring_-8000": (lambda raw: raw["springs"]["left_s1"].update(stiffness=-8000.0),
                            r"\[springs.left_s1\]: implausible stiffness: -8000 N/m or N·m/rad is outside \[> 0"),
    "config_payload_-2kg": (lambda raw: raw["payload"].update(mass=-2.0),
                            r"\[payload\]: implausible values: payload.mass: -2 kg is outside \[>= 0"),
    "config_gravity_nan": (lambda raw: raw["robot"].update(gravity=[0.0, 0.0, float("nan")]),
                           r"\[robot\]: 'gravity' must be a finite number, got nan"),
    "config_gravity_mm": (lambda raw: raw["robot"].update(gravity=[0.0, 0.0, -9810.0]),
                          r"'gravity' \[0.0, 0.0, -9810.0\] is stronger than 100 m/s²"),
    "config_string_number": (lambda raw: raw["payload"].update(mass="heavy"),
                             r"\[payload\]: 'mass' must be a finite number, got 'heavy'"),
    "config_string_spring": (lambda raw: raw["springs"]["left_s1"].update(l1="0.3m"),
                             r"\[springs.left_s1\]: 'l1' must be a finite number, got '0.3m'"),
    "config_payload_com_length": (lambda raw: raw["payload"].update(com=[0.0, 0.0]), r"'com' must have 3 numbers, got 2"),
    "config_payload_com_far": (lambda raw: raw["payload"].update(com=[0.0, 0.0, 3.0]), r"payload COM 3 m from its frame"),
    "config_springs_not_mapping": (lambda raw: raw.update(springs=[1, 2]), r"'springs' must be a mapping"),
    "config_spring_unknown_key": (lambda raw: raw["springs"]["left_s1"].update(k=1.0), r"unknown keys \['k'\]"),
    "config_payload_not_mapping": (lambda raw: raw.update(payload="none"), r"'payload' must be a mapping"),
    "config_bad_plausibility": (lambda raw: raw.update(plausibility={"payload_mass_max": -1}),
                                r"plausibility bound payload_mass_max must be a positive finite number"),
    "config_unknown_plausibility": (lambda raw: raw.update(plausibility={"payload": 1}), r"unknown bounds \['payload'\]"),
    "config_base_link_number": (lambda raw: raw["robot"].update(base_link=3), r"'base_link' must be a string"),
}


@pytest.mark.parametrize("edit, match", CONFIG_CASES.values(), ids=CONFIG_CASES.keys())
def test_robot_config_is_validated_on_load(tmp_path, edit, match):
    with pytest.raises(RobotModelError, match=match):
        load_robot_config(write_config(tmp_path, edit))


def test_config_plausibility_section_widens_the_bounds(tmp_path):
    def heavy(raw):
        raw["payload"]["mass"] = 40.0
        raw["plausibility"] = {"payload_mass_max": 50.0}

    config = load_robot_config(write_config(tmp_path, heavy))
    assert config.bounds.payload_mass_max == 50.0 and config.build_model().get_parameter("payload.mass").item() == 40.0


CALIBRATION_CASES = {
    "calibration_negative_stiffness": ({"left_s1.spring.stiffness": -8000.0}, "left_s1.spring.stiffness: -8000 N/m"),
    "calibration_negative_payload": ({"payload.mass": -2.0}, "payload.mass: -2 kg is outside"),
    "calibration_bad_camera_pose": ({"camera.pose": [0, 0, 1, 0, 0, 0, 2]}, "camera.pose: quaternion norm 2"),
}


@pytest.mark.parametrize("parameters, reason", CALIBRATION_CASES.values(), ids=CALIBRATION_CASES.keys())
def test_implausible_calibrations_are_refused_by_torque_map_build_and_the_controller(tmp_path, capsys, parameters, reason):
    path = write_calibration_file(tmp_path, parameters)
    out = tmp_path / "map.npz"
    code = cli_main(["torque-map", "build", "--config", str(BAXTER_LEFT), "--calibration", str(path), "--out", str(out)]
                    + SMALL_MAP)
    assert code == 2 and not out.exists()
    err = one_line_error(capsys)
    assert "calibration for 'baxter_left' has implausible values" in err and reason in err
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        with pytest.raises(CalibrationError, match="implausible values"):
            runtime.add_node(ControllerNode, "controller", parameter_overrides={"calibration_file": str(path)})


def test_calibration_other_robot(tmp_path, model):
    path = tmp_path / "right.yaml"
    path.write_text(yaml.safe_dump({"robot": "baxter_right", "parameters": {"payload.mass": 0.5}}))
    with pytest.raises(CalibrationError, match="calibration was made for robot 'baxter_right', not 'baxter_left'"):
        apply_calibration(model, load_calibration(path), robot="baxter_left")
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        with pytest.raises(CalibrationError, match="made for robot 'baxter_right'"):
            runtime.add_node(ControllerNode, "controller", parameter_overrides={"calibration_file": str(path)})


CALIBRATION_FILE_CASES = {
    "calibration_string_number": ({"robot": "baxter_left", "parameters": {"payload.mass": "1.2 kg"}},
                                  r"parameters.payload.mass must be a number or a list of numbers, got '1.2 kg'"),
    "calibration_list_of_strings": ({"robot": "baxter_left", "parameters": {"payload.com": [0, "x", 0]}},
                                    r"parameters.payload.com must be a number or a list of numbers"),
    "calibration_inf": ({"robot": "baxter_left", "parameters": {"payload.mass": float("inf")}},
                        r"parameters.payload.mass must be finite"),
    "calibration_negative_stddev": ({"robot": "baxter_left", "parameters": {"payload.mass": 1.0},
                                     "stddev": {"payload.mass": -0.1}}, r"a standard deviation must be >= 0"),
    "calibration_robot_missing": ({"parameters": {"payload.mass": 1.0}}, r"expected 'robot' and a 'parameters' mapping"),
    "calibration_robot_not_string": ({"robot": ["a"], "parameters": {}}, r"'robot' must be the robot config's name"),
    "calibration_groups_not_list": ({"robot": "baxter_left", "parameters": {}, "groups": "payload"},
                                    r"'groups' must be a list"),
    "calibration_parameters_list": ({"robot": "baxter_left", "parameters": [1, 2]}, r"'parameters' mapping"),
    "calibration_camera_flat": ({"camera": {"pose": [0, 0, 1, 0, 0, 0, 1]}},
                                r"expected a 'parameters' mapping, e.g. 'parameters: \{camera.pose: \[x, y, z, qx, qy, qz, qw\]\}'"),
}


@pytest.mark.parametrize("raw, match", CALIBRATION_FILE_CASES.values(), ids=CALIBRATION_FILE_CASES.keys())
def test_calibration_files_are_validated_on_load(tmp_path, capsys, raw, match):
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(CalibrationError, match=match):
        load_calibration(path)
    code = cli_main(["torque-map", "build", "--config", str(BAXTER_LEFT), "--calibration", str(path),
                     "--out", str(tmp_path / "m.npz")] + SMALL_MAP)
    assert code == 2 and "Traceback" not in one_line_error(capsys)


def test_calibration_binary_file(tmp_path):
    path = tmp_path / "calibration.yaml"
    path.write_bytes(b"\xff\xfe\x00\x01binary")
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(path)


# --- confusing or raw: output paths ---------------------------------------------------------------


def unwritable_directory(tmp_path):
    """A directory this process cannot write into (root ignores permissions: use /sys)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        (locked / "probe").write_text("x")
    except OSError:
        return locked
    (locked / "probe").unlink()
    sysfs = type(tmp_path)("/sys/kernel")
    try:
        (sysfs / ".diffsim_probe").write_text("x")
    except OSError:
        return sysfs
    pytest.skip("no unwritable directory available (root on a writable /sys)")


def test_out_unwritable(tmp_path, capsys):
    target = unwritable_directory(tmp_path) / "out"
    with pytest.raises(OutputPathError, match=f"cannot write output directory {target}: .* is not writable"):
        atomic_directory(target)
    started = time.perf_counter()
    code = cli_main(["calibrate", "--bag", str(tmp_path / "no_bag"), "--config", str(BAXTER_LEFT), "--out", str(target)])
    assert code == 2 and "is not writable" in one_line_error(capsys)  # before the bag is even looked at
    code = cli_main(["torque-map", "build", "--config", str(BAXTER_LEFT), "--out", str(target / "map.npz")] + SMALL_MAP)
    assert code == 2 and "is not writable" in one_line_error(capsys)
    assert time.perf_counter() - started < 60  # no build ran (it takes minutes at these settings without the check)


def test_out_parent_is_a_file(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    target = tmp_path / "file" / "sub" / "out"
    with pytest.raises(OutputPathError, match=r"cannot create output directory .*: .*file is not a directory"):
        atomic_directory(target)
    code = cli_main(["torque-map", "build", "--config", str(BAXTER_LEFT), "--out", str(target / "map.npz")] + SMALL_MAP)
    assert code == 2 and "is not a directory" in one_line_error(capsys)
    code = cli_main(["demo", "--out", str(target)])
    assert code == 2 and "is not a directory" in one_line_error(capsys)


def test_force_over_a_file(tmp_path, capsys):
    target = tmp_path / "out"
    target.write_text("precious")
    with pytest.raises(OutputPathError, match="exists and is not a directory; refusing to replace a file"):
        atomic_directory(target, force=True)
    code = cli_main(["calibrate", "--bag", str(tmp_path / "no_bag"), "--config", str(BAXTER_LEFT), "--out", str(target),
                     "--force"])
    assert code == 2 and "refusing to replace a file" in one_line_error(capsys)
    assert target.read_text() == "precious"


@pytest.mark.parametrize("out", [".", "a/..", "/"])
def test_out_without_a_name_is_refused_before_any_work(tmp_path, capsys, monkeypatch, out):
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputPathError, match="names no directory of its own"):
        check_output_path(out, force=True, kind="directory")
    code = cli_main(["calibrate", "--bag", str(tmp_path / "no_bag"), "--config", str(BAXTER_LEFT), "--out", out, "--force"])
    assert code == 2 and "names no directory of its own" in one_line_error(capsys)  # before the bag is looked at
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_force_leaves_no_old(tmp_path):
    target = tmp_path / "out"
    for content in ("first", "second"):
        with atomic_directory(target, force=True) as tmp:
            (tmp / "result.txt").write_text(content)
    assert (target / "result.txt").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no hidden .old-* or .tmp-*


def test_missing_parents_are_created(tmp_path):
    target = tmp_path / "a" / "b" / "out"
    with atomic_directory(target) as tmp:
        (tmp / "x").write_text("1")
    with atomic_file(tmp_path / "c" / "d" / "f.txt") as handle:
        handle.write("2")
    assert (target / "x").read_text() == "1" and (tmp_path / "c" / "d" / "f.txt").read_text() == "2"


KILLED_WRITER = """
import os, sys, time
from diffsim_ros.outputs import atomic_directory, atomic_file
target = sys.argv[1]
with atomic_directory(target, force=True) as tmp:
    (tmp / "partial.txt").write_text("half")
    with atomic_file(target + ".yaml") as handle:
        handle.write("half")
        print("writing", flush=True)
        time.sleep(60)
"""


def test_sigkill_leftovers(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(target) as tmp:
        (tmp / "result.txt").write_text("old")
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert len(leftovers) == 2 and all(".tmp-" in name for name in leftovers)  # what a SIGKILL leaves
    with atomic_directory(target, force=True) as tmp:
        (tmp / "result.txt").write_text("new")
    with atomic_file(tmp_path / "out.yaml") as handle:
        handle.write("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.yaml"]
    assert (target / "result.txt").read_text() == "new"


def test_previous_version_moved_aside_by_a_killed_writer_is_restored(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    from diffsim_ros.outputs import _HOST

    aside = tmp_path / f".out.old-{dead.pid}@{_HOST}.abcd1234"
    aside.mkdir()
    (aside / "result.txt").write_text("previous")
    assert clean_stale_siblings(tmp_path / "out") == [aside]
    assert (tmp_path / "out" / "result.txt").read_text() == "previous"


def _file_writer(target, during):
    with atomic_file(target) as handle:
        handle.write("new")
        during()


def _directory_writer(target, during):
    with atomic_directory(target, force=True) as tmp:
        (tmp / "result.txt").write_text("new")
        during()


def _bag_writer(target, during):
    with BagWriter(target, overwrite=True) as writer:
        writer.write("/clock", clock_msg(TypestoreMessages(default_typestore()), NS_PER_S), NS_PER_S)
        during()


ATOMIC_WRITERS = {"atomic_file": _file_writer, "atomic_directory": _directory_writer, "bag_writer": _bag_writer}


def _tree(root):
    """Every path under ``root`` (hidden ones too) with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("write", ATOMIC_WRITERS.values(), ids=ATOMIC_WRITERS.keys())
def test_a_swallowed_ctrl_c_stops_every_atomic_writer(tmp_path, write):
    target = tmp_path / "out"
    write(target, lambda: None)  # the previous version
    before = _tree(tmp_path)
    with python_sigint_handler(), record_interrupts():
        with pytest.raises(KeyboardInterrupt):
            write(target, swallow_a_ctrl_c)  # a Ctrl-C while writing, which a library drops
        with pytest.raises(KeyboardInterrupt):
            write(tmp_path / "later" / "out", lambda: None)  # any write after it
    assert _tree(tmp_path) == before  # the previous version; no temporary file, not even a parent directory
    write(tmp_path / "next", lambda: None)  # the record ends with the command
    assert (tmp_path / "next").exists()


# --- confusing or raw: the command line -----------------------------------------------------------


CTRL_C_CASES = {
    "ctrl_c_calibrate": (["calibrate", "--bag", "BAG", "--config", str(BAXTER_LEFT), "--out", "OUT"],
                         "diffsim_ros.pipelines.calibration.calibrate_bag"),
    "ctrl_c_torque_map_build": (["torque-map", "build", "--config", str(BAXTER_LEFT), "--out", "OUT/map.npz"] + SMALL_MAP,
                                "diffsim_ros.cli.torque_map.build_torque_map"),
    "ctrl_c_torque_map_show": (["torque-map", "show", "MAP"], "diffsim_ros.cli.torque_map.TorqueMap.load"),
    "ctrl_c_demo": (["demo", "--out", "OUT"], "diffsim_ros.pipelines.demo.EmbeddedRuntime"),
    "ctrl_c_while_parsing": (["torque-map", "show", "MAP"], "diffsim_ros.cli.build_parser"),
}


@pytest.mark.parametrize("argv, where", CTRL_C_CASES.values(), ids=CTRL_C_CASES.keys())
def test_ctrl_c(tmp_path, capsys, monkeypatch, argv, where):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    module, name = where.rsplit(".", 1)
    if module.endswith("TorqueMap"):
        monkeypatch.setattr(TorqueMap, "load", classmethod(lambda cls, *a, **k: interrupted()))
    else:
        monkeypatch.setattr(f"{module}.{name}", interrupted)
    out = tmp_path / "out"
    argv = [a.replace("OUT", str(out)).replace("BAG", str(tmp_path / "bag")).replace("MAP", str(tmp_path / "m.npz"))
            for a in argv]
    assert cli_main(argv) == 130
    assert one_line_error(capsys) == "diffsim-ros: interrupted (Ctrl-C); no partial outputs were written\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written, no hidden temp directory


def test_a_ctrl_c_that_a_library_swallows_still_stops_the_write(tmp_path, capsys, monkeypatch):
    from diffsim_ros.cli import torque_map as torque_map_cli

    def build_swallowing_a_ctrl_c(*args, **kwargs):
        swallow_a_ctrl_c()
        return build_torque_map(*args, **kwargs)

    build_torque_map = torque_map_cli.build_torque_map
    monkeypatch.setattr(torque_map_cli, "build_torque_map", build_swallowing_a_ctrl_c)
    with python_sigint_handler():  # as in a terminal (a pytest-xdist worker ignores SIGINT)
        code = _swallowed_build(tmp_path, capsys)
    assert code == 130


def _swallowed_build(tmp_path, capsys):
    out = tmp_path / "out" / "map.npz"
    code = cli_main(["torque-map", "build", "--config", str(BAXTER_LEFT), "--out", str(out)] + SMALL_MAP)
    err = capsys.readouterr().err  # the build's progress lines, then the one message
    assert "Traceback" not in err and err.splitlines()[-1] == "diffsim-ros: interrupted (Ctrl-C); no partial outputs were written"
    assert not out.exists() and not any(out.parent.glob(".*tmp*"))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the command restored Python's handler
    return code


def test_ctrl_c_real_sigint_during_a_torque_map_build(tmp_path):
    out = tmp_path / "maps" / "map.npz"
    command = "from diffsim_ros.cli import main; main()"
    process = subprocess.Popen([sys.executable, "-c", command, "torque-map", "build", "--config", str(BAXTER_LEFT),
                                "--out", str(out), "--simulator", "rigid", "--contexts", "40"], stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=terminal_sigint)
    # 40 inertia contexts: ~30 s of building left after joint 1 (5 contexts left ~1.5 s, which a loaded
    # machine could spend before the signal was sent: the build then finished and exited 0).
    assert process.stderr.readline().strip() == "joint 1/7"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert err.strip() == "diffsim-ros: interrupted (Ctrl-C); no partial outputs were written"
    assert list(tmp_path.rglob("*")) == []  # not even the missing parent was created


TORQUE_MAP_ARGUMENT_CASES = {
    "dt_zero": (["--dt", "0"], "--dt must be a positive number, got 0.0"),
    "dt_nan": (["--dt", "nan"], "--dt must be a positive number, got nan"),
    "angle_points_1": (["--angle-points", "1"], "--angle-points must be at least 2, got 1"),
    "contexts_0": (["--contexts", "0"], "--contexts must be at least 1, got 0"),
    "threads_0": (["--threads", "0"], "--threads must be at least 1, got 0"),
    "substeps_0": (["--substeps", "0"], "--substeps must be at least 1, got 0"),
    "validate_negative": (["--validate", "-1"], "--validate must be at least 0, got -1"),
    "max_velocity_negative": (["--max-velocity", "-0.5"], "--max-velocity must be a positive number"),
    "config_missing": (["--config", "/nonexistent.yaml"], "robot config not found: /nonexistent.yaml"),
    "calibration_missing": (["--calibration", "/nonexistent.yaml"], "calibration file not found"),
    "out_is_a_directory": (["--out", "TMP"], "is a directory; give a file path"),
}


@pytest.mark.parametrize("extra, message", TORQUE_MAP_ARGUMENT_CASES.values(), ids=TORQUE_MAP_ARGUMENT_CASES.keys())
def test_torque_map_arguments(tmp_path, capsys, extra, message):
    argv = ["torque-map", "build", "--config", str(BAXTER_LEFT), "--out", str(tmp_path / "map.npz")] + SMALL_MAP
    extra = [str(tmp_path) if a == "TMP" else a for a in extra]
    assert cli_main(argv + extra) == 2
    assert message in one_line_error(capsys)
    assert not (tmp_path / "map.npz").exists()


def test_torque_map_show_arguments(tmp_path, capsys):
    cal = write_calibration_file(tmp_path, {"payload.mass": 0.5})
    assert cli_main(["torque-map", "show", str(tmp_path / "m.npz"), "--calibration", str(cal)]) == 2
    assert "--calibration needs --config" in one_line_error(capsys)
    assert cli_main(["torque-map", "show", str(tmp_path / "m.npz")]) == 2
    assert "torque map not found" in one_line_error(capsys)


def test_torque_map_missing_dir(tmp_path, capsys):
    out = tmp_path / "new" / "dir" / "map.npz"
    assert cli_main(["torque-map", "build", "--config", str(BAXTER_LEFT), "--out", str(out)] + SMALL_MAP) == 0
    assert out.is_file() and sorted(p.name for p in out.parent.iterdir()) == ["map.npz"]
    capsys.readouterr()


@pytest.fixture(scope="module")
def small_map(tmp_path_factory):
    out = tmp_path_factory.mktemp("maps") / "map.npz"
    assert cli_main(["torque-map", "build", "--config", str(BAXTER_LEFT), "--out", str(out)] + SMALL_MAP) == 0
    return out


def _rewrite_map(source, target, edit):
    import json

    with np.load(source) as data:
        arrays = {k: np.array(data[k]) for k in data.files}
    metadata = json.loads(str(arrays.pop("metadata")))
    edit(metadata, arrays)
    np.savez(target, metadata=np.array(json.dumps(metadata)), **arrays)
    return target


TORQUE_MAP_FILE_CASES = {
    "grid_unknown_key": (lambda m, a: m["grid"].update(bogus=1), "unknown grid settings ['bogus']"),
    "grid_string": (lambda m, a: m["grid"].update(dt="0.01"), "grid.dt must be a finite number"),
    "grid_negative_dt": (lambda m, a: m["grid"].update(dt=-0.01), "dt, max_angle_step and max_velocity must be positive"),
    "metadata_missing_robot": (lambda m, a: m.pop("robot"), "invalid torque map metadata: KeyError"),
    "absurd_torques": (lambda m, a: a["residual"].__setitem__((0, 0, 0, 0), 1e12), "beyond any plausible joint torque"),
    "zero_inertia": (lambda m, a: a["inertia_axis"].__setitem__((0, 0), 0.0), "non-positive joint inertias"),
    "nan_torque": (lambda m, a: a["residual"].__setitem__((0, 0, 0, 0), np.nan), "non-finite values"),
    "wrong_shape": (lambda m, a: a.update(residual=a["residual"][:, :, :2]), "do not match its grid"),
}


@pytest.mark.parametrize("edit, message", TORQUE_MAP_FILE_CASES.values(), ids=TORQUE_MAP_FILE_CASES.keys())
def test_torque_map_corrupt(tmp_path, capsys, small_map, edit, message):
    path = _rewrite_map(small_map, tmp_path / "bad.npz", edit)
    with pytest.raises(TorqueMapError) as err:
        TorqueMap.load(path)
    assert message in str(err.value)
    assert cli_main(["torque-map", "show", str(path), "--png", str(tmp_path / "bad.png")]) == 2
    assert message in one_line_error(capsys) and not (tmp_path / "bad.png").exists()


def test_torque_map_not_a_zip(tmp_path, capsys):
    path = tmp_path / "junk.npz"
    path.write_text("not a map")
    assert cli_main(["torque-map", "show", str(path)]) == 2
    assert "is not a diffsim_ros torque map" in one_line_error(capsys)


def test_unexpected_error(capsys, monkeypatch):
    def bug(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("diffsim_ros.cli.torque_map.show_command", bug)
    assert cli_main(["torque-map", "show", "x.npz"]) == 1
    assert one_line_error(capsys) == ("diffsim-ros: unexpected error: ZeroDivisionError: division by zero "
                                      "(set DIFFSIM_ROS_TRACEBACK=1 for the traceback)\n")
    monkeypatch.setenv("DIFFSIM_ROS_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        cli_main(["torque-map", "show", "x.npz"])


def test_estimator_calibration_output_checked_at_start_up(tmp_path):
    (tmp_path / "file").write_text("x")
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        with pytest.raises(OutputPathError, match="cannot create calibration_output .*file is not a directory"):
            runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
                "calibration_output": str(tmp_path / "file" / "calibration.yaml")})
        with pytest.raises(OutputPathError, match="calibration_output .* is a directory"):
            runtime.add_node(EstimatorNode, "estimator2", parameter_overrides={"calibration_output": str(tmp_path)})
