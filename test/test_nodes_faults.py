"""Faults around the real nodes on the embedded runtime: stale joint states, NaN bursts, dropped
and reordered messages, missing joints, wrong command lengths and modes, bad estimates, bad
parameters. Nothing unsafe may ever be published and nothing may crash.

A monitor subscribes to every command topic and checks each command as the hardware would
see it: the right length and mode, finite, within the effort limits.
"""

import numpy as np
import pytest

from diffsim_ros.io.ros_messages import (
    NS_PER_S,
    POSITION_MODE,
    JointMappingError,
    float64_multi_array_msg,
    joint_command_msg,
)
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, JOINT_COMMAND
from diffsim_ros.model import RobotModelError
from diffsim_ros.nodes.controller_node import ControllerNode
from diffsim_ros.nodes.estimator_node import EstimatorNode
from diffsim_ros.nodes.messages import estimates_msg
from diffsim_ros.nodes.sim_robot_node import SimRobotNode
from diffsim_ros.runtime import COMMAND_QOS, LATCHED_QOS
from diffsim_ros.runtime.embedded import DEFAULT_START_NS, EmbeddedRuntime
from diffsim_ros.runtime.params import ParameterError
from oracles import REPO

PARAMS = REPO / "config" / "baxter_sim.params.yaml"
JOINTS = ["left_s0", "left_s1", "left_e0", "left_e1", "left_w0", "left_w1", "left_w2"]
EFFORT_LIMIT = np.array([50.0, 100.0, 50.0, 50.0, 15.0, 15.0, 15.0])  # [N·m] URDF
BAXTER_COMMAND = "/robot/limb/left/joint_command"
EFFORT_COMMAND = "/effort_controller/commands"
STATE_TIMEOUT = 0.05  # [s] params file safety.state_timeout
RATE_LIMIT = 1000.0  # [N·m/s] params file safety.torque_rate_limit
CYCLE = 0.005  # [s] controller period (200 Hz)
STATE_PERIOD = 0.01  # [s] sim joint states (100 Hz)
HOLD_DRIFT = 0.05  # [rad] largest motion while Baxter holds in position mode
SETTLED_SPEED = 0.05  # [rad/s] impedance hold 2 s after the start (100 Hz states: 0.003)
OSCILLATING_SPEED = 0.3  # [rad/s] the params file's damping unlimited on 25 Hz states (~0.7)
ROS2_CONTROL = {"output": "ros2_control"}
# The ros2_control controller lists the joints in another order than the model.
CONTROLLER_JOINTS = JOINTS[::-1]


def seconds(now_ns):
    return (now_ns - DEFAULT_START_NS) / NS_PER_S


class CommandMonitor:
    """Checks every command the hardware would receive; keeps (time [s], command in model order)."""

    def __init__(self, handle, output):
        self.handle, self.output, self.commands, self.unsafe = handle, output, [], []
        if output == "baxter":
            handle.create_subscription(JOINT_COMMAND, BAXTER_COMMAND, self.on_joint_command, COMMAND_QOS)
        else:
            handle.create_subscription(FLOAT64_MULTI_ARRAY, EFFORT_COMMAND, self.on_effort_command, COMMAND_QOS)

    def check(self, command, ok):
        command = np.asarray(command, dtype=float)
        ok = ok and command.shape == (7,) and np.all(np.isfinite(command))
        ok = ok and np.all(np.abs(command) <= EFFORT_LIMIT)
        if not ok:
            self.unsafe.append(command)
        self.commands.append((seconds(self.handle.now_ns()), command))

    def on_joint_command(self, msg):
        order = [JOINTS.index(name) for name in msg.names] if sorted(msg.names) == sorted(JOINTS) else None
        command = np.full(7, np.nan) if order is None else np.asarray(msg.command)[np.argsort(order)]
        self.check(command, msg.mode == 3)

    def on_effort_command(self, msg):
        data = np.asarray(msg.data, dtype=float)
        command = np.full(7, np.nan)
        if data.shape == (7,):
            command[[JOINTS.index(name) for name in CONTROLLER_JOINTS]] = data
        self.check(command, True)

    def times(self):
        return np.array([t for t, _ in self.commands])


