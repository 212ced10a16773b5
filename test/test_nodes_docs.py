"""docs/ros_interface.md lists every parameter of every node with its real default."""

import re

import pytest
import yaml

from diffsim_ros.nodes.controller_node import ControllerNodeConfig
from diffsim_ros.nodes.estimator_node import EstimatorNodeConfig
from diffsim_ros.nodes.sim_robot_node import SimRobotConfig
from diffsim_ros.runtime.params import parameter_specs
from oracles import REPO

DOC = REPO / "docs" / "ros_interface.md"
NODES = {"estimator_node": EstimatorNodeConfig, "controller_node": ControllerNodeConfig, "sim_robot_node": SimRobotConfig}
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| `(?P<default>[^`]*)` \|", re.MULTILINE)


def documented_parameters(node):
    """name -> default of the parameter table in the node's section."""
    text = DOC.read_text()
    section = text.split(f"\n## {node}\n", 1)[1].split("\n## ", 1)[0]
    return {m["name"]: yaml.safe_load(m["default"]) for m in ROW.finditer(section)}


@pytest.mark.parametrize("node", sorted(NODES))
def test_every_parameter_is_documented_with_its_default(node):
    documented = documented_parameters(node)
    specs = parameter_specs(NODES[node])
    assert list(documented) == [spec.name for spec in specs]
    for spec in specs:
        default = list(spec.default) if spec.element is not None else spec.default
        assert documented[spec.name] == ("" if default == "" else default), spec.name


def test_the_bridge_note_is_there():
    assert "SAFE_CMD=False" in DOC.read_text()
