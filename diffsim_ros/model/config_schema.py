"""The robot config's keys: one schema for the loader (allowed keys, defaults) and the reference doc.

:func:`~diffsim_ros.model.config.load_robot_config` refuses a key or section this schema does
not list (a misspelt ``tip_lnk`` or ``topic:`` would otherwise be ignored silently) and takes
its defaults from here; :func:`config_reference` writes ``docs/robot_config.md`` from the same
entries, so the two cannot drift (``test/test_config_init.py`` checks that the doc is current).
"""

import ast
import dataclasses
import inspect
from dataclasses import dataclass

from diffsim_ros.model.plausibility import PlausibilityBounds
from diffsim_ros.model.springs import SPRING_LAWS

__all__ = ["ConfigKey", "SCHEMA", "SECTIONS", "allowed_keys", "config_reference", "default_value"]

_REQUIRED = object()


@dataclass(frozen=True)
class ConfigKey:
    """One key of a robot config section.

    Attributes:
        key: ``"<section>.<name>"``.
        kind: What the value is (for the doc and messages).
        shown: The default as the doc shows it.
        units: SI units, or "".
        doc: What it means.
        value: The default the loader uses (None: absent; ``_REQUIRED``: must be given).
    """

    key: str
    kind: str
    shown: str
    units: str
    doc: str
    value: object = None

    @property
    def required(self):
        """Whether the key must be given."""
        return self.value is _REQUIRED


SECTIONS = {
    "robot": "The arm: its URDF, the chain and the joints (required).",
    "springs": "Spring elements, one entry per spring, named after its joint or freely (optional; laws below).",
    "payload": "A point-mass payload (optional; identified by the `payload` group).",
    "topics": "ROS 2 topics, also the topics read from bags (optional). Every topic named here must be in a bag "
              "that `calibrate` or `replay` reads, unless the user does without it (`--torque-source effort`, "
              "`--no-camera`).",
    "camera": "The camera whose poses of a tracked link are on `topics.camera_pose` (optional).",
    "plausibility": "Bounds outside which a value is implausible, overriding the defaults (optional; below).",
}
"""Section -> what it holds, in the order the doc lists them."""

SCHEMA = (
    ConfigKey("robot.name", "string", "the config file's name without .yaml", "",
              "Robot name in calibration files and output names."),
    ConfigKey("robot.urdf", "path", "required", "",
              "The URDF: `package://<pkg>/...`, absolute, or relative to the config file. It must exist.",
              _REQUIRED),
    ConfigKey("robot.base_link", "link name", "the URDF's root link", "", "Link fixed to the world."),
    ConfigKey("robot.tip_link", "link name", "none: every movable joint below base_link is actuated", "",
              "Last link of the chain. Movable joints off the path base_link -> tip_link (branches, a gripper "
              "below the tip) are locked at 0, clamped into their limits, and merged into the chain body they hang "
              "from; subtrees off the fixed base are dropped."),
    ConfigKey("robot.joints", "list of joint names", "[] (not checked)", "",
              "The chain's movable joints in order, checked against the URDF; the order of every per-joint list "
              "and of joint-state columns read from bags (joint states are mapped by name, extra names ignored)."),
    ConfigKey("robot.controller_joints", "list of joint names", "robot.joints' order", "",
              "The effort controller's joints in its order (ros2_control `joints:`), each chain joint once: the "
              "order of a std_msgs/Float64MultiArray command for calibrate, replay and the nodes."),
    ConfigKey("robot.gravity", "3 numbers", "[0.0, 0.0, -9.81]", "m/s²", "Gravity in the base frame.",
              (0.0, 0.0, -9.81)),
    ConfigKey("payload.frame", "link name", "none", "", "Link the payload is fixed to (usually tip_link)."),
    ConfigKey("payload.mass", "number", "0.0", "kg", "Nominal payload mass.", 0.0),
    ConfigKey("payload.com", "3 numbers", "[0.0, 0.0, 0.0]", "m", "Payload centre of mass in payload.frame.",
              (0.0, 0.0, 0.0)),
    ConfigKey("topics.joint_states", "topic name", "/joint_states", "",
              "sensor_msgs/msg/JointState of the arm.", "/joint_states"),
    ConfigKey("topics.camera_pose", "topic name", "none", "",
              "geometry_msgs/msg/PoseStamped: camera.tracked_frame in the camera frame."),
    ConfigKey("topics.commanded_torques", "topic name", "none (the measured efforts explain the motion)", "",
              "baxter_core_msgs/msg/JointCommand (torque mode, named joints) or std_msgs/msg/Float64MultiArray "
              "(robot.controller_joints' order)."),
    ConfigKey("camera.tracked_frame", "link name", "none", "", "The link whose pose the camera reports."),
    ConfigKey("camera.workspace", "mapping {min: 3 numbers, max: 3 numbers}", "plausibility.camera_radius around "
              "the base", "m", "Camera poses outside this box are dropped by the nodes."),
)
"""Every key of the fixed sections (``springs`` and ``plausibility`` are documented below the table)."""