def graph(runtime, output="baxter", controller=None, sim=None):
    """sim_robot + controller (impedance, holding its start) + command monitor."""
    outputs = {} if output == "baxter" else {**ROS2_CONTROL, "controller_joints": CONTROLLER_JOINTS}
    sim_node = runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides={**outputs, **(sim or {})})
    controller_node = runtime.add_node(ControllerNode, "controller", parameter_overrides={
        "follow_estimates": False, **outputs, **(controller or {})})
    monitor = CommandMonitor(runtime.create_node("monitor"), output)
    return sim_node, controller_node, monitor


def drop_between(start, end):
    """A fault dropping every message published in [start, end) s of runtime time."""
    return lambda msg, now_ns: [] if start <= seconds(now_ns) < end else [(0.0, msg)]


def run_with_faulty_joint_states(fault, seconds):
    """sim_robot + controller + estimator for ``seconds`` with ``fault`` on the joint states."""
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller, monitor = graph(runtime)
        estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={"save_on_shutdown": False})
        runtime.inject_fault("/robot/joint_states", fault)
        runtime.spin_for(seconds)
    return runtime, sim, controller, monitor, estimator


def logs(runtime, level):
    return [r.message for r in runtime.log_records if r.level == level]


# --- stale joint states ----------------------------------------------------------------------


def test_baxter_stale_joint_states_stop_the_commands_and_the_robot_holds_in_position_mode():
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller, monitor = graph(runtime)
        runtime.inject_fault("/robot/joint_states", drop_between(1.0, 1.6))
        runtime.spin_for(1.0)
        assert sim.hardware.mode == "torque"
        held_at = sim.plant.true_state()[0]
        runtime.spin_for(0.55)
        assert sim.hardware.mode == "position" and sim.hardware.fallbacks == 1
        assert np.abs(sim.plant.true_state()[0] - held_at).max() < HOLD_DRIFT
        runtime.spin_for(0.45)
    times = monitor.times()
    last_state = 1.0 - STATE_PERIOD  # the last joint state before the gap
    stale = (times > last_state + STATE_TIMEOUT + CYCLE) & (times < 1.6)
    assert not stale.any()  # Baxter: nothing published while stale, the robot falls back
    assert times[times < 1.6].max() > last_state + STATE_TIMEOUT - CYCLE  # commanded up to the timeout
    assert times.max() > 1.9 and sim.hardware.mode == "torque"  # resumed, ramping in again
    assert not monitor.unsafe
    warnings = logs(runtime, "warning")
    assert sum("joint states stale" in m and "falls back to position mode" in m for m in warnings) == 1
    assert logs(runtime, "info").count("joint states fresh: commanding torque") == 2


def test_ros2_control_stale_joint_states_ramp_to_the_hold_command():
    """The effort controller keeps its last command: stale states ramp it to the hold command at the rate limit."""
    hold = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # [N·m] model order
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller, monitor = graph(runtime, "ros2_control",
                                         controller={"safety.hold": "fixed", "safety.hold_command": hold})
        runtime.inject_fault("/robot/joint_states", drop_between(0.5, 0.8))
        runtime.spin_for(1.0)
    times = monitor.times()
    commands = np.array([c for _, c in monitor.commands])
    stale = (times > 0.5 - STATE_PERIOD + STATE_TIMEOUT + CYCLE) & (times < 0.8)
    assert stale.sum() > 40  # the effort controller keeps getting a command every cycle
    steps = np.abs(np.diff(commands, axis=0)).max(axis=1)
    assert np.all(steps <= RATE_LIMIT * np.diff(times) + 1e-9)  # no torque step, also when stopping
    ramped = stale & (times > 0.5 + STATE_TIMEOUT + 0.1)  # 0.1 s at 1000 N·m/s covers every holding torque
    assert ramped.sum() > 20 and np.all(commands[ramped] == hold)
    assert not np.allclose(commands[times > 0.95], hold)  # commanding again
    assert not monitor.unsafe and sim.rejected_commands == 0


def _settled_speed(runtime, sim, seconds=3.0, settle=2.0):
    """Largest joint speed [rad/s] of the sim arm after ``settle`` s, sampled every 0.1 s."""
    speeds = []
    for _ in range(int(round(seconds / 0.1))):
        runtime.spin_for(0.1)
        speeds.append(np.abs(sim.plant.true_state()[1]).max())
    return max(speeds[int(round(settle / 0.1)):])


