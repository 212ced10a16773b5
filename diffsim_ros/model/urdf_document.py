"""A URDF file's elements as plain records, parsed strictly with lxml (numpy; no meshes, no scene).

Only what the model needs is read: the robot's name, each link's ``<inertial>``, each joint's
type, parent, child, ``<origin>``, ``<axis>``, ``<limit>``, ``<dynamics>`` and whether it is a
``<mimic>``, and Drake's ``<drake:rotor_inertia>``/``<drake:gear_ratio>`` in a ``<transmission>``
(the armature, which URDF itself has no field for). Geometry, meshes and ``package://`` paths
are never touched. A number that does not parse, or is not finite, is an error naming the
element and the attribute: nothing is "recovered" silently.

Units as in URDF: metres, radians, kilograms, kg·m².
"""

import math
import os
from dataclasses import dataclass

import numpy as np
from lxml import etree

from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.resources import describe_path

__all__ = ["DRAKE_NAMESPACE", "UrdfDocument", "UrdfInertial", "UrdfJoint", "UrdfLimit", "UrdfLink", "read_urdf",
           "rpy_matrix"]

DRAKE_NAMESPACE = "http://drake.mit.edu"
"""Namespace of Drake's URDF extensions; its ``drake:rotor_inertia`` and ``drake:gear_ratio``
(in a ``<transmission>``'s ``<actuator>``) carry the armature URDF itself has no field for."""


@dataclass(frozen=True)
class UrdfInertial:
    mass: float  # [kg]
    origin: np.ndarray  # (4, 4) COM frame in the link frame
    inertia: np.ndarray  # (3, 3) [kg·m²] about the COM, in the COM frame's axes


@dataclass(frozen=True)
class UrdfLink:
    name: str
    inertial: UrdfInertial | None


@dataclass(frozen=True)
class UrdfLimit:
    lower: float | None  # [rad or m]
    upper: float | None
    velocity: float | None  # [rad/s or m/s]
    effort: float | None  # [N·m or N]


@dataclass(frozen=True)
class UrdfJoint:
    name: str
    type: str  # as written: revolute, continuous, prismatic, fixed, floating, planar
    parent: str
    child: str
    origin: np.ndarray  # (4, 4) joint frame in the parent link frame
    axis: np.ndarray  # (3,) in the joint frame, as written (not normalised)
    limit: UrdfLimit | None
    damping: float  # [N·m·s/rad or N·s/m] <dynamics damping>, 0 when absent
    friction: float  # [N·m or N] <dynamics friction>, 0 when absent
    mimic: bool


@dataclass(frozen=True)
class UrdfDocument:
    """A parsed URDF: ``links`` and ``joints`` in document order, ``armatures`` joint -> [kg·m² or kg]."""

    name: str
    source: str
    links: tuple
    joints: tuple
    armatures: dict


def rpy_matrix(roll, pitch, yaw):
    """(3, 3) rotation of URDF's fixed-axis roll, pitch, yaw [rad]: ``Rz(yaw) Ry(pitch) Rx(roll)``."""
    cr, sr, cp, sp, cy, sy = math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch), math.cos(yaw), math.sin(yaw)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _numbers(element, key, count, where, default=None):
    """``count`` finite numbers of attribute ``key`` (a tuple), or ``default`` when it is absent."""
    raw = None if element is None else element.get(key)
    if raw is None:
        return default
    try:
        values = tuple(float(x) for x in raw.split())
    except ValueError:
        values = ()
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise RobotModelError(f"{where}: {key}={raw!r} is not {count} finite number{'s' if count > 1 else ''}")
    return values


def _number(element, key, where, default=None):
    got = _numbers(element, key, 1, where)
    return default if got is None else got[0]


def _origin(element, where):
    """(4, 4) transform of an ``<origin>`` child of ``element`` (identity when absent)."""
    origin = element.find("origin")
    out = np.eye(4)
    if origin is not None:
        out[:3, :3] = rpy_matrix(*_numbers(origin, "rpy", 3, f"{where} <origin>", (0.0, 0.0, 0.0)))
        out[:3, 3] = _numbers(origin, "xyz", 3, f"{where} <origin>", (0.0, 0.0, 0.0))
    return out


def _inertial(link, where):
    inertial = link.find("inertial")
    if inertial is None:
        return None
    mass = _number(inertial.find("mass"), "value", f"{where} <mass>", 0.0)
    tensor = inertial.find("inertia")
    keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    ixx, ixy, ixz, iyy, iyz, izz = (_number(tensor, k, f"{where} <inertia>", 0.0) for k in keys)
    inertia = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    return UrdfInertial(mass, _origin(inertial, f"{where} <inertial>"), inertia)


