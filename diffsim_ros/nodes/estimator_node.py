"""estimator_node: online estimation of payload, springs (and camera) from joint states and camera poses.

Joint states and camera poses stream into an
:class:`~diffsim_ros.estimation.online.OnlineEstimator` (rests become static poses; bounded,
validated updates). Accepted estimates are published with their standard deviations, the
causal inverse-dynamics torque estimate is published at ``torque_rate_hz``, and the
estimates are saved as a ``calibration.yaml`` on request and on shutdown.

Topics:

* subscribes ``joint_states_topic`` (sensor_msgs/msg/JointState, SENSOR_QOS), mapped by
  name; NaN, out-of-order and incomplete samples are dropped and counted;
* subscribes ``camera_topic`` (geometry_msgs/msg/PoseStamped, SENSOR_QOS) when the
  ``camera`` group is estimated;
* subscribes ``~/save`` (std_msgs/msg/Empty, COMMAND_QOS): write the calibration file now;
* publishes ``~/estimates`` (std_msgs/msg/Float64MultiArray, LATCHED_QOS) after every
  accepted update (layout in :mod:`diffsim_ros.nodes.messages`);
* publishes ``~/estimated_torques`` (sensor_msgs/msg/JointState, SENSOR_QOS): model joints,
  ``position`` the latest measured positions [rad], ``effort`` the estimated joint torques
  [N·m] (inverse dynamics of the current model minus passive torques).
"""

from dataclasses import dataclass

import numpy as np

from diffsim_ros.control import JointStateBounds
from diffsim_ros.estimation.online import OnlineEstimator, OnlineEstimatorConfig
from diffsim_ros.io.calibration import Calibration, check_output_path, write_calibration
from diffsim_ros.io.ros_messages import NS_PER_S, joint_state_msg
from diffsim_ros.io.ros_types import EMPTY, JOINT_STATE, POSE_STAMPED, FLOAT64_MULTI_ARRAY
from diffsim_ros.nodes.messages import estimates_msg
from diffsim_ros.nodes.robot import DEFAULT_ROBOT_CONFIG, default_calibration_path, load_robot, robot_topic, set_threads
from diffsim_ros.resources import resolve_resource
from diffsim_ros.runtime import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, declare_config, param
from diffsim_ros.runtime.faults import STALE, PoseWorkspace, joint_state_input, pose_input
from diffsim_ros.runtime.rclpy_backend import run_node

__all__ = ["EstimatorNode", "EstimatorNodeConfig", "main"]

_UPDATE_CHECK_PERIOD = 0.25  # [s] how often the node asks the estimator whether an update is due


