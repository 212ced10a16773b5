"""Robot configuration files (``config/baxter_left.yaml`` ...): which URDF, chain, springs, payload.

A robot config is plain YAML (not a ROS parameter file). The model layer reads the
``robot``, ``springs``, ``payload`` and ``plausibility`` sections; other layers read their
own sections (``topics``, ``camera``, ...) from :attr:`RobotConfig.raw`.

Everything is validated when the file is loaded, before any work: types (a string where a
number belongs is a named error), finite gravity, and spring and payload values inside the
plausibility bounds (:mod:`diffsim_ros.model.plausibility`; the optional ``plausibility``
section overrides them). :meth:`RobotConfig.build_model` checks the URDF's parameters with
the same bounds.
"""

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml

from diffsim_ros.model.config_schema import SECTIONS, allowed_keys, default_value
from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.plausibility import (
    DEFAULT_BOUNDS,
    PlausibilityBounds,
    describe_violations,
    model_violations,
    plausibility_violations,
)
from diffsim_ros.model.robot_model import RobotModel
from diffsim_ros.model.springs import SPRING_LAWS
from diffsim_ros.resources import describe_path, resolve_resource

__all__ = ["RobotConfig", "controller_order", "load_robot_config"]


@dataclass(frozen=True)
class RobotConfig:
    """Parsed robot configuration."""

    name: str
    urdf: Path
    base_link: str | None
    tip_link: str | None
    joints: tuple
    gravity: tuple = (0.0, 0.0, -9.81)
    controller_joints: tuple = ()
    """The joints of the effort controller's Float64MultiArray commands, in its order (a
    permutation of ``joints``); empty: ``joints``' order. Bags, replay and the nodes read and
    write commands in this order."""
    springs: tuple = ()
    payload_frame: str | None = None
    payload_mass: float = 0.0
    payload_com: tuple = (0.0, 0.0, 0.0)
    path: Path | None = None
    raw: dict = field(default_factory=dict, repr=False)
    bounds: PlausibilityBounds = DEFAULT_BOUNDS

    def build_model(self, dtype=torch.float64, device="cpu"):
        """Load the URDF and check that its chain has exactly the configured joints.

        Returns:
            RobotModel with the configured springs and payload.

        Raises:
            RobotModelError: URDF problems, configured joints that do not match the chain, or
                URDF parameters outside the plausibility bounds.
        """
        model = RobotModel.from_urdf(
            self.urdf,
            base_link=self.base_link,
            tip_link=self.tip_link,
            dtype=dtype,
            device=device,
            springs=self.springs,
            payload_frame=self.payload_frame,
            gravity=self.gravity,
        )
        if self.joints and tuple(self.joints) != model.joint_names:
            raise RobotModelError(
                f"{self._where()}: robot.joints {list(self.joints)} do not match the actuated joints "
                f"of the URDF chain {self.base_link} -> {self.tip_link}: {list(model.joint_names)}"
            )
        controller_order(model.joint_names, self.controller_joints, f"{self._where()} [robot]: 'controller_joints'")
        model = model.with_payload(self.payload_mass, self.payload_com)
        violations = model_violations(model, self.bounds)
        if violations:
            raise RobotModelError(f"{self._where()}: implausible model parameters (URDF {self.urdf}): "
                                  f"{describe_violations(violations)}")
        return model

    def _where(self):
        return str(self.path) if self.path else "robot config"


def controller_order(joint_names, controller_joints, where="controller_joints"):
    """Chain index of each of the controller's joints, shape (n,) int64.

    A Float64MultiArray command ``data`` in the controller's order is ``tau[order] = data`` in
    chain order (and a command in chain order is ``tau[order]`` in the controller's).

    Args:
        joint_names: The chain's joint names, shape (n,).
        controller_joints: The controller's joints in its order, a permutation of
            ``joint_names``; empty: the chain's order.
        where: What the list is, for messages.

    Raises:
        RobotModelError: A wrong length, a duplicate, a joint not in the chain or a chain joint
            missing (all named).
    """
    joint_names, controller_joints = [str(n) for n in joint_names], [str(n) for n in controller_joints]
    if not controller_joints:
        return np.arange(len(joint_names), dtype=np.int64)
    duplicates = sorted({n for n in controller_joints if controller_joints.count(n) > 1})
    unknown = [n for n in controller_joints if n not in joint_names]
    missing = [n for n in joint_names if n not in controller_joints]
    if duplicates or unknown or missing or len(controller_joints) != len(joint_names):
        problems = [f"{len(controller_joints)} joints for the chain's {len(joint_names)}"] if len(
            controller_joints) != len(joint_names) else []
        problems += [f"{what} {names}" for what, names in (("duplicate(s)", duplicates), ("not in the chain", unknown),
                                                             ("missing", missing)) if names]
        raise RobotModelError(f"{where} {controller_joints} must list each chain joint {joint_names} once, in the "
                              f"controller's order: {'; '.join(problems)}")
    return np.array([joint_names.index(n) for n in controller_joints], dtype=np.int64)


