"""Robot configuration files (``config/baxter_left.yaml`` ...): which URDF, chain, springs, payload.

A robot config is plain YAML (not a ROS parameter file). The model layer reads the
``robot``, ``springs`` and ``payload`` sections; other layers read their own sections
(``topics``, ``camera``, ...) from :attr:`RobotConfig.raw`.
"""

from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.robot_model import JointSpring, RobotModel
from diffsim_ros.resources import resolve_resource

__all__ = ["RobotConfig", "load_robot_config"]


@dataclass(frozen=True)
class RobotConfig:
    """Parsed robot configuration."""

    name: str
    urdf: Path
    base_link: str | None
    tip_link: str | None
    joints: tuple
    gravity: tuple = (0.0, 0.0, -9.81)
    springs: tuple = ()
    payload_frame: str | None = None
    payload_mass: float = 0.0
    payload_com: tuple = (0.0, 0.0, 0.0)
    path: Path | None = None
    raw: dict = field(default_factory=dict, repr=False)

    def build_model(self, dtype=torch.float64, device="cpu"):
        """Load the URDF and check that its chain has exactly the configured joints.

        Returns:
            RobotModel with the configured springs and payload.

        Raises:
            RobotModelError: URDF problems, or configured joints that do not match the chain.
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
        return model.with_payload(self.payload_mass, self.payload_com)

    def _where(self):
        return str(self.path) if self.path else "robot config"


def _require(section, key, where, kind=None):
    if key not in section:
        raise RobotModelError(f"{where}: missing '{key}'")
    value = section[key]
    if kind is not None and not isinstance(value, kind):
        raise RobotModelError(f"{where}: '{key}' must be a {kind.__name__}, got {value!r}")
    return value


def _floats(value, length, where, key):
    try:
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise RobotModelError(f"{where}: '{key}' must be a list of {length} numbers, got {value!r}") from None
    if len(out) != length:
        raise RobotModelError(f"{where}: '{key}' must have {length} numbers, got {len(out)}")
    return out


def load_robot_config(path):
    """Read a robot config YAML file.

    Args:
        path: Path of the YAML file. ``robot.urdf`` may be ``package://diffsim_ros/...``,
            absolute, or relative to the config file.

    Returns:
        RobotConfig.

    Raises:
        RobotModelError: Missing file, invalid YAML, or missing/invalid entries (named).
    """
    path = Path(path)
    if not path.is_file():
        raise RobotModelError(f"robot config not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise RobotModelError(f"invalid YAML in {path}: {err}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("robot"), dict):
        raise RobotModelError(f"{path}: expected a mapping with a 'robot' section")
    robot = raw["robot"]
    where = f"{path} [robot]"
    try:
        urdf = resolve_resource(_require(robot, "urdf", where, str), relative_to=path.parent)
    except FileNotFoundError as err:
        raise RobotModelError(f"{where}: {err}") from None
    joints = robot.get("joints", [])
    if not isinstance(joints, list) or not all(isinstance(j, str) for j in joints):
        raise RobotModelError(f"{where}: 'joints' must be a list of joint names")

    springs = []
    for joint, values in (raw.get("springs") or {}).items():
        values = values or {}
        allowed = set(JointSpring.__dataclass_fields__) - {"joint"}
        unknown = set(values) - allowed
        if unknown:
            raise RobotModelError(f"{path} [springs.{joint}]: unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")
        springs.append(JointSpring(joint=joint, **{k: float(v) for k, v in values.items()}))

    payload = raw.get("payload") or {}
    return RobotConfig(
        name=str(robot.get("name", path.stem)),
        urdf=urdf,
        base_link=robot.get("base_link"),
        tip_link=robot.get("tip_link"),
        joints=tuple(joints),
        gravity=_floats(robot.get("gravity", (0.0, 0.0, -9.81)), 3, where, "gravity"),
        springs=tuple(springs),
        payload_frame=payload.get("frame"),
        payload_mass=float(payload.get("mass", 0.0)),
        payload_com=_floats(payload.get("com", (0.0, 0.0, 0.0)), 3, f"{path} [payload]", "com"),
        path=path,
        raw=raw,
    )