@dataclass(frozen=True)
class EstimatorNodeConfig:
    """Parameters of estimator_node (tuning: see OnlineEstimatorConfig)."""

    robot_config: str = param(DEFAULT_ROBOT_CONFIG, "robot config YAML (path or package:// URI)")
    calibration_file: str = param("", "calibration.yaml to start from ('' for the nominal model)")
    calibration_output: str = param("", "where to save the calibration ('' for $ROS_HOME/diffsim_ros/<robot>_calibration.yaml)")
    save_on_shutdown: bool = param(True, "save the calibration when the node shuts down")
    groups: list[str] = param(["payload", "spring"], "parameter groups (payload, spring, inertia, link_lengths, camera)")
    camera_frame: str = param("", "tracked link of the camera poses (default: the robot config's camera.tracked_frame)")
    joint_states_topic: str = param("", "joint state topic (default: the robot config's topics.joint_states)")
    camera_topic: str = param("", "camera pose topic (default: the robot config's topics.camera_pose)")
    input_timeout: float = param(0.5, "inputs older than this are reported stale [s]")
    torque_rate_hz: float = param(10.0, "estimated torque rate [Hz] (0: off)")
    window_poses: int = param(40, "static poses kept")
    window_seconds: float = param(600.0, "poses older than this are dropped [s]")
    rest_velocity: float = param(0.01, "max |joint velocity| at rest [rad/s]")
    rest_duration: float = param(0.3, "minimum rest averaged into a pose [s]")
    max_rest_duration: float = param(2.0, "longer rests are cut into several poses [s]")
    min_poses: int = param(8, "poses needed before the first update")
    holdout: int = param(3, "recent poses held back to validate an update")
    update_period: float = param(2.0, "seconds between updates")
    max_iterations: int = param(12, "residual evaluations per update")
    acceptance_margin: float = param(0.02, "relative held-back RMS increase still accepted")
    bound_names: list[str] = param([], "parameters with plausibility bounds", name="bounds.names")
    bound_lower: list[float] = param([], "lower bounds, one per bounds.names", name="bounds.lower")
    bound_upper: list[float] = param([], "upper bounds, one per bounds.names", name="bounds.upper")
    threads: int = param(1, "torch threads")

    def validate(self):
        if not len(self.bound_names) == len(self.bound_lower) == len(self.bound_upper):
            raise ValueError("bounds.names, bounds.lower and bounds.upper need the same length")
        if self.torque_rate_hz < 0 or not self.input_timeout > 0:
            raise ValueError("torque_rate_hz must be >= 0 and input_timeout > 0")

    def estimator_config(self):
        """OnlineEstimatorConfig of these parameters (ValueError for inconsistent tuning)."""
        return OnlineEstimatorConfig(
            groups=tuple(self.groups), window_poses=self.window_poses, window_seconds=self.window_seconds,
            rest_velocity=self.rest_velocity, rest_duration=self.rest_duration,
            max_rest_duration=self.max_rest_duration, min_poses=self.min_poses, holdout=self.holdout,
            update_period=self.update_period, max_iterations=self.max_iterations,
            acceptance_margin=self.acceptance_margin,
            bounds={n: (lo, hi) for n, lo, hi in zip(self.bound_names, self.bound_lower, self.bound_upper)},
        )


