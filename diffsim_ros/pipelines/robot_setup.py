"""A robot config from a URDF and a bag: the chain, the topics and the command's joint order.

What ``diffsim-ros init`` does, as functions:

* :func:`propose_chain` — base and tip links, proposed when not given: the URDF's root, and the
  end of the serial chain of movable joints below it. Where the chain branches into several
  subtrees with movable joints, it is ambiguous and the error lists the candidate tips, unless
  every branch is a single movable joint (a gripper's fingers): then the tip is the branch
  link and the fingers are locked at 0 and merged (said in the notes).
* :func:`bag_streams` — the joint-state and command topics of a bag and their types, checked
  against the chain (the joint-state topic that names its joints; a JointCommand's names, or a
  Float64MultiArray's length).
* :func:`controllers_joints` — a ros2_control controller's ``joints`` from its controllers YAML.
* :func:`config_text` and :func:`write_config` — the commented config, validated by loading it
  (and reading the bag with it) before it is written atomically.

Every guess is returned as a note for the user; what cannot be decided is a named error.
"""

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from diffsim_ros.io.bags import BagError, BagTopics, bag_info, iter_bag, read_robot_bag
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE, POSE_STAMPED
from diffsim_ros.model import RobotModel, RobotModelError, load_robot_config
from diffsim_ros.model.config import controller_order
from diffsim_ros.model.config_schema import default_value
from diffsim_ros.model.urdf import UrdfTree
from diffsim_ros.model.urdf_document import read_urdf
from diffsim_ros.outputs import atomic_write_text

__all__ = ["BagStreams", "ChainProposal", "bag_streams", "check_controller_joints", "config_text", "controllers_joints",
           "propose_chain", "write_config"]


@dataclass
class ChainProposal:
    """The chain of a URDF.

    Attributes:
        urdf: The URDF file.
        robot_name: The URDF's robot name.
        base_link, tip_link: The chain's ends.
        joints: Its movable joints in order, shape (n,).
        notes: What was assumed.
    """

    urdf: Path
    robot_name: str
    base_link: str
    tip_link: str
    joints: tuple
    notes: list = field(default_factory=list)


def _movable(tree, link):
    """Movable joints in the subtree below ``link`` of a :class:`~diffsim_ros.model.urdf.UrdfTree`."""
    return sum((joint.type != "fixed") + _movable(tree, joint.child) for joint in tree.children.get(link, []))


def _walk(tree, link):
    """``(tip, joints passed, branch joints, last link)`` of the serial chain from ``link`` down.

    The tip is the child of the last movable joint passed; ``branch joints`` lists, where the
    chain forks (at the last link) into subtrees with movable joints, the joint into each.
    """
    tip, passed = link, 0
    while True:
        branches = [j for j in tree.children.get(link, []) if j.type != "fixed" or _movable(tree, j.child)]
        if len(branches) != 1:
            return tip, passed, branches, link
        joint = branches[0]
        link = joint.child
        if joint.type != "fixed":
            tip, passed = link, passed + 1


def _fork(tree, base, link, passed, branches):
    """The tip where the chain forks at ``link``: the fork itself for a gripper, else an error with the candidates."""
    single = all((j.type != "fixed") + _movable(tree, j.child) == 1 for j in branches)
    if passed >= 2 and single:
        names = [j.name for j in branches]
        return link, [f"tip_link {link}: the chain forks there into {len(names)} single joints {names} (a gripper's "
                      "fingers?): they are locked at 0 (clamped into their limits) and merged into the last body"]
    candidates = []
    for joint in branches:
        tip, more, _, _ = _walk(tree, joint.child)
        candidates.append(f"{tip} ({passed + (joint.type != 'fixed') + more} movable joints)")
    raise RobotModelError(f"the URDF's chain from {base} is ambiguous: it forks at {link} into {len(branches)} "
                          f"branches with movable joints; give --tip, e.g. one of: {', '.join(candidates)}")


