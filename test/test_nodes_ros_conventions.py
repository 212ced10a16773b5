"""ROS conventions of the nodes, in process on the embedded runtime (deterministic, simulated time):
the controller's lifecycle (torque only while active), event-driven control, run-time parameter
changes validated like start-up ones, the estimator's Trigger services and an update that runs
through the background hook, and /diagnostics. The same behaviour over real DDS is checked by
test_ros_graph.py.
"""

import gc

import numpy as np
import pytest
import yaml

from diffsim_ros.control import TorqueMapGrid, build_torque_map, parameter_hash
from diffsim_ros.sim import make_simulator
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, JOINT_STATE
from diffsim_ros.model import load_robot_config
from diffsim_ros.nodes.controller_node import ControllerNode, ControllerNodeConfig
from diffsim_ros.nodes.estimator_node import EstimatorNode, EstimatorNodeConfig
from diffsim_ros.nodes.messages import estimates_msg
from diffsim_ros.nodes.sim_robot_node import SimRobotNode
from diffsim_ros.runtime import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS
from diffsim_ros.runtime.diagnostics import DIAGNOSTIC_ARRAY, ERROR, OK, WARN
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from diffsim_ros.runtime.params import ParameterError, parameter_specs
from oracles import REPO

PARAMS = REPO / "config" / "baxter_sim.params.yaml"
HOLD = [0.25]  # [N·m] hold command of every joint
ROS2_CONTROL = {"output": "ros2_control"}
SIM_TORQUE_RMS = 1.0  # [N·m] simulator torque estimate vs the efforts MuJoCo applied (true model, noisy states)


class Recorder:
    """Records messages of one topic with the runtime time [s]."""

    def __init__(self, runtime, msg_type, topic, qos=COMMAND_QOS):
        self.runtime, self.messages = runtime, []
        handle = runtime.create_node(f"recorder_{len(runtime.nodes)}")
        handle.create_subscription(msg_type, topic, lambda msg: self.messages.append((runtime.now(), msg)), qos)


def controller_graph(**controller_overrides):
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    sim = runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides={**ROS2_CONTROL, "camera_rate_hz": 0.0})
    controller = runtime.add_node(ControllerNode, "controller", parameter_overrides={
        **ROS2_CONTROL, "mode": "gravity_compensation", "safety.hold": "fixed", "safety.hold_command": HOLD,
        "follow_estimates": False,
        **controller_overrides})
    commands = Recorder(runtime, FLOAT64_MULTI_ARRAY, "/effort_controller/commands")
    return runtime, sim, controller, commands


def test_node_parameters_come_from_the_library_configs():
    controller = {spec.name: spec for spec in parameter_specs(ControllerNodeConfig)}
    assert {"mpc.horizon", "mpc.step_tolerance", "mpc.levenberg", "safety.state_timeout"} <= set(controller)
    assert "safety.output" not in controller  # follows the node's output
    assert controller["safety.torque_rate_limit"].default == [200.0]  # SafetyConfig's 200.0, one value per joint
    assert "Largest torque change" in controller["safety.torque_rate_limit"].description
    estimator = {spec.name: spec for spec in parameter_specs(EstimatorNodeConfig)}
    assert {"torque_window", "effort_std_floor", "camera_window"} <= set(estimator)
    assert estimator["groups"].default == ["payload", "spring"]


def test_controller_commands_only_while_active():
    runtime, _, controller, commands = controller_graph()
    runtime.spin_for(1.0)
    assert controller.active and len(commands.messages) > 150
    controller.on_deactivate()
    runtime.spin_for(0.01)
    count = len(commands.messages)
    assert list(commands.messages[-1][1].data) == HOLD * 7  # ros2_control: the hold command, once
    runtime.spin_for(0.5)
    assert len(commands.messages) == count
    controller.on_activate()
    runtime.spin_for(0.5)
    assert len(commands.messages) > count + 80
    runtime.shutdown()


def test_autostart_false_waits_for_activation():
    runtime, _, controller, commands = controller_graph(autostart=False)
    runtime.spin_for(0.5)
    assert not controller.active and commands.messages == []
    runtime.shutdown()


def test_event_driven_control_commands_on_each_joint_state():
    runtime, sim, controller, commands = controller_graph(control_trigger="joint_state")
    runtime.spin_for(2.0)
    times = np.array([t for t, _ in commands.messages])
    # One command per joint state (100 Hz), none from the 200 Hz timer while states are fresh
    # (before the first state the timer publishes the hold command).
    assert len(controller.latencies) == 200
    assert 200 <= len(times) <= 202
    runtime.shutdown()


def test_run_time_parameter_changes_are_validated():
    runtime, _, controller, _ = controller_graph()
    handle = next(node for node in runtime.nodes if node.name == "controller")
    runtime.spin_for(0.2)
    assert handle.set_parameters({"safety.state_timeout": 0.08, "gravity_scale": 0.9}) is None
    assert controller.config.safety.state_timeout == 0.08 and controller.config.gravity_scale == 0.9
    assert controller.joints.watchdog.timeout_ns == 80_000_000
    reason = handle.set_parameters({"safety.limit_margin": -0.1})
    assert "limit_margin must be a positive number" in reason and controller.config.safety.limit_margin == 0.1
    assert "restart" in handle.set_parameters({"mode": "impedance"})
    assert "expected a list of float" in handle.set_parameters({"safety.hold_command": "x"})
    runtime.spin_for(0.2)
    assert controller.status.active  # a retune does not re-engage
    runtime.shutdown()