@pytest.mark.parametrize("state_period", [0.01, 0.0])
def test_slow_joint_states_limit_the_damping_for_their_measured_period(state_period):
    """25 Hz joint states under the params file's 100 Hz impedance.state_period: one warning, the
    damping limited for 40 ms, the arm settles. With the limit off (0) it keeps oscillating."""
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller, monitor = graph(runtime, sim={"joint_state_rate_hz": 25.0}, controller={
            "safety.state_timeout": 0.1, "impedance.state_period": state_period})
        speed = _settled_speed(runtime, sim)
        diagnostics = controller._control_status()
    notices = [m for m in logs(runtime, "warning") if m.startswith("joint states arrive every")]
    if state_period:
        assert speed < SETTLED_SPEED and controller.loop.controller.state_period == pytest.approx(0.04)
        assert notices == ["joint states arrive every 40.0 ms: damping now limited for a 40.0 ms state period"]
        assert diagnostics.values["damping limited for a state period of [ms]"] == "40.0"
    else:
        assert speed > OSCILLATING_SPEED and not notices
    assert not monitor.unsafe


def test_no_joint_states_at_all_means_no_torque_commands():
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller, monitor = graph(runtime)
        runtime.inject_fault("/robot/joint_states", lambda msg, now_ns: [])
        runtime.spin_for(0.5)
    assert monitor.commands == [] and sim.hardware.mode == "position"
    assert controller.status.reason == "no_state"


# --- corrupted input -------------------------------------------------------------------------


def test_nan_bursts_drops_and_reordering_of_joint_states_never_reach_the_commands():
    def fault(msg, now_ns):
        k = int(round(seconds(now_ns) / STATE_PERIOD))
        if 30 <= k < 36:
            msg.position[2:5] = np.nan  # a burst of NaN positions (names are sorted: left_e0, ...)
        if 50 <= k < 53:
            msg.velocity[:] = np.inf
        if k % 10 == 7:
            return [(1.5 * STATE_PERIOD, msg)]  # overtaken by the next message
        if k % 10 == 3:
            return []
        return [(0.0, msg)]

    runtime, sim, controller, monitor, estimator = run_with_faulty_joint_states(fault, 1.0)
    for counters in (controller.joints.counters, estimator.joints.counters):
        # 10 dropped (k % 10 == 3); NaN at k = 30-32, 34, 35 and inf at 50-52; 10 late (k % 10 == 7).
        assert counters.dropped_nonfinite == 8 and counters.dropped_out_of_order == 10
        assert counters.received == 90 and counters.accepted == 72
    assert not monitor.unsafe and len(monitor.commands) > 150
    assert sim.hardware.fallbacks == 0  # a few lost samples are within the state timeout
    assert np.all(np.isfinite(sim.plant.true_state()[0]))


def test_joint_states_missing_a_model_joint_are_refused_with_a_clear_error():
    def drop_w2(msg, now_ns):
        keep = [i for i, name in enumerate(msg.name) if name != "left_w2"]
        msg.name = [msg.name[i] for i in keep]
        for field in ("position", "velocity", "effort"):
            setattr(msg, field, getattr(msg, field)[keep])
        return [(0.0, msg)]

    runtime, sim, controller, monitor, estimator = run_with_faulty_joint_states(drop_w2, 0.5)
    assert monitor.commands == []
    assert controller.joints.counters.dropped_invalid == estimator.joints.counters.dropped_invalid == 50
    errors = logs(runtime, "error")
    assert sum("missing joint(s) ['left_w2']" in m for m in errors) == 2  # once per node (throttled)


def test_wrong_commands_are_rejected_by_the_simulated_hardware():
    """What the hardware does with bad commands from someone else (the sim must not crash)."""
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        baxter = runtime.add_node(SimRobotNode, "baxter")
        effort = runtime.add_node(SimRobotNode, "effort", parameter_overrides={
            **ROS2_CONTROL, "joint_states_topic": "/effort/joint_states", "camera_rate_hz": 0.0})
        node = runtime.create_node("bad_commander")
        joint_command = node.create_publisher(JOINT_COMMAND, BAXTER_COMMAND, COMMAND_QOS)
        effort_command = node.create_publisher(FLOAT64_MULTI_ARRAY, EFFORT_COMMAND, COMMAND_QOS)
        messages = node.messages
        for publisher, msg in (
            (joint_command, joint_command_msg(messages, JOINTS[:6], np.zeros(6))),  # a joint missing
            (joint_command, joint_command_msg(messages, JOINTS, np.zeros(7), mode=POSITION_MODE)),
            (joint_command, joint_command_msg(messages, JOINTS, np.full(7, np.nan))),
            (effort_command, float64_multi_array_msg(messages, np.zeros(6))),  # wrong length
            (effort_command, float64_multi_array_msg(messages, np.zeros(8))),
            (effort_command, float64_multi_array_msg(messages, [np.nan] * 7)),
        ):
            publisher.publish(msg)
            runtime.spin_for(0.01)  # command QoS keeps the last message only
    assert baxter.rejected_commands == 3 and baxter.hardware.mode == "position"
    assert effort.rejected_commands == 3 and effort.hardware.mode == "position"
    assert len([m for m in logs(runtime, "warning") if m.startswith("command rejected")]) == 2  # throttled per site