def _require(section, key, where, kind=None):
    if key not in section:
        raise RobotModelError(f"{where}: missing '{key}'")
    value = section[key]
    if kind is not None and not isinstance(value, kind):
        raise RobotModelError(f"{where}: '{key}' must be a {kind.__name__}, got {value!r}")
    return value


def _number(value, where, key):
    """A finite float; strings, booleans, None and NaN/inf are named errors."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RobotModelError(f"{where}: '{key}' must be a finite number, got {value!r}")
    return float(value)


def _floats(value, length, where, key):
    if not isinstance(value, (list, tuple)):
        raise RobotModelError(f"{where}: '{key}' must be a list of {length} numbers, got {value!r}")
    if len(value) != length:
        raise RobotModelError(f"{where}: '{key}' must have {length} numbers, got {len(value)}")
    return tuple(_number(v, where, key) for v in value)


def _mapping(value, where, key):
    """The mapping under ``key`` (None: empty); anything else is a named error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RobotModelError(f"{where}: '{key}' must be a mapping, got {value!r}")
    return value


def _optional_str(section, key, where):
    value = section.get(key)
    if value is not None and not isinstance(value, str):
        raise RobotModelError(f"{where}: '{key}' must be a string, got {value!r}")
    return value


def _check_plausible(values, where, bounds):
    violations = plausibility_violations(values, bounds)
    if violations:
        raise RobotModelError(f"{where}: implausible values: {describe_violations(violations)}")


def _spring(name, values, where, bounds):
    """A spring element from its config entry (``law`` defaults to Baxter's ``lever``).

    Joint laws act on ``joint`` (default: the entry's name); every value is checked with the
    plausibility bounds (e.g. stiffness > 0). Joints and links are checked when the model is built.
    """
    values = dict(_mapping(values, where, name))
    law = values.pop("law", "lever")
    if law not in SPRING_LAWS:
        raise RobotModelError(f"{where}: unknown spring law {law!r}; laws: {sorted(SPRING_LAWS)}")
    spec = SPRING_LAWS[law]
    structure = {"point": ("link_a", "link_b", "tension_only")}.get(law, ("joint",))
    allowed = set(spec.fields) | set(structure)
    unknown = set(values) - allowed
    if unknown:
        raise RobotModelError(f"{where}: unknown keys {sorted(unknown)} for law '{law}'; allowed {sorted(allowed | {'law'})}")
    kwargs = {"name": str(name)} if law == "point" else {"joint": str(values.pop("joint", name))}
    for key in structure:
        if key == "tension_only":
            flag = values.pop(key, False)
            if not isinstance(flag, bool):
                raise RobotModelError(f"{where}: 'tension_only' must be true or false, got {flag!r}")
            kwargs[key] = flag
        elif key in values:
            if not isinstance(values[key], str):
                raise RobotModelError(f"{where}: '{key}' must be a link name, got {values[key]!r}")
            kwargs[key] = values.pop(key)
    for key, value in values.items():
        kwargs[key] = _floats(value, 3, where, key) if key in spec.vectors else _number(value, where, key)
    fields = {f.name for f in dataclasses.fields(spec.element) if f.default is dataclasses.MISSING}
    missing = sorted(fields - set(kwargs))
    if missing:
        raise RobotModelError(f"{where}: law '{law}' needs {missing}")
    element = spec.element(**kwargs)
    named = {f"{element.name}.spring.{key}": getattr(element, key) for key in spec.fields}
    violations = plausibility_violations(named, bounds)
    if violations:
        parameter, reason = next(iter(violations.items()))
        raise RobotModelError(f"{where}: implausible {parameter.rsplit('.', 1)[-1]}: {reason}")
    return element


def _check_keys(raw, path):
    """Sections and keys the schema lists only (:mod:`~diffsim_ros.model.config_schema`): a misspelt one
    would be ignored, its default used silently."""
    unknown = sorted(str(key) for key in set(raw) - set(SECTIONS))
    if unknown:
        raise RobotModelError(f"{path}: unknown section(s) {unknown}; sections: {list(SECTIONS)} (docs/robot_config.md)")
    for section in ("robot", "payload", "topics", "camera"):
        values = _mapping(raw.get(section), str(path), section)
        unknown = sorted(str(key) for key in set(values) - set(allowed_keys(section)))
        if unknown:
            raise RobotModelError(f"{path} [{section}]: unknown key(s) {unknown}; allowed: {allowed_keys(section)} "
                                  "(docs/robot_config.md)")