def _walks_the_frozen_heap():
    raise AssertionError("gc.get_freeze_count walks the whole permanent generation (40 ms): not in a callback")


def test_controller_diagnostics_report_input_and_control(monkeypatch):
    monkeypatch.setattr(gc, "get_freeze_count", _walks_the_frozen_heap)
    runtime, sim, controller, _ = controller_graph()
    diagnostics = Recorder(runtime, DIAGNOSTIC_ARRAY, "/diagnostics", 10)
    runtime.spin_for(2.5)
    statuses = {s.name: s for _, msg in diagnostics.messages for s in msg.status}
    joints = statuses["controller: /robot/joint_states"]
    values = {kv.key: kv.value for kv in joints.values}
    assert joints.level == OK and values["watchdog"] == "fresh" and abs(float(values["accepted rate [Hz]"]) - 100) < 2
    control = statuses["controller: control"]
    assert control.level == OK and {kv.key: kv.value for kv in control.values}["lifecycle"] == "active"
    runtime.shutdown()
    # The stale input is an error.
    runtime, sim, controller, _ = controller_graph()
    diagnostics = Recorder(runtime, DIAGNOSTIC_ARRAY, "/diagnostics", 10)
    runtime.spin_for(1.5)
    sim.joint_states.publish = lambda msg: None  # the robot goes silent
    runtime.spin_for(1.2)
    last = {s.name: s for s in diagnostics.messages[-1][1].status}
    assert last["controller: /robot/joint_states"].level == ERROR
    runtime.shutdown()


def test_sim_robot_diagnostics_measure_its_joint_state_publishing(monkeypatch):
    monkeypatch.setattr(gc, "get_freeze_count", _walks_the_frozen_heap)
    runtime, sim, controller, _ = controller_graph()
    diagnostics = Recorder(runtime, DIAGNOSTIC_ARRAY, "/diagnostics", 10)
    runtime.spin_for(2.5)
    hardware = [s for _, msg in diagnostics.messages for s in msg.status if s.name == "sim_robot: hardware"]
    values = {kv.key: kv.value for kv in hardware[-1].values}
    assert hardware[-1].level == OK and hardware[-1].message == "running"
    assert int(values["joint states published"]) >= 195 and float(values["largest joint state gap [ms]"]) < 10.5
    assert values["joint state gaps > 50 ms"] == "0" and abs(float(values["real-time factor"]) - 1.0) < 0.01
    # The sim stops publishing for 0.2 s: measured at the source and reported.
    sim.joint_state_timer.cancel()
    runtime.spin_for(0.2)
    sim.handle.create_timer(0.01, sim._publish_joint_state)
    runtime.spin_for(1.2)
    last = [s for _, msg in diagnostics.messages for s in msg.status if s.name == "sim_robot: hardware"][-1]
    values = {kv.key: kv.value for kv in last.values}
    assert last.level == WARN and last.message == "joint states paused"
    assert values["joint state gaps > 50 ms"] == "1" and 200.0 <= float(values["largest joint state gap [ms]"]) < 215.0
    runtime.shutdown()


def test_estimator_services_save_and_reset(tmp_path):
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    output = tmp_path / "calibration.yaml"
    estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={"calibration_output": str(output)})
    response = runtime.call_service("/estimator/save_calibration")
    assert response == {"success": False, "message": "no accepted estimates yet: nothing to save"}
    estimator.estimator.values.update({"payload.mass": 1.25})  # as an accepted update leaves it
    response = runtime.call_service("/estimator/save_calibration")
    assert response["success"] and response["message"] == str(output)
    assert yaml.safe_load(output.read_text())["parameters"]["payload.mass"] == pytest.approx(1.25)
    before = estimator.estimator
    assert runtime.call_service("/estimator/reset")["success"]
    assert estimator.estimator is not before and estimator.estimator.values == {}
    with pytest.raises(Exception, match="no service /estimator/nothing"):
        runtime.call_service("/estimator/nothing")
    runtime.shutdown()


def test_estimator_queues_samples_while_an_update_runs():
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    estimator = runtime.add_node(EstimatorNode, "estimator")
    fed = []
    estimator.estimator.add_joint_state = lambda *args: fed.append(args)
    estimator.busy = True
    estimator._feed("add_joint_state", 1.0, np.zeros(7), None, None)
    assert fed == [] and len(estimator._pending) == 1
    estimator._update_done(None, None)
    assert len(fed) == 1 and estimator._pending == [] and not estimator.busy
    # A reset requested during an update discards the update and the queued samples.
    estimator.busy = True
    estimator._feed("add_joint_state", 2.0, np.zeros(7), None, None)
    assert runtime.call_service("/estimator/reset")["message"] == "estimator reset when the running update ends"
    old = estimator.estimator
    estimator._update_done(object(), None)  # (an update result that must not be published)
    assert estimator.estimator is not old and estimator.published == 0 and estimator.last_update is None
    runtime.shutdown()