def _tip_below(tree, base, link):
    """The proposed tip below ``base`` (walking on from ``link``) and its notes."""
    tip, passed, branches, fork = _walk(tree, link)
    if len(branches) > 1:
        return _fork(tree, base, fork, passed, branches)
    if not passed:
        raise RobotModelError(f"no movable joint below {base}")
    return tip, []


def propose_chain(urdf_path, base_link=None, tip_link=None):
    """The chain of a URDF, with the links not given proposed.

    Args:
        urdf_path: The URDF file.
        base_link: Link fixed to the world (default: the URDF's root).
        tip_link: Last link (default: the end of the serial chain below ``base_link``).

    Returns:
        ChainProposal (joints as the model loader reduces the tree).

    Raises:
        RobotModelError: An unknown link, an ambiguous chain (the candidates named), or a URDF
            the model loader refuses.
    """
    urdf = read_urdf(urdf_path)
    tree = UrdfTree(urdf)
    notes = []
    for role, name in (("--base", base_link), ("--tip", tip_link)):
        if name is not None and name not in tree.children:
            raise RobotModelError(f"{role} {name}: no such link in {urdf_path}; links: {sorted(tree.links)}")
    if base_link is None:
        base_link = tree.root
        notes.append(f"base_link {base_link}: the URDF's root link")
    if tip_link is None:
        tip_link, more = _tip_below(tree, base_link, base_link)
        notes += more or [f"tip_link {tip_link}: the end of the chain of movable joints below {base_link}"]
    model = RobotModel.from_urdf(urdf_path, base_link=base_link, tip_link=tip_link)
    return ChainProposal(Path(urdf_path), urdf.name, base_link, tip_link, tuple(model.joint_names), notes)


@dataclass
class BagStreams:
    """What a bag holds for a chain.

    Attributes:
        joint_states: The JointState topic naming the chain's joints.
        rate: Its message rate [Hz].
        commanded_torques: The command topic, or None.
        command_type: Its message type, or None.
        camera_topics: PoseStamped topics (not configured: their tracked link is not in the bag).
        notes: What was assumed.
    """

    joint_states: str
    rate: float
    commanded_torques: str | None = None
    command_type: str | None = None
    camera_topics: tuple = ()
    notes: list = field(default_factory=list)


def _first(bag, topic):
    records = iter_bag(bag, topics=[topic])
    try:
        return next(records).msg
    finally:
        records.close()


def _one(candidates, what, bag, preferred, given):
    """The topic among ``candidates`` (given, the only one, or the preferred name), else a named error."""
    if given is not None:
        if given not in candidates:
            raise BagError(f"{bag}: {given} is not a {what} topic of the bag; {what} topics: {candidates}")
        return given
    if len(candidates) == 1:
        return candidates[0]
    chosen = [t for t in candidates if t == preferred or (preferred.startswith("*") and t.endswith(preferred[1:]))]
    if len(chosen) == 1:
        return chosen[0]
    raise BagError(f"{bag}: {len(candidates)} {what} topics {candidates}: say which (--{what.replace(' ', '-')})")


def _joint_state_topic(bag, info, joints, given):
    """The JointState topic whose first message names every chain joint."""
    topics = sorted(t for t, (kind, count) in info.topics.items() if kind == JOINT_STATE and count)
    naming = [t for t in topics if set(joints) <= set(_first(bag, t).name)]
    if not naming:
        found = {t: list(_first(bag, t).name) for t in topics}
        raise BagError(f"{bag}: no sensor_msgs/msg/JointState topic names the chain's joints {list(joints)}; "
                       f"found {found or 'no JointState topic'}")
    return _one(naming, "joint states", bag, default_value("topics.joint_states"), given)


