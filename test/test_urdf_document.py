"""The URDF reader (model/urdf_document.py) against yourdfpy, an independent parser, and on bad input.

Every URDF that example-robot-data ships (robots of every kind: arms, legged, humanoids, hands)
and Baxter's are read by both; every element the model uses must agree to 1e-12.
"""

import math

import numpy as np
import pytest

from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.urdf_document import read_urdf, rpy_matrix
from oracles import BAXTER_URDF, example_robot_urdf

yourdfpy = pytest.importorskip("yourdfpy")

TOL = 1e-12
ALL_URDFS = [BAXTER_URDF] + sorted(example_robot_urdf(".").rglob("*.urdf"))


def _theirs(path):
    return yourdfpy.URDF.load(str(path), build_scene_graph=False, build_collision_scene_graph=False,
                              load_meshes=False, load_collision_meshes=False)


def _same(a, b):
    return np.abs(np.asarray(a, float) - np.asarray(b, float)).max() <= TOL


def _check_inertial(ours, theirs):
    if theirs.inertial is None:
        assert ours.inertial is None
        return
    origin = np.eye(4) if theirs.inertial.origin is None else theirs.inertial.origin
    inertia = np.zeros((3, 3)) if theirs.inertial.inertia is None else theirs.inertial.inertia
    assert ours.inertial.mass == pytest.approx(theirs.inertial.mass or 0.0, abs=TOL)
    assert _same(ours.inertial.origin, origin) and _same(ours.inertial.inertia, inertia), ours.name


def _check_joint(ours, theirs):
    assert (ours.name, ours.type, ours.parent, ours.child) == (theirs.name, theirs.type, theirs.parent, theirs.child)
    assert _same(ours.origin, np.eye(4) if theirs.origin is None else theirs.origin), ours.name
    assert _same(ours.axis, (1.0, 0.0, 0.0) if theirs.axis is None else theirs.axis), ours.name
    assert ours.mimic == (theirs.mimic is not None)
    dynamics = theirs.dynamics
    assert ours.damping == (float(dynamics.damping or 0.0) if dynamics else 0.0)
    assert ours.friction == (float(dynamics.friction or 0.0) if dynamics else 0.0)
    if theirs.limit is None:
        assert ours.limit is None
    else:
        for key in ("lower", "upper", "velocity", "effort"):
            assert getattr(ours.limit, key) == getattr(theirs.limit, key), (ours.name, key)


def test_every_example_robot_urdf_is_found():
    assert len(ALL_URDFS) > 20  # the wheel's layout changed if this fails: the comparison would test nothing


@pytest.mark.parametrize("path", ALL_URDFS, ids=lambda p: p.name)
def test_the_reader_agrees_with_yourdfpy(path):
    try:
        theirs = _theirs(path)
    except Exception:  # ur3.urdf only: an empty, nameless <robot> (a stub of the xacro)
        assert path.name == "ur3.urdf"
        with pytest.raises(RobotModelError, match="has no <link> elements"):
            read_urdf(path)
        return
    ours = read_urdf(path)
    assert ours.name == theirs.robot.name
    assert [link.name for link in ours.links] == [link.name for link in theirs.robot.links]
    assert [joint.name for joint in ours.joints] == [joint.name for joint in theirs.robot.joints]
    for mine, other in zip(ours.links, theirs.robot.links):
        _check_inertial(mine, other)
    for mine, other in zip(ours.joints, theirs.robot.joints):
        _check_joint(mine, other)


def test_rpy_is_urdfs_fixed_axis_convention():
    roll, pitch, yaw = 0.3, -0.7, 1.9

    def rot(axis, angle):
        c, s = math.cos(angle), math.sin(angle)
        i, j = [k for k in range(3) if k != axis]
        m = np.eye(3)
        m[i, i], m[i, j], m[j, i], m[j, j] = c, -s, s, c
        return m if axis != 1 else m.T  # about y the sine terms sit the other way round

    assert _same(rpy_matrix(roll, pitch, yaw), rot(2, yaw) @ rot(1, pitch) @ rot(0, roll))


def _robot(body):
    return f'<robot name="r"><link name="a"/><link name="b"/>{body}</robot>'


_JOINT = '<joint name="j" type="revolute"><parent link="a"/><child link="b"/>{}</joint>'


@pytest.mark.parametrize("xml, message", [
    (_robot(_JOINT.format('<origin xyz="0 0 x"/>')), "joint 'j' <origin>: xyz='0 0 x' is not 3 finite numbers"),
    (_robot(_JOINT.format('<origin xyz="0 0"/>')), "xyz='0 0' is not 3 finite numbers"),
    (_robot(_JOINT.format('<axis xyz="0 nan 1"/>')), "joint 'j' <axis>: xyz='0 nan 1'"),
    (_robot(_JOINT.format('<limit lower="-1" upper="inf" effort="1" velocity="1"/>')), "<limit>: upper='inf'"),
    (_robot(_JOINT.format('<dynamics damping="0,5"/>')), "<dynamics>: damping='0,5' is not 1 finite number"),
    (_robot('<joint name="j" type="revolute"><parent link="a"/></joint>'), "joint 'j' has no <child link=...>"),
    (_robot('<joint name="j" type="ball"><parent link="a"/><child link="b"/></joint>'), "joint 'j' has type 'ball'"),
    ('<robot name="r"><link name="a"/><link name="a"/></robot>', "two links named 'a'"),
    ('<robot name="r"><link/></robot>', "a <link> without a name"),
    ('<robot name="r"><link name="a"><inertial><mass value="heavy"/></inertial></link></robot>',
     "link 'a' <mass>: value='heavy' is not 1 finite number"),
    ('<robot name="r"><link name="a"><inertial><inertia ixx="1" iyy="1e999"/></inertial></link></robot>',
     "link 'a' <inertia>: iyy='1e999'"),
    ('<robot name="r"><link name="a"></robot>', "malformed URDF XML"),
    ('<sdf name="r"/>', "root element is <sdf>, not <robot>"),
])
def test_bad_input_is_refused_naming_the_element_and_attribute(xml, message):
    with pytest.raises(RobotModelError) as err:
        read_urdf(xml)
    assert message in str(err.value) and "<URDF string>" in str(err.value)


def test_a_missing_file_names_the_resolved_path(tmp_path):
    with pytest.raises(RobotModelError, match="URDF file not found: .*nowhere.urdf"):
        read_urdf(tmp_path / "nowhere.urdf")


def test_defaults_of_absent_elements():
    doc = read_urdf(_robot('<joint name="j" type="continuous"><parent link="a"/><child link="b"/></joint>'))
    joint = doc.joints[0]
    assert _same(joint.origin, np.eye(4)) and _same(joint.axis, (1.0, 0.0, 0.0))
    assert (joint.limit, joint.damping, joint.friction, joint.mimic) == (None, 0.0, 0.0, False)
    assert doc.links[0].inertial is None and doc.armatures == {}