def _urdf_path(given, config_path, where):
    """``robot.urdf`` resolved (``package://``, absolute, or relative to the config file); it must exist."""
    try:
        urdf = resolve_resource(given, relative_to=config_path.parent)
    except FileNotFoundError as err:
        raise RobotModelError(f"{where}: {err}") from None
    if not urdf.is_file():
        shown = describe_path(urdf, given, config_path.parent, f"the config file {config_path}")
        raise RobotModelError(f"{where}: URDF file not found: {shown}")
    return urdf


def _controller_joints(robot, joints, where):
    """``robot.controller_joints``: names, each of ``joints`` once (checked against the chain when built)."""
    value = robot.get("controller_joints")
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(j, str) for j in value):
        raise RobotModelError(f"{where}: 'controller_joints' must be a list of joint names (the effort controller's "
                              f"joints in its order), got {value!r}")
    if joints:
        controller_order(joints, value, f"{where}: 'controller_joints'")
    return tuple(value)


def load_robot_config(path):
    """Read and validate a robot config YAML file (module docstring).

    Args:
        path: Path of the YAML file. ``robot.urdf`` may be ``package://diffsim_ros/...``,
            absolute, or relative to the config file; it must exist. ``robot.controller_joints``
            (optional) is the effort controller's joint order (:attr:`RobotConfig.controller_joints`).

    Returns:
        RobotConfig.

    Raises:
        RobotModelError: Missing file, invalid YAML, or missing/invalid/implausible entries
            (named).
    """
    path = Path(path)
    if path.is_dir():
        raise RobotModelError(f"robot config {describe_path(path)} is a directory; give the robot config YAML")
    if not path.is_file():
        raise RobotModelError(f"robot config not found: {describe_path(path)}")
    if path.suffix.lower() in (".urdf", ".xacro"):
        raise RobotModelError(f"robot config {path}: that is a URDF; give the robot config YAML (its robot.urdf names the URDF)")
    path = Path(os.path.abspath(path))  # messages and relative paths in it: from the file, wherever it was named from
    try:
        raw = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise RobotModelError(f"invalid YAML in {path}: {err}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("robot"), dict):
        raise RobotModelError(f"{path}: expected a mapping with a 'robot' section")
    _check_keys(raw, path)
    robot = raw["robot"]
    where = f"{path} [robot]"
    urdf = _urdf_path(_require(robot, "urdf", where, str), path, where)
    joints = robot.get("joints", [])
    if not isinstance(joints, list) or not all(isinstance(j, str) for j in joints):
        raise RobotModelError(f"{where}: 'joints' must be a list of joint names")
    controller_joints = _controller_joints(robot, joints, where)
    try:
        bounds = PlausibilityBounds.from_mapping(raw.get("plausibility"), f"{path} [plausibility]")
    except ValueError as err:
        raise RobotModelError(str(err)) from None
    gravity = _floats(robot.get("gravity", default_value("robot.gravity")), 3, where, "gravity")
    if math.hypot(*gravity) > _GRAVITY_MAX:
        raise RobotModelError(f"{where}: 'gravity' {list(gravity)} is stronger than {_GRAVITY_MAX:g} m/s²")
    entries = _mapping(raw.get("springs"), str(path), "springs")
    springs = [_spring(name, values, f"{path} [springs.{name}]", bounds) for name, values in entries.items()]
    payload = _mapping(raw.get("payload"), str(path), "payload")
    payload_where = f"{path} [payload]"
    payload_mass = _number(payload.get("mass", default_value("payload.mass")), payload_where, "mass")
    payload_com = _floats(payload.get("com", default_value("payload.com")), 3, payload_where, "com")
    _check_plausible({"payload.mass": payload_mass, "payload.com": payload_com}, payload_where, bounds)
    return RobotConfig(
        name=str(robot.get("name", path.stem)),
        urdf=urdf,
        base_link=_optional_str(robot, "base_link", where),
        tip_link=_optional_str(robot, "tip_link", where),
        joints=tuple(joints),
        gravity=gravity,
        controller_joints=controller_joints,
        springs=tuple(springs),
        payload_frame=_optional_str(payload, "frame", payload_where),
        payload_mass=payload_mass,
        payload_com=payload_com,
        path=path,
        raw=raw,
        bounds=bounds,
    )


_GRAVITY_MAX = 100.0
"""[m/s²] a configured gravity stronger than ~10 g is a typo (e.g. in mm/s²)."""
