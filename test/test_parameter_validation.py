"""Every numeric node parameter is validated at start-up and on every run-time change: NaN, inf,
per-joint lists of the wrong length and out-of-range values are refused with a reason naming
the parameter, valid values pass, and a refused change leaves the controller commanding.

The property test enumerates every declared parameter of every node (``parameter_specs`` of
each node's config class); the parameters that may be negative are listed here, so a new
parameter is either range-checked or listed.
"""

import functools
import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY
from diffsim_ros.nodes.controller_node import ControllerNode, ControllerNodeConfig
from diffsim_ros.nodes.estimator_node import EstimatorNode, EstimatorNodeConfig
from diffsim_ros.nodes.object_estimator_node import ObjectEstimatorNodeConfig
from diffsim_ros.nodes.sim_robot_node import SimRobotConfig, SimRobotNode
from diffsim_ros.runtime import COMMAND_QOS
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from diffsim_ros.runtime.params import ParameterError, config_values, declare_config, parameter_specs, updated_config
from oracles import REPO

PARAMS = REPO / "config" / "baxter_sim.params.yaml"
JOINTS = 7  # Baxter's arm
# Start points that use every parameter (a spring to give a stiffness to, bounds to bound).
BASES = {
    "controller": (ControllerNodeConfig, {}),
    "estimator": (EstimatorNodeConfig, {"bounds.names": ["payload.mass"], "bounds.lower": [0.0], "bounds.upper": [5.0]}),
    "sim_robot": (SimRobotConfig, {"truth.spring_joints": ["left_s1"], "truth.spring_stiffness": [9000.0]}),
    "object_estimator": (ObjectEstimatorNodeConfig, {"scene_file": "scene.yaml"}),
}
# Parameters that may be negative: positions, offsets, poses, bounds and hold torques.
SIGNED = {"reference.waypoints", "safety.hold_command", "initial_positions", "truth.payload_com", "truth.spring_offset",
          "truth.camera_pose", "bounds.lower", "bounds.upper"}
# Lists that are neither per-joint nor as long as their start value: a valid length.
LENGTHS = {"reference.waypoints": JOINTS, "initial_positions": JOINTS, "truth.camera_pose": 7, "truth.spring_offset": 1}
FIXED_LENGTHS = {"truth.payload_com": {3}, "truth.camera_pose": {0, 7}}
SPECIALS = (math.nan, math.inf, -math.inf)


@dataclass
class _Handle:
    """What declare_config needs of a node handle."""

    name: str
    overrides: dict

    def declare_parameter(self, name, default, description=""):
        return self.overrides.get(name, default)


def _base(node):
    config_cls, overrides = BASES[node]
    return declare_config(_Handle(node, overrides), config_cls)


def _numeric(spec):
    return (spec.element or spec.kind) in (int, float)


def _specs():
    return [(node, spec) for node, (config_cls, _) in BASES.items() for spec in parameter_specs(config_cls)
            if _numeric(spec)]


def _names_the_parameter(spec, reason):
    if spec.member is None:
        return spec.name in reason
    prefix = spec.name[:-len(spec.member)]  # "mpc." or ""
    return spec.member in reason and prefix in reason


def _valid_length(spec, current):
    if spec.per_joint:
        return st.sampled_from([1, JOINTS])
    return st.just(LENGTHS.get(spec.name, len(current)))


def _list_with(spec, current, special):
    """A list of valid length whose values are the start ones except one ``special``."""
    def build(length, index):
        filler = current[0] if current else (0 if spec.element is int else 1.0)
        values = [filler] * length
        values[index % length] = special
        return values

    return st.tuples(_valid_length(spec, current).filter(bool), st.integers(0, 100)).map(lambda a: build(*a))