_JOINT_TYPES = ("revolute", "continuous", "prismatic", "fixed", "floating", "planar")


def _joint(element, source):
    name = element.get("name")
    where = f"{source}: joint '{name}'"
    if element.get("type") not in _JOINT_TYPES:
        raise RobotModelError(f"{where} has type {element.get('type')!r}; URDF's types: {', '.join(_JOINT_TYPES)}")
    ends = {}
    for end in ("parent", "child"):
        link = element.find(end)
        ends[end] = None if link is None else link.get("link")
        if not ends[end]:
            raise RobotModelError(f"{where} has no <{end} link=...>")
    limit = element.find("limit")
    if limit is not None:
        limit = UrdfLimit(*(_number(limit, k, f"{where} <limit>") for k in ("lower", "upper", "velocity", "effort")))
    dynamics = element.find("dynamics")
    return UrdfJoint(
        name=name, type=element.get("type"), parent=ends["parent"], child=ends["child"], origin=_origin(element, where),
        axis=np.array(_numbers(element.find("axis"), "xyz", 3, f"{where} <axis>", (1.0, 0.0, 0.0))), limit=limit,
        damping=_number(dynamics, "damping", f"{where} <dynamics>", 0.0),
        friction=_number(dynamics, "friction", f"{where} <dynamics>", 0.0), mimic=element.find("mimic") is not None)


def _drake_value(actuator, key, where):
    element = actuator.find(f"{{{DRAKE_NAMESPACE}}}{key}")
    if element is None:
        return None
    try:
        value = float(element.get("value"))
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise RobotModelError(f"{where}: drake:{key} value must be a finite number >= 0, got {element.get('value')!r}")
    return value


def _armatures(root, source):
    """Joint -> ``rotor_inertia * gear_ratio²`` of each ``<transmission>`` naming one joint (as Drake reflects it)."""
    out = {}
    for transmission in root.findall("transmission"):
        joints = [j.get("name") for j in transmission.findall("joint")]
        for actuator in transmission.findall("actuator"):
            where = f"{source}: transmission '{transmission.get('name')}'"
            inertia = _drake_value(actuator, "rotor_inertia", where)
            if inertia is None:
                continue
            if len(joints) != 1:
                raise RobotModelError(f"{where}: a drake:rotor_inertia needs exactly one joint, got {joints}")
            if joints[0] in out:
                raise RobotModelError(f"{where}: joint '{joints[0]}' has two rotor inertias")
            ratio = _drake_value(actuator, "gear_ratio", where)
            out[joints[0]] = inertia * (1.0 if ratio is None else ratio) ** 2
    return out


def _document(path_or_xml):
    """``(source name, lxml root)`` of a URDF path or XML string (bytes or str), parsed strictly."""
    if isinstance(path_or_xml, bytes):
        text, source = path_or_xml, "<URDF string>"
    elif isinstance(path_or_xml, str) and path_or_xml.lstrip().startswith("<"):
        text, source = path_or_xml.encode(), "<URDF string>"
    else:
        source = os.fspath(path_or_xml)
        if not os.path.isfile(source):
            raise RobotModelError(f"URDF file not found: {describe_path(source)}")
        with open(source, "rb") as handle:
            text = handle.read()
    try:
        root = etree.fromstring(text, parser=etree.XMLParser(remove_blank_text=True))
    except etree.XMLSyntaxError as err:
        raise RobotModelError(f"malformed URDF XML in {source}: {err}") from None
    if root.tag != "robot":
        raise RobotModelError(f"{source} is not a URDF: root element is <{root.tag}>, not <robot>")
    return source, root


def read_urdf(path_or_xml):
    """Parse a URDF file path or XML string (str or bytes).

    Returns:
        UrdfDocument.

    Raises:
        RobotModelError: Missing file, malformed XML, not a ``<robot>``, no links, an unnamed or
            duplicate link or joint, a joint without parent or child, or a number that does not parse.
    """
    source, root = _document(path_or_xml)
    links, joints = [], []
    for kind, out, make in (("link", links, None), ("joint", joints, _joint)):
        seen = set()
        for element in root.findall(kind):
            name = element.get("name")
            if not name:
                raise RobotModelError(f"{source}: a <{kind}> without a name")
            if name in seen:
                raise RobotModelError(f"{source}: two {kind}s named '{name}'")
            seen.add(name)
            out.append(make(element, source) if make else UrdfLink(name, _inertial(element, f"{source}: link '{name}'")))
    if not links:
        raise RobotModelError(f"{source}: the <robot> has no <link> elements (an unexpanded xacro?)")
    return UrdfDocument(root.get("name") or "robot", source, tuple(links), tuple(joints), _armatures(root, source))
