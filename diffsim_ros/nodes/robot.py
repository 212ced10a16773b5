"""What every node sets up at start-up: the robot config, its model, a calibration, torch threads, scheduling.

Nodes name the robot config by a ``robot_config`` parameter (a path or a
``package://diffsim_ros/config/...`` URI) and optionally a ``calibration_file`` whose values
are applied to the nominal model; errors name the file and the problem.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from diffsim_ros.io.calibration import apply_calibration, load_calibration
from diffsim_ros.model import load_robot_config
from diffsim_ros import threads as threads_
from diffsim_ros.resources import resolve_resource
from diffsim_ros.runtime.params import param

__all__ = ["LoadedRobot", "RobotNodeConfig", "check_realtime_priority", "default_calibration_path",
           "joint_states_topic_param", "load_robot", "realtime_priority_param", "realtime_scheduling", "robot_topic",
           "set_threads", "threads_param"]

DEFAULT_ROBOT_CONFIG = "package://diffsim_ros/config/baxter_left.yaml"


@dataclass(frozen=True)
class RobotNodeConfig:
    """The parameters :func:`load_robot` reads; robot nodes' configs derive from it (these come first)."""

    robot_config: str = param(DEFAULT_ROBOT_CONFIG, "robot config YAML (path or package:// URI)")
    calibration_file: str = param("", "calibration.yaml applied to the nominal model at start-up ('' for none)")


@dataclass(frozen=True)
class LoadedRobot:
    """A robot config with its models.

    Attributes:
        config: RobotConfig.
        nominal: Model of the robot config (float64), shape n = ``len(joint_names)``.
        model: ``nominal`` with the calibration applied (``nominal`` without one).
        calibration: The applied Calibration, or None.
    """

    config: object
    nominal: object
    model: object
    calibration: object = None

    @property
    def joint_names(self):
        """Model joint names, shape (n,)."""
        return tuple(self.nominal.joint_names)


def joint_states_topic_param():
    """The ``joint_states_topic`` parameter of a node config (:func:`robot_topic` override)."""
    return param("", "joint state topic (default: the robot config's topics.joint_states)")


def threads_param():
    """The ``threads`` parameter of a node config (what :func:`set_threads` takes)."""
    return param(threads_.DEFAULT_THREADS, "torch and numba threads of the process")


def set_threads(threads):
    """Use ``threads`` torch and numba threads (1 by default in nodes: see :mod:`diffsim_ros.threads`)."""
    threads_.set_threads(max(1, int(threads)))


def realtime_priority_param(what):
    """The ``realtime_priority`` parameter of a node config (``what``: why the node wants it)."""
    return param(0, f"SCHED_FIFO priority of the process, 1-99 as ros2_control's thread_priority ({what}); needs "
                    "rtprio permission, else a warning and normal scheduling; 0: normal scheduling")


def check_realtime_priority(priority):
    """Config validation of ``realtime_priority``."""
    if not 0 <= priority <= 99:
        raise ValueError(f"realtime_priority must be within 0-99, got {priority}")


def realtime_scheduling(handle, priority):
    """Ask for SCHED_FIFO ``priority`` (0: no) for the node's process (runtime/scheduling.py).

    Returns:
        The scheduling in use, for diagnostics ("SCHED_FIFO 50", or "normal (why)"); a refusal
        is also logged as a warning.
    """
    if not priority:
        return "normal"
    if not handle.owns_process:
        return "normal (several nodes share this process)"
    why_not = handle.set_realtime_priority(priority)
    if why_not is None:
        return f"SCHED_FIFO {priority}"
    handle.get_logger().warning(f"realtime_priority {priority} not used: {why_not}")
    return f"normal ({why_not})"


def load_robot(robot_config, calibration_file=""):
    """Load a robot config, build its float64 model and apply an optional calibration.

    Args:
        robot_config: Path or ``package://`` URI of a robot config YAML.
        calibration_file: Path of a ``calibration.yaml`` ("" for none).

    Returns:
        LoadedRobot.

    Raises:
        RobotModelError: Missing or invalid robot config or URDF.
        CalibrationError: Missing, invalid or implausible calibration, or one made for another robot.
    """
    config = load_robot_config(resolve_resource(robot_config))
    nominal = config.build_model()
    if not calibration_file:
        return LoadedRobot(config, nominal, nominal)
    calibration = load_calibration(resolve_resource(calibration_file))
    model = apply_calibration(nominal, calibration, robot=config.name, bounds=config.bounds)
    return LoadedRobot(config, nominal, model, calibration)


def robot_topic(config, key, override=""):
    """A topic name: ``override`` when set, else ``topics.<key>`` of the robot config ("" if absent)."""
    if override:
        return override
    return str((config.raw.get("topics") or {}).get(key) or "")


def default_calibration_path(robot_name):
    """``$ROS_HOME/diffsim_ros/<robot>_calibration.yaml`` (ROS_HOME defaults to ~/.ros)."""
    ros_home = os.environ.get("ROS_HOME") or os.path.join(os.path.expanduser("~"), ".ros")
    return Path(ros_home) / "diffsim_ros" / f"{robot_name}_calibration.yaml"
