"""Launch files and node parameter files, checked without ROS.

Launch files are parsed with ``ast`` (launch/launch_ros need a ROS installation): each defines
``generate_launch_description``, declares its arguments with ``DeclareLaunchArgument`` and
starts only executables that setup.py installs. Parameter files have one ``ros__parameters``
block per node, and every parameter in them is declared by that node with a matching type.
"""

import ast

import pytest
import yaml

from diffsim_ros.nodes.controller_node import ControllerNodeConfig
from diffsim_ros.nodes.estimator_node import EstimatorNodeConfig
from diffsim_ros.nodes.sim_robot_node import SimRobotConfig
from diffsim_ros.runtime.params import _flatten, coerce_parameter, parameter_specs
from oracles import REPO

LAUNCH_FILES = sorted((REPO / "launch").glob("*.launch.py"))
PARAMS_FILES = sorted((REPO / "config").glob("*.params.yaml"))
NODE_CONFIGS = {"sim_robot": SimRobotConfig, "estimator": EstimatorNodeConfig, "controller": ControllerNodeConfig}
RUNTIME_PARAMETERS = {"use_sim_time"}  # declared by every node's runtime


def calls(tree, name):
    """Every call of ``name(...)`` (plain or attribute) in a module."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]


def keyword(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def console_scripts():
    tree = ast.parse((REPO / "setup.py").read_text())
    for call in calls(tree, "setup"):
        scripts = ast.literal_eval(keyword(call, "entry_points"))["console_scripts"]
        return {line.split("=")[0].strip() for line in scripts}


def test_the_three_launch_files_exist():
    assert [p.name for p in LAUNCH_FILES] == ["baxter.launch.py", "baxter_sim.launch.py", "generic.launch.py"]


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_defines_generate_launch_description(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    assert ast.get_docstring(tree)  # how to launch it
    arguments = [ast.literal_eval(c.args[0]) for c in calls(tree, "DeclareLaunchArgument")]
    assert arguments and len(arguments) == len(set(arguments))
    nodes = calls(tree, "Node")
    assert nodes
    for node in nodes:
        assert ast.literal_eval(keyword(node, "package")) == "diffsim_ros"
        assert ast.literal_eval(keyword(node, "executable")) in console_scripts()
    # Default parameter files are the package's own.
    for name in {c.args[-1].value for c in calls(tree, "join") if isinstance(c.args[-1], ast.Constant)}:
        if name.endswith(".yaml"):
            assert (REPO / "config" / name).is_file()


def test_baxter_launch_chooses_the_side():
    tree = ast.parse((REPO / "launch" / "baxter.launch.py").read_text())
    (side,) = [c for c in calls(tree, "DeclareLaunchArgument") if ast.literal_eval(c.args[0]) == "side"]
    assert ast.literal_eval(keyword(side, "choices")) == ["left", "right"]
    executables = {ast.literal_eval(keyword(n, "executable")) for n in calls(tree, "Node")}
    assert executables == {"estimator_node", "controller_node"}  # the real robot, no simulator


def node_config(key):
    """Config class of a params-file node key (``controller``, ``/**/controller``, ...)."""
    return NODE_CONFIGS[key.rsplit("/", 1)[-1]]


@pytest.mark.parametrize("path", PARAMS_FILES, ids=lambda p: p.name)
def test_params_file_blocks_are_declared_node_parameters(path):
    document = yaml.safe_load(path.read_text())
    assert document
    for key, block in document.items():
        assert list(block) == ["ros__parameters"], f"{path.name}: {key} must hold exactly one ros__parameters block"
        flat = {}
        _flatten(block["ros__parameters"], "", flat, path.name)
        specs = {spec.name: spec for spec in parameter_specs(node_config(key))}
        unknown = set(flat) - set(specs) - RUNTIME_PARAMETERS
        assert not unknown, f"{path.name}: {key} sets undeclared parameters {sorted(unknown)}"
        for name, value in flat.items():
            if name in specs:
                coerce_parameter(specs[name], value, f"{path.name}: {key}.{name}")
