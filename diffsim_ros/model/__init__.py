"""Robot model: URDF (lxml) -> fixed structure plus differentiable physical parameters."""

from diffsim_ros.model.config import RobotConfig, load_robot_config
from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.inertia import (
    inertial_from_log_cholesky,
    log_cholesky_from_inertial,
    pseudo_inertia,
)
from diffsim_ros.model.plausibility import DEFAULT_BOUNDS, PlausibilityBounds, plausibility_violations
from diffsim_ros.model.poses import random_poses
from diffsim_ros.model.robot_model import PRISMATIC, REVOLUTE, Frame, RobotModel, RobotParams
from diffsim_ros.model.springs import JointSpring, LeverSpring, PointSpring, TorsionSpring

__all__ = [
    "DEFAULT_BOUNDS",
    "PlausibilityBounds",
    "plausibility_violations",
    "PRISMATIC",
    "REVOLUTE",
    "Frame",
    "JointSpring",
    "LeverSpring",
    "PointSpring",
    "TorsionSpring",
    "RobotModel",
    "RobotConfig",
    "RobotModelError",
    "RobotParams",
    "inertial_from_log_cholesky",
    "load_robot_config",
    "log_cholesky_from_inertial",
    "pseudo_inertia",
    "random_poses",
]
