"""Typed node configs and ROS 2 params YAML files (layout, wildcards, namespaces, precedence, errors)."""

from dataclasses import dataclass

import pytest

from diffsim_ros.runtime.embedded import EmbeddedRuntime
from diffsim_ros.runtime.params import (
    ParameterError,
    declare_config,
    load_parameter_files,
    node_fqn,
    param,
    parameter_specs,
    parameters_for_node,
)

PARAMS_YAML = """
/**:
  ros__parameters:
    use_sim_time: false
    robot_config: package://diffsim_ros/config/baxter_left.yaml
controller:
  ros__parameters:
    rate_hz: 500
    gains:
      kp: [10, 20.5]
/robot/controller:
  ros__parameters:
    rate_hz: 250.0
/**/estimator:
  ros__parameters:
    window_s: 2.0
robot:
  estimator:
    ros__parameters:
      window_s: 3.0
"""


@dataclass(frozen=True)
class ControllerConfig:
    rate_hz: float = param(100.0, "command rate [Hz]")
    joints: list[str] = param([], "commanded joints, in controller order")
    kp: list[float] = param([1.0, 2.0], "stiffness [N·m/rad]", name="gains.kp")
    robot_config: str = param("", "robot config YAML")
    enabled: bool = param(True, "publish commands")
    horizon: int = param(3, "MPC horizon [steps]")

    def validate(self):
        if self.rate_hz <= 0:
            raise ValueError(f"rate_hz must be positive, got {self.rate_hz}")


@pytest.fixture
def params_file(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS_YAML)
    return path


def test_node_sections_wildcards_and_namespaces(params_file):
    root = load_parameter_files(params_file, "controller")
    assert root == {
        "use_sim_time": False,
        "robot_config": "package://diffsim_ros/config/baxter_left.yaml",
        "rate_hz": 500,
        "gains.kp": [10, 20.5],
    }
    namespaced = load_parameter_files(params_file, "controller", "/robot")
    assert namespaced["rate_hz"] == 250.0 and "gains.kp" not in namespaced  # 'controller' means /controller
    assert load_parameter_files(params_file, "estimator")["window_s"] == 2.0
    assert load_parameter_files(params_file, "estimator", "robot")["window_s"] == 3.0  # nested form, later wins
    assert "rate_hz" not in load_parameter_files(params_file, "sim_robot")
    assert node_fqn("estimator", "/") == "/estimator" and node_fqn("estimator", "robot/") == "/robot/estimator"


def test_later_files_override(tmp_path, params_file):
    second = tmp_path / "second.yaml"
    second.write_text("controller:\n  ros__parameters:\n    rate_hz: 1000\n")
    assert load_parameter_files([params_file, second], "controller")["rate_hz"] == 1000


def test_parameter_file_errors(tmp_path):
    with pytest.raises(ParameterError, match="parameter file not found"):
        load_parameter_files(tmp_path / "missing.yaml", "n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("n: [unclosed\n")
    with pytest.raises(ParameterError, match="invalid YAML in .*bad.yaml"):
        load_parameter_files(bad, "n")
    with pytest.raises(ParameterError, match="'n/rate' must map to ros__parameters"):
        parameters_for_node({"n": {"rate": 5}}, "n")
    with pytest.raises(ParameterError, match="parameter 'rate' has no value"):
        parameters_for_node({"n": {"ros__parameters": {"rate": None}}}, "n")
    assert parameters_for_node({"n": {"ros__parameters": None}}, "n") == {}


def test_specs_from_dataclass():
    specs = {spec.name: spec for spec in parameter_specs(ControllerConfig)}
    assert specs["gains.kp"].field == "kp" and specs["gains.kp"].element is float
    assert specs["rate_hz"].kind is float and specs["rate_hz"].description == "command rate [Hz]"

    @dataclass(frozen=True)
    class NoDefault:
        x: float

    @dataclass(frozen=True)
    class Unsupported:
        x: dict = param({}, "")

    with pytest.raises(ParameterError, match="needs a default"):
        parameter_specs(NoDefault)
    with pytest.raises(ParameterError, match="unsupported parameter type"):
        parameter_specs(Unsupported)


def test_declare_config_on_embedded_nodes(params_file):
    with EmbeddedRuntime(parameter_files=[params_file]) as runtime:
        handle = runtime.create_node("controller", parameter_overrides={"joints": ["left_s0"], "enabled": False})
        config = declare_config(handle, ControllerConfig)
        assert config == ControllerConfig(
            rate_hz=500.0,  # int in YAML, float parameter
            joints=["left_s0"],
            kp=[10.0, 20.5],
            robot_config="package://diffsim_ros/config/baxter_left.yaml",
            enabled=False,
            horizon=3,
        )
        assert isinstance(config.rate_hz, float) and handle.parameters["gains.kp"] == [10, 20.5]
        defaults = declare_config(runtime.create_node("other"), ControllerConfig)
        assert defaults.rate_hz == 100.0 and defaults.joints == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rate_hz": "fast"}, "node 'c': parameter 'rate_hz': expected float, got str 'fast'"),
        ({"horizon": 2.5}, "parameter 'horizon': expected int, got float"),
        ({"enabled": 1}, "parameter 'enabled': expected bool, got int"),
        ({"gains.kp": [1.0, "x"]}, r"parameter 'gains.kp'\[1\]: expected float"),
        ({"joints": "left_s0"}, "parameter 'joints': expected a list of str"),
        ({"rate_hz": -1.0}, "node 'c': invalid parameters: rate_hz must be positive"),
    ],
)
def test_declare_config_errors_name_node_and_parameter(overrides, message):
    with EmbeddedRuntime() as runtime:
        handle = runtime.create_node("c", parameter_overrides=overrides)
        with pytest.raises(ParameterError, match=message):
            declare_config(handle, ControllerConfig)


def test_undeclared_overrides_are_warned_and_double_declaration_fails():
    with EmbeddedRuntime() as runtime:
        handle = runtime.create_node("c", parameter_overrides={"rate_hzz": 5.0})
        declare_config(handle, ControllerConfig)
        with pytest.raises(ParameterError, match="declared twice"):
            handle.declare_parameter("rate_hz", 1.0)
        runtime.spin_for(0.01)
        warnings = [r.message for r in runtime.log_records if r.level == "warning"]
        assert warnings == ["parameter override 'rate_hzz' is not declared by this node (ignored)"]
