"""Launch files and node parameter files, checked without ROS.

launch/launch_ros are not on the package index, so launch files are kept thin and parsed
with ``ast``: each defines ``generate_launch_description``, declares its arguments with
``DeclareLaunchArgument``, starts only executables that setup.py declares and that are
installed, and every parameter it passes a node (dict literals, directly or through a
variable) and every remapping is one that node declares or uses. Parameter files have one
``ros__parameters`` block per node, and every parameter in them is declared by that node with
a matching type.
"""

import ast
import inspect
import sys
from pathlib import Path

import pytest
import yaml

from diffsim_ros.nodes import controller_node, estimator_node, object_estimator_node, sim_robot_node
from diffsim_ros.nodes.controller_node import ControllerNodeConfig
from diffsim_ros.nodes.estimator_node import EstimatorNodeConfig
from diffsim_ros.nodes.object_estimator_node import ObjectEstimatorNodeConfig
from diffsim_ros.nodes.sim_robot_node import SimRobotConfig
from diffsim_ros.runtime.params import _flatten, coerce_parameter, parameter_specs
from oracles import REPO

LAUNCH_FILES = sorted((REPO / "launch").glob("*.launch.py"))
PARAMS_FILES = sorted((REPO / "config").glob("*.params.yaml"))
NODE_CONFIGS = {"sim_robot": SimRobotConfig, "estimator": EstimatorNodeConfig, "controller": ControllerNodeConfig}
RUNTIME_PARAMETERS = {"use_sim_time", "autostart"}  # declared by the runtime (autostart: lifecycle nodes)
EXECUTABLES = {"sim_robot_node": (SimRobotConfig, sim_robot_node), "estimator_node": (EstimatorNodeConfig, estimator_node),
               "controller_node": (ControllerNodeConfig, controller_node),
               "object_estimator_node": (ObjectEstimatorNodeConfig, object_estimator_node)}


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


def test_the_launch_files_exist():
    assert [p.name for p in LAUNCH_FILES] == ["baxter.launch.py", "baxter_sim.launch.py", "generic.launch.py",
                                              "objects.launch.py"]


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


def assignments(function):
    """Variable name -> value node of the simple assignments in a function body."""
    return {t.id: n.value for n in ast.walk(function) if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name)}


def parameter_keys(expression, names):
    """Parameter names a ``parameters=[...]`` element passes: dict keys, through variables and ``{**a, ...}``."""
    if isinstance(expression, ast.Name) and expression.id in names:
        return parameter_keys(names[expression.id], names)
    if isinstance(expression, ast.Dict):
        keys = set()
        for key, value in zip(expression.keys, expression.values):
            keys |= parameter_keys(value, names) if key is None else {ast.literal_eval(key)}
        return keys
    if isinstance(expression, ast.List):
        return set().union(*(parameter_keys(e, names) for e in expression.elts)) if expression.elts else set()
    return set()  # a params file (LaunchConfiguration): checked by the params-file test


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_parameters_and_remappings_are_the_nodes_own(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description"]
    names = assignments(function)
    for node in calls(function, "Node"):
        executable = ast.literal_eval(keyword(node, "executable"))
        config, module = EXECUTABLES[executable]
        declared = {spec.name for spec in parameter_specs(config)} | RUNTIME_PARAMETERS
        passed = parameter_keys(keyword(node, "parameters"), names) if keyword(node, "parameters") else set()
        assert passed, f"{path.name}: {executable} gets no parameters"
        unknown = passed - declared
        assert not unknown, f"{path.name}: {executable} is passed undeclared parameters {sorted(unknown)}"
        remappings = keyword(node, "remappings")
        for source, _ in (ast.literal_eval(remappings) if remappings is not None else ()):
            assert repr(source) in inspect.getsource(module) or f'"{source}"' in inspect.getsource(module), \
                f"{path.name}: {executable} remaps {source}, a name it does not use"


@pytest.mark.parametrize("executable", sorted(EXECUTABLES))
def test_node_executables_are_installed(executable):
    assert executable in console_scripts()
    assert (Path(sys.executable).parent / executable).is_file(), f"{executable} not installed beside {sys.executable}"


def test_sim_launch_defaults_to_standard_messages():
    tree = ast.parse((REPO / "launch" / "baxter_sim.launch.py").read_text())
    (output,) = [c for c in calls(tree, "DeclareLaunchArgument") if ast.literal_eval(c.args[0]) == "output"]
    assert ast.literal_eval(keyword(output, "default_value")) == "ros2_control"  # runs without baxter_core_msgs
    assert ast.literal_eval(keyword(output, "choices")) == ["ros2_control", "baxter"]