def test_invalid_library_settings_name_the_node():
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    with pytest.raises(ParameterError, match="node 'estimator': invalid parameters: need holdout >= 1"):
        runtime.add_node(EstimatorNode, "estimator", parameter_overrides={"holdout": 0})


def _truth_calibration(path):
    """The sim's hidden truth as a calibration file (params file: sim_robot.truth)."""
    truth = yaml.safe_load(PARAMS.read_text())["sim_robot"]["ros__parameters"]["truth"]
    path.write_text(yaml.safe_dump({"robot": "baxter_left", "parameters": {
        "payload.mass": truth["payload_mass"], "payload.com": truth["payload_com"],
        "left_s1.spring.stiffness": truth["spring_stiffness"][0], "left_s1.spring.offset": truth["spring_offset"][0]}}))
    return path


def test_estimator_publishes_simulator_torques_at_the_joint_state_rate(tmp_path):
    """One torque estimate per joint state, stamped with it, close to the efforts the sim applied."""
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides={**ROS2_CONTROL, "camera_rate_hz": 0.0})
    runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
        "calibration_file": str(_truth_calibration(tmp_path / "truth.yaml")), "save_on_shutdown": False})
    runtime.add_node(EstimatorNode, "nominal_estimator", parameter_overrides={"save_on_shutdown": False})
    runtime.add_node(ControllerNode, "controller", parameter_overrides={**ROS2_CONTROL, "follow_estimates": False})
    states = Recorder(runtime, JOINT_STATE, "/robot/joint_states", SENSOR_QOS)
    torques = Recorder(runtime, JOINT_STATE, "/estimator/estimated_torques", SENSOR_QOS)
    nominal = Recorder(runtime, JOINT_STATE, "/nominal_estimator/estimated_torques", SENSOR_QOS)
    runtime.spin_for(3.0)
    runtime.shutdown()
    assert len(torques.messages) == len(states.messages) - 1  # every joint state but the first
    stamps = [(m.header.stamp.sec, m.header.stamp.nanosec) for _, m in states.messages[1:]]
    assert [(m.header.stamp.sec, m.header.stamp.nanosec) for _, m in torques.messages] == stamps
    order = [list(states.messages[0][1].name).index(name) for name in torques.messages[0][1].name]
    applied = np.array([np.asarray(m.effort)[order] for _, m in states.messages[1:]])
    moving = slice(50, None)  # after the controller's torque ramp-in
    rms = {}
    for label, recorder in (("truth", torques), ("nominal", nominal)):
        estimated = np.array([m.effort for _, m in recorder.messages])
        rms[label] = np.sqrt(np.mean((estimated[moving] - applied[moving]) ** 2, axis=0))
    assert rms["truth"].max() < SIM_TORQUE_RMS, rms
    assert rms["nominal"][1] > 3 * SIM_TORQUE_RMS  # the payload and spring the nominal model lacks


def _small_map(model, path):
    grid = TorqueMapGrid(angle_points=3, velocity_points=3, inertia_contexts=2, context_pool=32)
    build_torque_map(make_simulator(model, grid.dt, kind="rigid"), grid).save(path)
    return path


@pytest.mark.parametrize("rebuild", [True, False])
def test_controller_torque_map_follows_estimates_and_is_rebuilt(tmp_path, rebuild):
    nominal = load_robot_config(REPO / "config" / "baxter_left.yaml").build_model()
    path = _small_map(nominal, tmp_path / "map.npz")
    runtime, _, controller, commands = controller_graph(**{
        "mode": "impedance", "impedance.model_term": "map", "impedance.torque_map": str(path),
        "impedance.rebuild_map": rebuild, "follow_estimates": True})
    diagnostics = Recorder(runtime, DIAGNOSTIC_ARRAY, "/diagnostics", 10)
    runtime.spin_for(0.5)
    assert controller.controller.map_exact
    handle = runtime.create_node("fake_estimator")
    publisher = handle.create_publisher(FLOAT64_MULTI_ARRAY, "/estimator/estimates", LATCHED_QOS)
    publisher.publish(estimates_msg(handle.messages, {"payload.mass": 1.2, "payload.com": [0.02, -0.01, 0.06]}))
    runtime.spin_for(1.5)
    assert controller.model_updates == 1 and controller.controller.model is controller.model
    assert controller.controller.map_exact is rebuild and controller.map_rebuilds == int(rebuild)
    if rebuild:
        assert controller.controller.torque_map.parameter_hash == parameter_hash(controller.model)
    status = next(st for st in diagnostics.messages[-1][1].status if st.name.endswith(": control"))
    control = {kv.key: kv.value for kv in status.values}
    assert control["torque map"] == ("exact" if rebuild else "conditioned on the model")
    assert controller.status.active and len(commands.messages) > 350  # commanded throughout
    runtime.shutdown()
