"""URDF -> kinematic tree with fixed joints merged (numpy; no torch here).

The URDF is read with yourdfpy, without meshes: ``package://`` mesh references that do not
exist never matter. The tree is reduced to the bodies moved by actuated joints:

* fixed joints are merged into their parent body (mass, COM and inertia combined);
* with ``tip_link``, only the movable joints on the path ``base_link -> tip_link`` stay
  actuated; movable joints branching off the chain's bodies are locked at 0 (clamped into
  their limits) and merged like fixed joints, as Pinocchio's ``buildReducedModel`` does;
  subtrees hanging off the (fixed) base are dropped because they cannot move the chain;
* without ``tip_link``, every movable joint below ``base_link`` is actuated (branched trees).
"""

import io
import logging
import math
import os
from dataclasses import dataclass, field

import numpy as np
from lxml import etree

from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.inertia import combine_inertials, is_physically_consistent
from diffsim_ros.resources import describe_path

__all__ = ["DRAKE_NAMESPACE", "JointDescription", "FrameDescription", "TreeDescription", "read_armatures", "read_urdf",
           "describe_tree"]

_LOG = logging.getLogger(__name__)

REVOLUTE = 0
PRISMATIC = 1
_MOVABLE = {"revolute": REVOLUTE, "continuous": REVOLUTE, "prismatic": PRISMATIC}


@dataclass
class JointDescription:
    """One actuated joint and the body it moves (its child link plus merged links)."""

    name: str
    type: int  # REVOLUTE or PRISMATIC
    continuous: bool
    parent: int  # index of the parent body, -1 for the fixed base
    origin: np.ndarray  # (4, 4) joint frame in the parent body frame at q = 0
    axis: np.ndarray  # (3,) unit axis in the joint (= child body) frame
    lower: float
    upper: float
    velocity_limit: float
    effort_limit: float
    damping: float
    friction: float
    body: str  # child link name, the body frame
    mass: float = 0.0
    com: np.ndarray = field(default_factory=lambda: np.zeros(3))
    inertia: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))
    merged_links: list = field(default_factory=list)
    armature: float = 0.0  # [kg·m² or kg] reflected rotor inertia (read_armatures)


@dataclass
class FrameDescription:
    """A URDF link kept in the model: the body it belongs to and its fixed placement there."""

    name: str
    body: int  # -1: rigidly attached to the base
    placement: np.ndarray  # (4, 4) link frame in the body frame


@dataclass
class TreeDescription:
    """Reduced kinematic tree: actuated joints in depth-first order plus all kept frames."""

    robot_name: str
    base_link: str
    tip_link: str | None
    joints: list
    frames: dict


def _urdf_document(path_or_xml):
    """``(text bytes, source name, lxml root)`` of a URDF path or XML string, parsed strictly.

    Raises:
        RobotModelError: Missing file, malformed XML, or a document that is not a URDF robot.
    """
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
    # yourdfpy silently "recovers" broken XML; parse strictly first so the user hears of it.
    try:
        root = etree.fromstring(text, parser=etree.XMLParser(remove_blank_text=True))
    except etree.XMLSyntaxError as err:
        raise RobotModelError(f"malformed URDF XML in {source}: {err}") from None
    if root.tag != "robot":
        raise RobotModelError(f"{source} is not a URDF: root element is <{root.tag}>, not <robot>")
    return text, source, root


def read_urdf(path_or_xml):
    """Parse a URDF file path or XML string with yourdfpy (meshes never loaded).

    Args:
        path_or_xml: Path to a ``.urdf`` file, or the URDF XML itself as a string or bytes.

    Returns:
        ``yourdfpy.URDF`` without scene graph or meshes.

    Raises:
        RobotModelError: Missing file, malformed XML, or a document that is not a URDF robot.
    """
    import yourdfpy  # imported here: it pulls trimesh, only needed when parsing

    text, source, _ = _urdf_document(path_or_xml)
    try:
        return yourdfpy.URDF.load(
            io.BytesIO(text),
            build_scene_graph=False,
            build_collision_scene_graph=False,
            load_meshes=False,
            load_collision_meshes=False,
        )
    except Exception as err:  # yourdfpy raises assorted types on bad attribute values
        raise RobotModelError(f"invalid URDF in {source}: {err}") from None


DRAKE_NAMESPACE = "http://drake.mit.edu"
"""Namespace of Drake's URDF extensions; its ``drake:rotor_inertia`` and ``drake:gear_ratio``
(in a ``<transmission>``'s ``<actuator>``) carry the armature URDF itself has no field for."""


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


def read_armatures(path_or_xml):
    """Armature (reflected rotor inertia) per joint from Drake's transmission extension.

    A ``<transmission>`` naming one joint whose ``<actuator>`` has ``<drake:rotor_inertia
    value="I"/>`` (and optionally ``<drake:gear_ratio value="G"/>``, default 1) gives the joint
    ``I G²`` [kg·m² or kg], as Drake reflects it.

    Returns:
        Dict joint name -> armature; joints without one are absent.

    Raises:
        RobotModelError: A malformed value, or two armatures for one joint.
    """
    _, source, root = _urdf_document(path_or_xml)
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