def _check_command(bag, topic, kind, joints):
    """A command topic's first message fits the chain: a JointCommand names its joints, a Float64MultiArray has n values."""
    msg = _first(bag, topic)
    if kind == JOINT_COMMAND and not set(joints) <= set(msg.names):
        raise BagError(f"{bag}: the JointCommand on {topic} names {list(msg.names)}, not the chain's joints "
                       f"{list(joints)}")
    if kind == FLOAT64_MULTI_ARRAY and len(msg.data) != len(joints):
        raise BagError(f"{bag}: the Float64MultiArray on {topic} has {len(msg.data)} values, the chain "
                       f"{len(joints)} joints {list(joints)}")


def bag_streams(bag, joints, joint_states=None, commands=None):
    """The joint-state and command topics of a bag for a chain.

    Args:
        bag: rosbag2 directory or file.
        joints: The chain's joints, shape (n,).
        joint_states: The joint-state topic (default: the JointState topic naming the joints;
            ``/joint_states`` among several).
        commands: The command topic (default: the JointCommand or Float64MultiArray topic;
            ``*/commands`` among several; none when the bag has none).

    Returns:
        BagStreams.

    Raises:
        BagError: Nothing that names the joints, several candidates (named), or a command that
            does not fit the chain.
    """
    info = bag_info(bag)
    topic = _joint_state_topic(bag, info, joints, joint_states)
    span = (info.end_ns - info.start_ns) * 1e-9
    count = info.topics[topic][1]
    rate = (count - 1) / span if span > 0 and count > 1 else 0.0
    streams = BagStreams(topic, rate, camera_topics=tuple(sorted(t for t, (k, _) in info.topics.items()
                                                                 if k == POSE_STAMPED)))
    kinds = {t: k for t, (k, count) in info.topics.items() if k in (JOINT_COMMAND, FLOAT64_MULTI_ARRAY) and count}
    if kinds or commands is not None:
        streams.commanded_torques = _one(sorted(kinds), "commands", bag, "*/commands", commands)
        streams.command_type = kinds[streams.commanded_torques]
        _check_command(bag, streams.commanded_torques, streams.command_type, joints)
    else:
        streams.notes.append("no command topic in the bag: the measured efforts will explain the motion "
                             "(calibrate --torque-source auto does so when topics.commanded_torques is not set)")
    if rate and rate < 10.0:
        streams.notes.append(f"joint states at {rate:.3g} Hz: calibrate needs 10 Hz or more")
    return streams


def controllers_joints(path, command_topic=None):
    """The ``joints`` of the effort controller in a ros2_control controllers YAML.

    Args:
        path: The controllers YAML (``<controller>: {ros__parameters: {joints: [...]}}``).
        command_topic: ``/<controller>/commands``: picks the controller (default: the only one
            with ``joints``).

    Raises:
        ValueError: Unreadable, no such controller, or several candidates (named).
    """
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"--controllers {path}: {err}") from None
    found = {}
    for name, section in (raw or {}).items() if isinstance(raw, dict) else ():
        joints = ((section or {}).get("ros__parameters") or {}).get("joints") if isinstance(section, dict) else None
        if isinstance(joints, list):
            found[str(name).strip("/").split("/")[-1]] = [str(j) for j in joints]
    wanted = None if command_topic is None else command_topic.strip("/").split("/")[-2:-1]
    if wanted:
        if wanted[0] not in found:
            raise ValueError(f"--controllers {path}: no controller '{wanted[0]}' (of {command_topic}) with joints; "
                             f"controllers with joints: {sorted(found)}")
        return found[wanted[0]]
    if len(found) != 1:
        raise ValueError(f"--controllers {path}: {len(found)} controllers with joints {sorted(found)}; the bag's "
                         "command topic /<controller>/commands picks one")
    return next(iter(found.values()))


def _flow(value):
    """A YAML scalar or list on one line (names with ':' or spaces quoted)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True).strip()
    return text.removesuffix("...").strip()


def _urdf_entry(urdf, out):
    """The URDF as written: relative to the config when it is in the config's directory tree, else absolute."""
    urdf, folder = Path(os.path.abspath(urdf)), Path(os.path.abspath(out)).parent
    return str(urdf.relative_to(folder)) if urdf.is_relative_to(folder) else str(urdf)