def _bad_values(spec, current):
    """Values ``spec`` must refuse, with the rule each breaks."""
    element = spec.element or spec.kind
    strategies = []
    if spec.element is None:
        strategies.append(st.sampled_from(SPECIALS))  # an int parameter refuses a float too
        if spec.name not in SIGNED:
            negative = st.integers(-10**6, -1) if element is int else st.floats(-1e6, -1e-6)
            strategies.append(negative)
    else:
        strategies.append(st.sampled_from(SPECIALS).flatmap(lambda v: _list_with(spec, current, v)))
        if spec.name not in SIGNED:
            negative = st.integers(-10**6, -1) if element is int else st.floats(-1e6, -1e-6)
            strategies.append(negative.flatmap(lambda v: _list_with(spec, current, v)))
        wrong = None
        if spec.per_joint:
            wrong = st.integers(2, JOINTS - 1) | st.integers(JOINTS + 1, 3 * JOINTS)
            if spec.default:
                wrong = wrong | st.just(0)
        elif spec.name in FIXED_LENGTHS:
            wrong = st.integers(0, 10).filter(lambda n: n not in FIXED_LENGTHS[spec.name])
        if wrong is not None:
            filler = current[0] if current else 1.0
            strategies.append(wrong.map(lambda n: [filler] * n))
    return st.one_of(strategies)


def _valid_values(spec, current):
    """Values ``spec`` accepts: the start value scaled up a little (ints: plus 0 or 1), per-joint lists of either length."""
    if spec.element is None:
        if spec.kind is int:
            return st.integers(0, 1).map(lambda k: current + k)
        return st.floats(1.0, 1.5).map(lambda f: current * f)
    lengths = _valid_length(spec, current) if current else st.just(0)
    return st.tuples(lengths, st.floats(1.0, 1.5)).map(
        lambda a: [(current[0] if spec.element is int else current[0] * a[1])] * a[0] if current else [])


@functools.cache
def _strategies(node, name):
    """(bad, valid) value strategies of one parameter (built once: hypothesis is slow to build them)."""
    spec = next(spec for spec in parameter_specs(BASES[node][0]) if spec.name == name)
    current = config_values(_base(node))[name]
    return _bad_values(spec, current), _valid_values(spec, current)


@pytest.mark.parametrize("node, spec", _specs(), ids=lambda x: getattr(x, "name", x))
@settings(max_examples=15, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_numeric_parameter_refuses_nan_inf_wrong_lengths_and_out_of_range_values(node, spec, data):
    base, (bad_values, valid_values) = _base(node), _strategies(node, spec.name)
    current = config_values(base)[spec.name]  # the start value as the parameter holds it
    bad = data.draw(bad_values, label="bad")
    with pytest.raises(ParameterError) as refused:
        updated_config(base, {spec.name: bad}, f"node '{node}'", joint_count=JOINTS)
    reason = str(refused.value)
    assert _names_the_parameter(spec, reason), reason
    assert reason.startswith(f"node '{node}'"), reason
    good = data.draw(valid_values, label="good")
    updated = updated_config(base, {spec.name: good}, f"node '{node}'", joint_count=JOINTS)
    assert config_values(updated)[spec.name] == pytest.approx(good)


def test_the_property_test_covers_every_node_and_every_kind_of_rule():
    names = {spec.name for _, spec in _specs()}
    assert {"impedance.stiffness", "impedance.damping", "safety.torque_rate_limit", "mpc.horizon", "window_seconds",
            "noise.effort", "mass_max"} <= names
    assert SIGNED <= names and set(LENGTHS) <= names
    per_joint = {spec.name for _, spec in _specs() if spec.per_joint}
    assert per_joint == {"impedance.stiffness", "impedance.damping", "safety.effort_limit", "safety.torque_rate_limit",
                         "safety.hold_command"}


def test_the_issue_case_nan_stiffness_is_refused_with_its_reason():
    base = _base("controller")
    with pytest.raises(ParameterError, match=r"parameter 'impedance.stiffness'\[0\]: must be a finite number, got nan"):
        updated_config(base, {"impedance.stiffness": [math.nan] + [60.0] * 6}, "node 'controller'", joint_count=JOINTS)
    with pytest.raises(ParameterError, match=r"parameter 'impedance.damping' has 2 values for 7 joints"):
        updated_config(base, {"impedance.damping": [1.0, 2.0]}, "node 'controller'", joint_count=JOINTS)


# --- on the running graph ----------------------------------------------------------------------


def _impedance_graph():
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides={"output": "ros2_control", "camera_rate_hz": 0.0})
    controller = runtime.add_node(ControllerNode, "controller", parameter_overrides={
        "output": "ros2_control", "mode": "impedance", "follow_estimates": False})
    commands = []
    recorder = runtime.create_node("recorder")
    recorder.create_subscription(FLOAT64_MULTI_ARRAY, "/effort_controller/commands",
                                 lambda msg: commands.append(np.asarray(msg.data)), COMMAND_QOS)
    return runtime, controller, commands


