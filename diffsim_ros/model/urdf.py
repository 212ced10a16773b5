"""URDF -> kinematic tree with fixed joints merged (numpy; no torch here).

The URDF is read by :func:`~diffsim_ros.model.urdf_document.read_urdf` (its elements as plain
records, no meshes: ``package://`` mesh references never matter). The tree is reduced to the
bodies moved by actuated joints:

* fixed joints are merged into their parent body (mass, COM and inertia combined);
* with ``tip_link``, only the movable joints on the path ``base_link -> tip_link`` stay
  actuated; movable joints branching off the chain's bodies are locked at 0 (clamped into
  their limits) and merged like fixed joints, as Pinocchio's ``buildReducedModel`` does;
  subtrees hanging off the (fixed) base are dropped because they cannot move the chain;
* without ``tip_link``, every movable joint below ``base_link`` is actuated (branched trees).
"""

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.inertia import combine_inertials, is_physically_consistent

__all__ = ["JointDescription", "FrameDescription", "TreeDescription", "UrdfTree", "describe_tree"]

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


def _link_inertial(link):
    """(mass, com (3,), inertia about COM in link axes (3,3), explicit) of a :class:`UrdfLink`."""
    inertial = link.inertial
    if inertial is None:
        return 0.0, np.zeros(3), np.zeros((3, 3)), False
    rot = inertial.origin[:3, :3]
    return inertial.mass, inertial.origin[:3, 3].copy(), rot @ inertial.inertia @ rot.T, True


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


class UrdfTree:
    """Parent/child maps of a URDF (a :class:`~diffsim_ros.model.urdf_document.UrdfDocument`) with its
    structural errors checked: ``links`` (name -> link), ``children`` (link -> joints below it),
    ``parent_joint`` (link -> the joint above it) and the one ``root`` link."""

    def __init__(self, urdf):
        self.links = {link.name: link for link in urdf.links}
        self.joints = list(urdf.joints)
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
    axis = joint.axis / np.linalg.norm(joint.axis)
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
    if joint.mimic:
        raise RobotModelError(f"joint '{joint.name}' is a mimic joint; mimic joints are not supported")
    axis = joint.axis
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
        damping=joint.damping,
        friction=joint.friction,
        body=joint.child,
    )


def describe_tree(urdf, base_link=None, tip_link=None):
    """Reduce a parsed URDF to actuated joints and merged bodies.

    Args:
        urdf: :class:`~diffsim_ros.model.urdf_document.UrdfDocument`; the armatures of joints the
            model locks or drops are left out (a locked joint's rotor never accelerates).
        base_link: Link fixed to the world; default the URDF root.
        tip_link: Last link of a serial sub-chain; default: the whole tree below ``base_link``.

    Returns:
        TreeDescription.

    Raises:
        RobotModelError: Unknown links, tip not below base, loops, unsupported joints on the
            chain, invalid inertials, or a joint that moves no mass.
    """
    tree = UrdfTree(urdf)
    base = tree.root if base_link is None else base_link
    for role, name in (("base_link", base), ("tip_link", tip_link)):
        if name is not None and name not in tree.links:
            raise RobotModelError(
                f"unknown {role} '{name}'; links in '{urdf.name}': {sorted(tree.links)}"
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
            origin = placement @ joint.origin
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
    _set_armatures(joints, urdf.armatures)
    return TreeDescription(urdf.name, base, tip_link, joints, frames)


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