_BY_KEY = {entry.key: entry for entry in SCHEMA}


def allowed_keys(section):
    """Keys allowed in a fixed section (``robot``, ``payload``, ``topics``, ``camera``)."""
    return [entry.key.split(".", 1)[1] for entry in SCHEMA if entry.key.startswith(section + ".")]


def default_value(key):
    """The loader's default of ``"<section>.<name>"`` (None: absent)."""
    value = _BY_KEY[key].value
    return None if value is _REQUIRED else value


def _field_docs(cls):
    """Attribute docstrings of a dataclass (the string under each field), name -> text."""
    tree = ast.parse(inspect.getsource(cls))
    body, docs = tree.body[0].body, {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def _table(rows):
    lines = ["| key | type | default | units | meaning |", "| --- | --- | --- | --- | --- |"]
    return lines + [f"| `{e.key}` | {e.kind} | {e.shown} | {e.units} | {e.doc} |" for e in rows]


def _springs():
    lines = ["", "Each entry `springs.<name>` is a mapping with `law` (default `lever`) and the law's keys, every one "
             "a parameter `<name>.spring.<key>` (README, \"Spring elements\", for the forces and units):", "",
             "| law | keys |", "| --- | --- |"]
    structure = {"point": ["link_a", "link_b", "tension_only"]}
    for law, spec in SPRING_LAWS.items():
        keys = [f"`{k}`" for k in structure.get(law, ["joint"]) + list(spec.fields)]
        if law not in structure:
            keys[0] += " (default: the entry's name)"
        lines.append(f"| `{law}` | {', '.join(keys)} |")
    return lines


def _plausibility():
    docs = _field_docs(PlausibilityBounds)
    lines = ["", "| key | default | meaning |", "| --- | --- | --- |"]
    for field in dataclasses.fields(PlausibilityBounds):
        lines.append(f"| `plausibility.{field.name}` | {field.default:g} | {docs.get(field.name, '')} |")
    return lines


def config_reference():
    """``docs/robot_config.md``: every section and key with its type, default and units (markdown)."""
    lines = ["# Robot config reference", "",
             "Generated from `diffsim_ros/model/config_schema.py`, the schema `load_robot_config` checks keys "
             "against and takes defaults from (regenerate: `python -c 'from diffsim_ros.model.config_schema import "
             "config_reference as r; print(r(), end=\"\")' > docs/robot_config.md`). A key or section not listed here is refused when the config loads. "
             "`diffsim-ros init` writes a commented config from a URDF and a bag.", ""]
    for section, text in SECTIONS.items():
        lines += [f"## {section}", "", text]
        rows = [entry for entry in SCHEMA if entry.key.startswith(section + ".")]
        if rows:
            lines += [""] + _table(rows)
        lines += {"springs": _springs(), "plausibility": _plausibility()}.get(section, [])
        lines.append("")
    return "\n".join(lines)