class EstimatorNode:
    """Online estimator node (module docstring).

    Attributes:
        estimator: OnlineEstimator.
        joints: InputMonitor of the joint states; ``camera``: of the camera poses (or None).
        published: Estimates messages published.
        saved: Paths written.
    """

    def __init__(self, handle):
        self.handle = handle
        self.config = cfg = declare_config(handle, EstimatorNodeConfig)
        set_threads(cfg.threads)
        self.robot = load_robot(cfg.robot_config, cfg.calibration_file)
        raw_camera = self.robot.config.raw.get("camera") or {}
        camera_frame = cfg.camera_frame or raw_camera.get("tracked_frame")
        use_camera = "camera" in cfg.groups
        try:
            self.estimator = OnlineEstimator(self.robot.model, cfg.estimator_config(),
                                             camera_frame=camera_frame if use_camera else None)
        except ValueError as err:
            raise ValueError(f"node '{handle.name}': invalid estimator parameters: {err}") from None
        self.output_path = resolve_resource(cfg.calibration_output) if cfg.calibration_output else \
            default_calibration_path(self.robot.config.name)
        if cfg.save_on_shutdown:  # hours of estimation must not end in an unwritable path
            check_output_path(self.output_path, force=True, kind="file", what="calibration_output")
        self.published, self.saved = 0, []
        joint_topic = robot_topic(self.robot.config, "joint_states", cfg.joint_states_topic) or "/joint_states"
        logger = handle.get_logger()
        self.joints = joint_state_input(self.robot.joint_names, cfg.input_timeout, joint_topic,
                                        bounds=JointStateBounds(self.robot.model), logger=logger)
        handle.create_subscription(JOINT_STATE, joint_topic, self._on_joint_state, SENSOR_QOS)
        self.camera = None
        if use_camera:
            camera_topic = robot_topic(self.robot.config, "camera_pose", cfg.camera_topic) or "/camera/pose"
            self.camera = pose_input(cfg.input_timeout, camera_topic, logger=logger,
                                     workspace=PoseWorkspace.from_config(raw_camera.get("workspace"), "camera.workspace"))
            handle.create_subscription(POSE_STAMPED, camera_topic, self._on_camera_pose, SENSOR_QOS)
        handle.create_subscription(EMPTY, "~/save", self._on_save, COMMAND_QOS)
        self.estimates = handle.create_publisher(FLOAT64_MULTI_ARRAY, "~/estimates", LATCHED_QOS)
        self.torques = handle.create_publisher(JOINT_STATE, "~/estimated_torques", SENSOR_QOS)
        handle.create_timer(_UPDATE_CHECK_PERIOD, self._update)
        if cfg.torque_rate_hz > 0:
            handle.create_timer(1.0 / cfg.torque_rate_hz, self._publish_torques)
        if cfg.save_on_shutdown:
            handle.add_on_shutdown(self.save)
        handle.get_logger().info(f"estimating {list(cfg.groups)} from {joint_topic}; calibration -> {self.output_path}")

    # ------------------------------------------------------------------ inputs
    def _stamp(self, sample):
        """Sample time [s]: the header stamp, or the receive time when the stamp is unset."""
        return (sample.stamp_ns or self.handle.now_ns()) / NS_PER_S

    def _on_joint_state(self, msg):
        sample = self.joints.update(msg, self.handle.now_ns())  # logs what it drops
        if sample is not None:
            self.estimator.add_joint_state(self._stamp(sample), sample.positions, sample.velocities, sample.efforts)

    def _on_camera_pose(self, msg):
        sample = self.camera.update(msg, self.handle.now_ns())
        if sample is not None:
            self.estimator.add_camera_pose(self._stamp(sample), sample.position, sample.quaternion)

    # ------------------------------------------------------------------ updates
    def _update(self):
        if self.joints.watchdog.poll(self.handle.now_ns()) == STALE:
            self.handle.get_logger().warning("joint states stale: no new data for the estimator")
        latest = self.joints.latest
        if latest is None:
            return
        update = self.estimator.update(self._stamp(latest))
        if update is None:
            return
        if not update.accepted:
            self.handle.get_logger().info(f"update not accepted ({update.poses} poses): {update.reason}")
            return
        self.estimates.publish(estimates_msg(self.handle.messages, self.estimator.values, self.estimator.stddev))
        self.published += 1
        summary = ", ".join(f"{k}={np.round(v, 4).tolist()}" for k, v in self.estimator.values.items())
        self.handle.get_logger().info(
            f"estimate accepted ({update.poses} poses, held-back RMS {update.holdout_rms_before:.3g} -> "
            f"{update.holdout_rms_after:.3g} N·m): {summary}")

    def _publish_torques(self):
        latest = self.joints.latest
        if latest is None or not self.joints.is_fresh(self.handle.now_ns()):
            return
        tau = self.estimator.estimated_torques()
        if tau is not None:
            self.torques.publish(joint_state_msg(self.handle.messages, self.handle.now_ns(), self.robot.joint_names,
                                                 latest.positions, efforts=tau))

    # ------------------------------------------------------------------ calibration file
    def calibration(self):
        """The accepted estimates as a Calibration (None before the first accepted update)."""
        if not self.estimator.values:
            return None
        return Calibration(robot=self.robot.config.name, parameters=dict(self.estimator.values),
                           stddev=dict(self.estimator.stddev), groups=tuple(self.config.groups))

    def save(self, path=None):
        """Write the calibration file (atomically); returns its path, or None when there is nothing to save."""
        calibration = self.calibration()
        if calibration is None:
            self.handle.get_logger().warning("no accepted estimates yet: no calibration saved")
            return None
        path = self.output_path if path is None else path
        path.parent.mkdir(parents=True, exist_ok=True)
        write_calibration(path, calibration)
        self.saved.append(path)
        self.handle.get_logger().info(f"calibration saved to {path}")
        return path

    def _on_save(self, msg):
        try:
            self.save()
        except OSError as err:  # an unwritable path must not stop the estimator
            self.handle.get_logger().error(f"calibration not saved to {self.output_path}: {err}")


def main(args=None):
    """Entry point of ``ros2 run diffsim_ros estimator_node``."""
    run_node(EstimatorNode, "estimator", args)


if __name__ == "__main__":
    main()