def config_text(chain, out, name=None, streams=None, controller_joints=None, source=""):
    """The commented robot config YAML.

    Args:
        chain: ChainProposal.
        out: Where it will be written (a URDF inside its directory is written relative to it).
        name: Robot name (default: the URDF's robot name).
        streams: BagStreams or None (then the default joint-state topic and no commands).
        controller_joints: The effort controller's joints in its order, or None (chain order).
        source: What it was made from, for the header.
    """
    lines = [f"# diffsim_ros robot configuration, written by diffsim-ros init{source}.",
             "# Every key: docs/robot_config.md. Plain YAML read by diffsim-ros and the nodes' robot_config parameter.",
             "robot:", f"  name: {_flow(name or chain.robot_name)}",
             f"  urdf: {_flow(_urdf_entry(chain.urdf, out))}   # package://..., absolute, or relative to this file",
             f"  base_link: {_flow(chain.base_link)}",
             f"  tip_link: {_flow(chain.tip_link)}   # movable joints off base_link -> tip_link: locked at 0, merged",
             f"  joints: {_flow(list(chain.joints))}"]
    if controller_joints is not None:
        lines.append(f"  controller_joints: {_flow(list(controller_joints))}   # the effort controller's order "
                     "(its Float64MultiArray commands)")
    lines += ["  gravity: [0.0, 0.0, -9.81]   # [m/s²] in the base frame", "",
              "payload:                       # a point mass on the tip, identified by the payload group",
              f"  frame: {_flow(chain.tip_link)}", "  mass: 0.0                    # [kg]",
              "  com: [0.0, 0.0, 0.0]         # [m] in the payload frame", "",
              "# Every topic named here must be in the bags calibrate and replay read.", "topics:",
              f"  joint_states: {_flow(streams.joint_states if streams else default_value('topics.joint_states'))}"
              "   # sensor_msgs/msg/JointState"]
    if streams and streams.commanded_torques:
        lines.append(f"  commanded_torques: {_flow(streams.commanded_torques)}   # {streams.command_type}")
    elif not streams:
        lines.append("  # commanded_torques: /effort_controller/commands   # JointCommand or Float64MultiArray")
    camera = "" if not streams else f" in the bag: {', '.join(streams.camera_topics) or 'none'}"
    lines += [f"  # camera_pose: /camera/pose   # geometry_msgs/msg/PoseStamped{camera}; with camera.tracked_frame",
              "", "# springs: {}                  # spring elements (docs/robot_config.md, README 'Spring elements')"]
    return "\n".join(lines) + "\n"


def _validate(text, out, bag):
    """Load the config as it will be written (next to ``out``: relative paths resolve alike) and read the bag with it."""
    folder = Path(os.path.abspath(out)).parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(out).stem}.check-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        config = load_robot_config(tmp)
        model = config.build_model()
        if bag is not None:
            read_robot_bag(bag, config, required=tuple(k for k, _ in _topics(config)), order_policy="sort")
        return config, model
    finally:
        Path(tmp).unlink(missing_ok=True)


def _topics(config):
    return BagTopics.from_config(config).items()


def write_config(text, out, bag=None):
    """Validate the config (load it, build its model, read ``bag`` with it), then write it atomically.

    Returns:
        ``(RobotConfig, RobotModel)`` of the written file.

    Raises:
        RobotModelError, BagError: The config does not load, or does not read the bag.
    """
    _validate(text, out, bag)
    atomic_write_text(out, text)
    config = load_robot_config(out)
    return config, config.build_model()


def check_controller_joints(chain, controller_joints):
    """``controller_joints`` checked against the chain (RobotModelError naming the problem)."""
    controller_order(chain.joints, controller_joints, "--controller-joints")
    return list(controller_joints)