def test_bad_estimates_are_not_applied():
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller, monitor = graph(runtime, controller={"follow_estimates": True})
        node = runtime.create_node("fake_estimator")
        publisher = node.create_publisher(FLOAT64_MULTI_ARRAY, "/estimator/estimates", LATCHED_QOS)
        for msg in (
            float64_multi_array_msg(node.messages, [1.0, 2.0]),  # not the estimates layout
            estimates_msg(node.messages, {"payload.mass": np.nan}),
            estimates_msg(node.messages, {"payload.com": [0.1, 0.2]}),  # wrong shape
            estimates_msg(node.messages, {"payload.mass": 0.5, "camera.pose": np.arange(7.0)}),  # good
        ):
            publisher.publish(msg)
            runtime.spin_for(0.1)
    assert sum(m.startswith("estimates not applied") for m in logs(runtime, "error")) == 3
    assert controller.model_updates == 1 and float(controller.model.get_parameter("payload.mass")) == 0.5
    assert not monitor.unsafe


# --- start-up errors -------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, error, match", [
    ({"mode": "torque"}, ParameterError, r"mode must be one of \('gravity_compensation', 'impedance', 'mpc'\)"),
    ({"rate_hz": 50.0}, ParameterError, r"rate_hz 50.0 < 100.0: Baxter leaves torque mode"),
    ({"output": "ethercat"}, ParameterError, r"output must be one of \('baxter', 'ros2_control'\)"),
    ({"side": "middle"}, ParameterError, r"Baxter side must be one of \('left', 'right'\)"),
    ({"output": "ros2_control", "controller_joints": JOINTS[:6]}, JointMappingError,
     r"controller_joints: missing joint\(s\) \['left_w2'\]"),
    ({"output": "ros2_control", "controller_joints": JOINTS + ["head_pan"]}, JointMappingError,
     r"joint\(s\) \['head_pan'\] are not in the model"),
    ({"impedance.stiffness": [1.0, 2.0]}, ParameterError, r"parameter 'impedance.stiffness' has 2 values for 7 joints"),
    ({"reference.waypoints": [0.0] * 8}, ParameterError, r"8 values is not a multiple of the 7 joints"),
    ({"robot_config": "/nonexistent/robot.yaml"}, RobotModelError, r"robot config not found: /nonexistent/robot.yaml"),
])
def test_controller_start_up_errors_name_the_problem(overrides, error, match):
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        with pytest.raises(error, match=match):
            runtime.add_node(ControllerNode, "controller", parameter_overrides=overrides)


def test_estimator_and_sim_start_up_errors_name_the_problem():
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        with pytest.raises(ValueError, match="model must be one of"):
            runtime.add_node(EstimatorNode, "estimator", parameter_overrides={"model": "mujoco"})
        with pytest.raises(ParameterError, match="bounds.names, bounds.lower and bounds.upper need the same length"):
            runtime.add_node(EstimatorNode, "estimator2", parameter_overrides={"bounds.names": ["payload.mass"]})
        with pytest.raises(ParameterError, match=r"extra_joints \['left_s0'\] are model joints"):
            runtime.add_node(SimRobotNode, "sim", parameter_overrides={"extra_joints": ["left_s0"]})
        with pytest.raises(ParameterError, match="truth.spring_stiffness"):
            runtime.add_node(SimRobotNode, "sim2", parameter_overrides={"truth.spring_joints": ["left_s1"]})
        with pytest.raises(ParameterError, match=r"node 'sim3': invalid parameters: output must be one of \('baxter', 'ros2_control'\)"):
            runtime.add_node(SimRobotNode, "sim3", parameter_overrides={"output": "ethercat"})