def _link_inertial(link):
    """(mass, com (3,), inertia about COM in link axes (3,3), explicit) of a yourdfpy link."""
    inertial = link.inertial
    if inertial is None:
        return 0.0, np.zeros(3), np.zeros((3, 3)), False
    origin = np.eye(4) if inertial.origin is None else np.asarray(inertial.origin, dtype=float)
    mass = 0.0 if inertial.mass is None else float(inertial.mass)
    inertia = np.zeros((3, 3)) if inertial.inertia is None else np.asarray(inertial.inertia, float)
    rot = origin[:3, :3]
    return mass, origin[:3, 3].copy(), rot @ inertia @ rot.T, True


def _check_link_inertial(name, mass, inertia):
    """Reject a link inertial that no physical body can have."""
    if not math.isfinite(mass) or not np.all(np.isfinite(inertia)):
        raise RobotModelError(f"link '{name}' has a non-finite mass or inertia")
    if mass < 0.0:
        raise RobotModelError(f"link '{name}' has negative mass {mass} kg")
    if mass == 0.0:
        if np.any(inertia != 0.0):
            raise RobotModelError(f"link '{name}' has zero mass but a nonzero inertia")
        return  # the usual idiom for a massless frame link (tool0, ee_link, ...)
    smallest = np.linalg.eigvalsh(0.5 * (inertia + inertia.T)).min()
    if smallest <= 0.0:
        raise RobotModelError(
            f"link '{name}' has mass {mass} kg but an inertia that is not positive definite "
            f"(smallest principal moment {smallest:.3e} kg·m²)"
        )
    if not is_physically_consistent(mass, inertia, tol=1e-9):
        _LOG.warning("link '%s': principal moments violate the triangle inequality", name)


class _Tree:
    """Parent/child maps of a URDF with its structural errors checked."""

    def __init__(self, urdf):
        self.links = {link.name: link for link in urdf.robot.links}
        self.joints = list(urdf.robot.joints)
        self.parent_joint = {}
        self.children = {name: [] for name in self.links}
        for joint in self.joints:
            for end in (joint.parent, joint.child):
                if end not in self.links:
                    raise RobotModelError(f"joint '{joint.name}' refers to unknown link '{end}'")
            if joint.child in self.parent_joint:
                other = self.parent_joint[joint.child].name
                raise RobotModelError(
                    f"closed kinematic loop: link '{joint.child}' is the child of both joint "
                    f"'{other}' and joint '{joint.name}'; URDF describes trees only"
                )
            self.parent_joint[joint.child] = joint
            self.children[joint.parent].append(joint)
        roots = [name for name in self.links if name not in self.parent_joint]
        if not roots:
            raise RobotModelError("closed kinematic loop: every link has a parent joint")
        reachable = set(self._walk(roots[0]))
        for extra in roots[1:]:
            reachable |= set(self._walk(extra))
        missing = sorted(set(self.links) - reachable)
        if missing:
            raise RobotModelError(f"closed kinematic loop through links {missing}")
        if len(roots) > 1:
            raise RobotModelError(f"URDF has several root links {roots}; expected one tree")
        self.root = roots[0]

    def _walk(self, start):
        stack = [start]
        while stack:
            name = stack.pop()
            yield name
            stack.extend(j.child for j in reversed(self.children[name]))

    def path_to(self, base, tip):
        """Joints on the path base -> tip, or None when tip is not below base."""
        path = []
        link = tip
        while link != base:
            joint = self.parent_joint.get(link)
            if joint is None:
                return None
            path.append(joint)
            link = joint.parent
        return path[::-1]


def _joint_motion(joint, value):
    """Homogeneous transform of a movable joint at a locked position (joint frame axes)."""
    if joint.type not in _MOVABLE:
        return np.eye(4)
    axis = np.asarray(joint.axis if joint.axis is not None else (1.0, 0.0, 0.0), dtype=float)
    axis = axis / np.linalg.norm(axis)
    motion = np.eye(4)
    if joint.type == "prismatic":
        motion[:3, 3] = axis * value
    elif joint.type in ("revolute", "continuous"):
        k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        motion[:3, :3] = np.eye(3) + math.sin(value) * k + (1 - math.cos(value)) * k @ k
    return motion


def _locked_value(joint):
    """Where an unactuated movable joint is locked: 0 clamped into its limits."""
    limit = joint.limit
    if joint.type == "continuous" or limit is None:
        return 0.0
    lower = -math.inf if limit.lower is None else limit.lower
    upper = math.inf if limit.upper is None else limit.upper
    return min(max(0.0, lower), upper)