REFUSED = [  # (change, what the reason says)
    ({"impedance.stiffness": [math.nan] + [60.0] * 6}, "parameter 'impedance.stiffness'[0]: must be a finite number"),
    ({"impedance.damping": [math.inf] * 7}, "parameter 'impedance.damping'[0]: must be a finite number"),
    ({"impedance.damping": [1.0, 2.0, 3.0]}, "parameter 'impedance.damping' has 3 values for 7 joints"),
    ({"impedance.stiffness": [-5.0]}, "parameter 'impedance.stiffness' must be >= 0"),
    ({"safety.torque_rate_limit": [200.0, -1.0, 200.0, 200.0, 200.0, 200.0, 200.0]}, "safety torque_rate_limit must be positive"),
    ({"safety.state_timeout": -math.inf}, "parameter 'safety.state_timeout': must be a finite number"),
    ({"gravity_scale": math.nan, "impedance.model_scale": 1.0}, "parameter 'gravity_scale': must be a finite number"),
    ({"rate_hz": math.nan}, "parameter 'rate_hz': must be a finite number"),  # a start-up parameter: invalid first
]


def test_a_refused_change_keeps_the_controller_commanding_finite_torques():
    runtime, controller, commands = _impedance_graph()
    handle = next(node for node in runtime.nodes if node.name == "controller")
    runtime.spin_for(1.0)
    assert controller.status.active and commands
    config, law = controller.config, controller.controller
    for change, reason in REFUSED:
        answer = handle.set_parameters(change)
        assert answer is not None and reason in answer, (change, answer)
        assert controller.config is config and controller.controller is law  # the previous values stay
    assert handle.parameters["impedance.stiffness"] == list(config.stiffness)
    count = len(commands)
    runtime.spin_for(1.0)
    assert len(commands) >= count + 190  # 200 Hz
    assert all(np.all(np.isfinite(c)) for c in commands[count:]) and controller.status.active
    assert controller.status.reason == "ok" and controller.status.faults == 0
    assert handle.set_parameters({"impedance.stiffness": [60.0]}) is None  # a valid change still applies
    assert controller.controller.stiffness.tolist() == [60.0] * 7
    runtime.shutdown()


def test_nodes_that_read_parameters_at_start_up_say_so_and_name_invalid_values(tmp_path):
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
        "torque_estimate": "off", "calibration_output": str(tmp_path / "calibration.yaml")})
    handle = next(node for node in runtime.nodes if node.name == "estimator")
    reason = handle.set_parameters({"window_seconds": math.nan})
    assert "parameter 'window_seconds': must be a finite number, got nan" in reason
    reason = handle.set_parameters({"holdout": -1})
    assert "holdout" in reason and "invalid parameters" in reason
    assert "['update_period'] are read at start-up only: restart the node" in handle.set_parameters({"update_period": 4.0})
    assert handle.set_parameters({"use_sim_time": False}) is None  # not the node's own
    assert estimator.config.estimation.update_period == 2.0
    runtime.shutdown()