def _actuated_description(joint, parent, origin):
    """JointDescription of a movable URDF joint (without its body inertial yet)."""
    if joint.type not in _MOVABLE:
        raise RobotModelError(
            f"joint '{joint.name}' has unsupported type '{joint.type}' "
            "(supported: revolute, continuous, prismatic, fixed)"
        )
    if joint.mimic is not None:
        raise RobotModelError(f"joint '{joint.name}' is a mimic joint; mimic joints are not supported")
    axis = np.asarray(joint.axis if joint.axis is not None else (1.0, 0.0, 0.0), dtype=float)
    norm = np.linalg.norm(axis)
    if not norm > 1e-12:
        raise RobotModelError(f"joint '{joint.name}' has a zero axis")
    limit = joint.limit
    continuous = joint.type == "continuous"

    def value(attr, default):
        got = None if limit is None else getattr(limit, attr)
        return default if got is None else float(got)

    lower, upper = (-math.inf, math.inf) if continuous else (value("lower", 0.0), value("upper", 0.0))
    if not continuous and lower > upper:
        raise RobotModelError(f"joint '{joint.name}' has lower limit {lower} > upper limit {upper}")
    dynamics = joint.dynamics
    return JointDescription(
        name=joint.name,
        type=_MOVABLE[joint.type],
        continuous=continuous,
        parent=parent,
        origin=origin,
        axis=axis / norm,
        lower=lower,
        upper=upper,
        velocity_limit=value("velocity", math.inf) or math.inf,
        effort_limit=value("effort", math.inf) or math.inf,
        damping=float(dynamics.damping or 0.0) if dynamics is not None else 0.0,
        friction=float(dynamics.friction or 0.0) if dynamics is not None else 0.0,
        body=joint.child,
    )


def describe_tree(urdf, base_link=None, tip_link=None, armatures=None):
    """Reduce a parsed URDF to actuated joints and merged bodies.

    Args:
        urdf: ``yourdfpy.URDF`` from :func:`read_urdf`.
        base_link: Link fixed to the world; default the URDF root.
        tip_link: Last link of a serial sub-chain; default: the whole tree below ``base_link``.
        armatures: Joint name -> armature (:func:`read_armatures`); those of joints the model
            locks or drops are left out (a locked joint's rotor never accelerates).

    Returns:
        TreeDescription.

    Raises:
        RobotModelError: Unknown links, tip not below base, loops, unsupported joints on the
            chain, invalid inertials, or a joint that moves no mass.
    """
    tree = _Tree(urdf)
    base = tree.root if base_link is None else base_link
    for role, name in (("base_link", base), ("tip_link", tip_link)):
        if name is not None and name not in tree.links:
            raise RobotModelError(
                f"unknown {role} '{name}'; links in '{urdf.robot.name}': {sorted(tree.links)}"
            )
    chain = None
    if tip_link is not None:
        path = tree.path_to(base, tip_link)
        if path is None:
            raise RobotModelError(f"tip_link '{tip_link}' is not below base_link '{base}'")
        chain = {j.name for j in path if j.type != "fixed"}

    joints, frames = [], {}
    # Depth-first walk over (link, body index, link frame in body frame).
    stack = [(base, -1, np.eye(4))]
    while stack:
        link_name, body, placement = stack.pop()
        frames[link_name] = FrameDescription(link_name, body, placement)
        pending = []
        for joint in tree.children[link_name]:
            origin = placement @ np.asarray(joint.origin if joint.origin is not None else np.eye(4))
            movable = joint.type != "fixed"
            if movable and (chain is None or joint.name in chain):
                joints.append(_actuated_description(joint, body, origin))
                pending.append((joint.child, len(joints) - 1, np.eye(4)))
            elif movable and body == -1:
                continue  # a movable branch off the fixed base cannot affect the chain
            else:
                locked = origin @ _joint_motion(joint, _locked_value(joint))
                pending.append((joint.child, body, locked))
        stack.extend(reversed(pending))

    _merge_inertials(tree, joints, frames)
    _set_armatures(joints, armatures or {})
    return TreeDescription(urdf.robot.name, base, tip_link, joints, frames)


def _set_armatures(joints, armatures):
    for joint in joints:
        joint.armature = float(armatures.get(joint.name, 0.0))


def _merge_inertials(tree, joints, frames):
    """Accumulate the inertials of all frames into their bodies and check them."""
    parts = {i: [] for i in range(len(joints))}
    for frame in frames.values():
        if frame.body < 0:
            continue
        mass, com, inertia, explicit = _link_inertial(tree.links[frame.name])
        if explicit:
            _check_link_inertial(frame.name, mass, inertia)
        rot, pos = frame.placement[:3, :3], frame.placement[:3, 3]
        parts[frame.body].append((mass, rot @ com + pos, rot @ inertia @ rot.T))
        joints[frame.body].merged_links.append(frame.name)
    for index, joint in enumerate(joints):
        masses, coms, inertias = zip(*parts[index])
        joint.mass, joint.com, joint.inertia = combine_inertials(masses, coms, inertias)
    subtree_mass = [j.mass for j in joints]
    for index in reversed(range(len(joints))):
        parent = joints[index].parent
        if parent >= 0:
            subtree_mass[parent] += subtree_mass[index]
    for joint, moved in zip(joints, subtree_mass):
        if not moved > 0.0:
            raise RobotModelError(
                f"joint '{joint.name}' moves no mass (body '{joint.body}' and everything below "
                "it are massless); the mass matrix would be singular"
            )
