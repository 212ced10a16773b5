"""estimator_node: online identification while the robot works (payload, springs, damping, friction, camera...).

Joint states, commanded torques and camera poses stream into an
:class:`~diffsim_ros.estimation.online.OnlineEstimator`: the offline identification engine on
a sliding window of motion and rests, through the rigid-body or the PBD model, with bounded,
validated updates and change detection; or, with ``method: streaming``, into a
:class:`~diffsim_ros.estimation.streaming.StreamingEstimator` (rigid model: accumulated
statistics, a validated refresh every ``refresh_period``). Accepted estimates are published with their standard deviations, the
joint torques are estimated through the simulator at the joint-state rate (Liu et al. §V-D), and
the estimates are saved as a ``calibration.yaml`` on request and on shutdown.

Topics:

* subscribes ``joint_states_topic`` (sensor_msgs/msg/JointState, SENSOR_QOS), mapped by
  name; NaN, out-of-order and incomplete samples are dropped and counted;
* subscribes ``camera_topic`` (geometry_msgs/msg/PoseStamped, SENSOR_QOS) when the
  ``camera`` group is estimated;
* subscribes ``commanded_torques_topic`` (std_msgs/msg/Float64MultiArray in the robot config's
  ``robot.controller_joints`` order (default: model joint order),
  or baxter_core_msgs/msg/JointCommand in torque mode; SENSOR_QOS) when set: the torques the
  motion is explained by (``torque_source``); without it, the measured efforts;
* subscribes ``~/save`` (std_msgs/msg/Empty, COMMAND_QOS): write the calibration file now;
* serves ``~/save_calibration`` (std_srvs/srv/Trigger): write the last accepted estimate to
  the calibration file now, also while an update runs (the estimate in force when it
  started), and answer with its path (or why not: none accepted yet, an unwritable path);
* serves ``~/reset`` (std_srvs/srv/Trigger): forget the rests and estimates and start again
  from the start-up model;
* publishes ``/diagnostics`` (diagnostic_msgs/msg/DiagnosticArray) every second: input rates,
  drops and watchdogs, the estimator's health (poses, last update and its outcome, its CPU
  share of a core over the last updates: ``estimator CPU [% of a core]``), and the
  kernel warm-up (``<node>: kernels``, :mod:`diffsim_ros.runtime.warmup`: until the compiled
  torque step is loaded, the torques come from the inverse dynamics; no update runs: a rigid
  update calls the compiled joint-torque regressor, a PBD update the compiled step);
* publishes ``~/estimates`` (std_msgs/msg/Float64MultiArray, LATCHED_QOS) after every
  accepted update (layout in :mod:`diffsim_ros.nodes.messages`);
* publishes ``~/estimated_torques`` (sensor_msgs/msg/JointState, SENSOR_QOS): model joints,
  ``position`` the measured positions [rad], ``effort`` the estimated actuator torques [N·m]
  (passive torques excluded). ``torque_estimate: simulator`` (default): one message per joint
  state, stamped with it, the torque applied since the previous joint state, through the
  compiled rigid-body step of the current model
  (:class:`~diffsim_ros.estimation.torque_estimation.StreamingTorqueEstimator`);
  ``inverse_dynamics``: the causal inverse dynamics of a quadratic fit, at ``torque_rate_hz``;
  ``off``: none.

Updates (a bounded least-squares fit, up to seconds) run off the executor
(``NodeHandle.run_in_background``), so joint states keep flowing in while one runs; samples
that arrive meanwhile are queued and given to the estimator when it is done. Tuning
parameters are the members of :class:`~diffsim_ros.estimation.online.OnlineEstimatorConfig`;
they are read at start-up only (``ros2 param set`` is answered with why not).

Logging: an accepted estimate at INFO; a rejected fit at WARN with its reason, once per kind
of reason (the reason without its numbers, which change every update), then at DEBUG; a
detected change at INFO; the routine "collecting data" outcomes at DEBUG.
"""

import re
from dataclasses import dataclass, replace

import numpy as np

from diffsim_ros.control import JointStateBounds
from diffsim_ros.dynamics.regressor import joint_torque_regressor
from diffsim_ros.estimation.online import OnlineEstimatorConfig
from diffsim_ros.estimation.online_estimators import cpu_share, make_online_estimator, refresh_period
from diffsim_ros.estimation.torque_estimation import StreamingTorqueEstimator
from diffsim_ros.io.calibration import Calibration, check_output_path, write_calibration
from diffsim_ros.io.ros_messages import NS_PER_S, JointNameMap, MessageConversionError, float64_multi_array_to_array, \
    joint_command_to_array, joint_state_msg
from diffsim_ros.io.ros_types import EMPTY, FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE, POSE_STAMPED
from diffsim_ros.model.config import controller_order
from diffsim_ros.nodes.messages import estimates_msg
from diffsim_ros.nodes.robot import RobotNodeConfig, default_calibration_path, joint_states_topic_param, load_robot, \
    robot_topic, set_threads, threads_param
from diffsim_ros.nodes.services import trigger_services
from diffsim_ros.resources import resolve_resource
from diffsim_ros.runtime import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, declare_config, param
from diffsim_ros.runtime.diagnostics import DIAGNOSTIC_ARRAY, OK, WARN, InputRates, diagnostic_array_msg, \
    input_status, node_label, status
from diffsim_ros.runtime.inputs import STALE, PoseWorkspace, joint_state_input, pose_input
from diffsim_ros.runtime.params import check_ranges, group, refuse_run_time_changes
from diffsim_ros.runtime.rclpy_backend import exit_process, run_node
from diffsim_ros.runtime.warmup import KernelWarmup, PlainJointStateBounds

__all__ = ["EstimatorNode", "EstimatorNodeConfig", "main", "rejection_kind"]

_CPU_UPDATES = 50  # the estimator's CPU on /diagnostics: over its last this many updates
_UPDATE_CHECK_PERIOD = 0.25  # [s] how often the node asks the estimator whether an update is due
_DIAGNOSTICS_PERIOD = 1.0  # [s]
_TORQUE_ESTIMATES = ("simulator", "inverse_dynamics", "off")
# Update outcomes expected while data build up (logged at DEBUG).
_ROUTINE = ("collecting data", "nothing held back")
_CHANGE = "change detected"
# A number in a reason (not a digit of a name such as left_e1): left out of its kind.
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def rejection_kind(reason):
    """The kind of an update's rejection: its reason with the numbers left out.

    >>> rejection_kind("rejected: predicts the held-back data worse (1.31 > 1.2)")
    'rejected: predicts the held-back data worse (# > #)'
    """
    return _NUMBER.sub("#", reason)


@dataclass(frozen=True)
class EstimatorNodeConfig(RobotNodeConfig):
    """Parameters of estimator_node (tuning: see OnlineEstimatorConfig)."""

    calibration_output: str = param("", "where to save the calibration ('' for $ROS_HOME/diffsim_ros/<robot>_calibration.yaml)")
    save_on_shutdown: bool = param(True, "save the calibration when the node shuts down")
    camera_frame: str = param("", "tracked link of the camera poses (default: the robot config's camera.tracked_frame)")
    joint_states_topic: str = joint_states_topic_param()
    camera_topic: str = param("", "camera pose topic (default: the robot config's topics.camera_pose)")
    commanded_torques_topic: str = param("", "commanded torque topic whose torques explain the motion "
                                             "('': none, the measured efforts do)")
    commanded_torques_type: str = param(FLOAT64_MULTI_ARRAY, "std_msgs/msg/Float64MultiArray (robot.controller_joints' "
                                                             "order, default model order) "
                                                             "or baxter_core_msgs/msg/JointCommand (torque mode)")
    input_timeout: float = param(0.5, "inputs older than this are reported stale [s]")
    torque_estimate: str = param("simulator", "estimated torques: simulator (through the compiled rigid-body step, "
                                              "one per joint state), inverse_dynamics (at torque_rate_hz) or off")
    torque_rate_hz: float = param(10.0, "estimated torque rate [Hz] of torque_estimate inverse_dynamics")
    torque_max_period: float = param(0.1, "longest joint-state gap [s] a simulator torque estimate bridges")
    # The estimator's tuning (groups, window, rests, updates); bounds come from bounds.*.
    estimation: OnlineEstimatorConfig = group(OnlineEstimatorConfig, "", exclude=("bounds",),
                                              kinds={"groups": list[str]})
    bound_names: list[str] = param([], "parameters with plausibility bounds", name="bounds.names")
    bound_lower: list[float] = param([], "lower bounds, one per bounds.names", name="bounds.lower")
    bound_upper: list[float] = param([], "upper bounds, one per bounds.names", name="bounds.upper")
    threads: int = threads_param()
    update_niceness: int = param(10, "CPU niceness of the background updates (0-19), so that control and "
                                     "drivers on the same cores keep their rate")

    def validate(self):
        if not len(self.bound_names) == len(self.bound_lower) == len(self.bound_upper):
            raise ValueError("bounds.names, bounds.lower and bounds.upper need the same length")
        if self.commanded_torques_type not in (FLOAT64_MULTI_ARRAY, JOINT_COMMAND):
            raise ValueError(f"commanded_torques_type must be {FLOAT64_MULTI_ARRAY} or {JOINT_COMMAND}, "
                             f"got {self.commanded_torques_type!r}")
        if not 0 <= self.update_niceness <= 19:
            raise ValueError(f"update_niceness must be in 0..19, got {self.update_niceness}")
        if self.torque_estimate not in _TORQUE_ESTIMATES:
            raise ValueError(f"torque_estimate must be one of {_TORQUE_ESTIMATES}, got {self.torque_estimate!r}")
        check_ranges(self, positive=("input_timeout", "torque_rate_hz", "torque_max_period", "threads"))

    @property
    def groups(self):
        """Estimated parameter groups."""
        return self.estimation.groups

    def estimator_config(self):
        """OnlineEstimatorConfig of these parameters (ValueError for inconsistent tuning)."""
        bounds = {n: (lo, hi) for n, lo, hi in zip(self.bound_names, self.bound_lower, self.bound_upper)}
        return replace(self.estimation, bounds=bounds)


class EstimatorNode:
    """Online estimator node (module docstring).

    Attributes:
        estimator: OnlineEstimator.
        joints: InputMonitor of the joint states; ``camera``: of the camera poses (or None).
        published: Estimates messages published.
        saved: Paths written.
        busy: Whether an update is running (off the executor).
        last_update: OnlineUpdate of the last update (None before the first).
    """

    def __init__(self, handle):
        self.handle = handle
        self.config = cfg = declare_config(handle, EstimatorNodeConfig)
        set_threads(cfg.threads)
        self.robot = load_robot(cfg.robot_config, cfg.calibration_file)
        raw_camera = self.robot.config.raw.get("camera") or {}
        camera_frame = cfg.camera_frame or raw_camera.get("tracked_frame")
        use_camera = "camera" in cfg.groups
        self._camera_frame = camera_frame if use_camera else None
        try:
            self.estimator = self._new_estimator()
        except ValueError as err:
            raise ValueError(f"node '{handle.name}': invalid estimator parameters: {err}") from None
        self.busy, self.last_update = False, None
        self._accepted_at_start = ({}, {})  # (values, stddev) accepted when the running update started
        self._rejections_logged = set()  # kinds of rejection logged at WARN
        self._pending = []  # samples that arrived while an update ran: (add method name, args)
        self._reset_requested = False
        self.output_path = resolve_resource(cfg.calibration_output) if cfg.calibration_output else \
            default_calibration_path(self.robot.config.name)
        if cfg.save_on_shutdown:  # hours of estimation must not end in an unwritable path
            check_output_path(self.output_path, force=True, kind="file", what="calibration_output")
        self.published, self.saved = 0, []
        joint_topic = robot_topic(self.robot.config, "joint_states", cfg.joint_states_topic) or "/joint_states"
        logger = handle.get_logger()
        self.joints = joint_state_input(self.robot.joint_names, cfg.input_timeout, joint_topic,
                                        bounds=PlainJointStateBounds(JointStateBounds(self.robot.model)), logger=logger)
        self._rates = {"joints": InputRates(), "camera": InputRates()}
        handle.create_subscription(JOINT_STATE, joint_topic, self._on_joint_state, SENSOR_QOS)
        self.camera = None
        if use_camera:
            camera_topic = robot_topic(self.robot.config, "camera_pose", cfg.camera_topic) or "/camera/pose"
            self.camera = pose_input(cfg.input_timeout, camera_topic, logger=logger,
                                     workspace=PoseWorkspace.from_config(raw_camera.get("workspace"), "camera.workspace"))
            handle.create_subscription(POSE_STAMPED, camera_topic, self._on_camera_pose, SENSOR_QOS)
        self.commands_received = self.commands_dropped = 0
        command_topic = cfg.commanded_torques_topic
        if command_topic:
            self._joint_map = JointNameMap(self.robot.joint_names)
            # A Float64MultiArray holds the effort controller's joints in its order (robot.controller_joints).
            self._command_order = controller_order(self.robot.joint_names, self.robot.config.controller_joints)
            handle.create_subscription(cfg.commanded_torques_type, command_topic, self._on_command, SENSOR_QOS)
        handle.create_subscription(EMPTY, "~/save", self._on_save, COMMAND_QOS)
        self._serve_save = trigger_services(self, "save_calibration", "calibration", None,  # saves while busy
                                            "estimator reset when the running update ends",
                                            "estimator reset to the start-up model")
        self.diagnostics = handle.create_publisher(DIAGNOSTIC_ARRAY, "/diagnostics", 10)
        handle.create_timer(_DIAGNOSTICS_PERIOD, self._publish_diagnostics)
        self.estimates = handle.create_publisher(FLOAT64_MULTI_ARRAY, "~/estimates", LATCHED_QOS)
        self.torques = handle.create_publisher(JOINT_STATE, "~/estimated_torques", SENSOR_QOS)
        # The streaming estimator refreshes every refresh_period (0.1 s): asked at least that often.
        handle.create_timer(min(_UPDATE_CHECK_PERIOD, refresh_period(cfg.estimation)), self._update)
        self.torque_estimator = None
        if cfg.torque_estimate == "simulator":
            self.torque_estimator = StreamingTorqueEstimator(self.robot.model, max_period=cfg.torque_max_period)
        elif cfg.torque_estimate == "inverse_dynamics":
            handle.create_timer(1.0 / cfg.torque_rate_hz, self._publish_torques)
        # Never a compile on the executor: kernels not in the cache are compiled by a child process.
        self.warmup = KernelWarmup(self._kernel_families(), self._prime_kernels, logger, enabled=handle.owns_process)
        handle.add_on_shutdown(self.warmup.close)
        if cfg.save_on_shutdown:
            handle.add_on_shutdown(self.save)
        refuse_run_time_changes(handle, cfg)
        handle.get_logger().info(f"estimating {list(cfg.groups)} from {joint_topic}; calibration -> {self.output_path}")

    def _kernel_families(self):
        """Kernel families of the compiled paths: the torque step and the rigid updates' joint-torque
        regressor (family ``rigid``), and the PBD updates' kernels."""
        rigid = self.torque_estimator is not None or self.config.estimation.model == "rigid"
        return (["rigid"] if rigid else []) + (["pbd", "pbd_mpc"] if self.config.estimation.model == "pbd" else [])

    def _prime_kernels(self):
        """The compiled regressor and torque step once on throwaway data (loads their kernels; off the executor)."""
        model = self.robot.model
        q, qd = 0.5 * (model.lower.numpy() + model.upper.numpy()), np.zeros(model.nq)
        if self.config.estimation.model == "rigid":
            joint_torque_regressor(model, q, qd, qd)
        if self.torque_estimator is not None:
            estimator = StreamingTorqueEstimator(model, max_period=self.config.torque_max_period)
            estimator.add(0.0, q, qd)
            estimator.add(0.5 * self.config.torque_max_period, q, qd)

    def _new_estimator(self):
        return make_online_estimator(self.robot.model, self.config.estimator_config(), camera_frame=self._camera_frame)

    # ------------------------------------------------------------------ inputs
    def _feed(self, method, *args):
        """Give a sample to the estimator, or queue it while an update runs on it."""
        if self.busy:
            self._pending.append((method, args))
        else:
            getattr(self.estimator, method)(*args)

    def _stamp(self, sample):
        """Sample time [s]: the header stamp, or the receive time when the stamp is unset."""
        return (sample.stamp_ns or self.handle.now_ns()) / NS_PER_S

    def _on_joint_state(self, msg):
        sample = self.joints.update(msg, self.handle.now_ns())  # logs what it drops
        if sample is None:
            return
        self._feed("add_joint_state", self._stamp(sample), sample.positions, sample.velocities, sample.efforts)
        if self.torque_estimator is not None:
            self._estimate_torques(sample)

    def _estimate_torques(self, sample):
        """The torque since the previous joint state, through the simulator (needs velocities).

        While its kernels warm up, the causal inverse dynamics instead (torch: nothing to compile).
        """
        if not self.warmup.ready:
            self._publish_torques()
            return
        if sample.velocities is None or not np.all(np.isfinite(sample.velocities)):
            self.torque_estimator.reset()
            return
        tau = self.torque_estimator.add(self._stamp(sample), sample.positions, sample.velocities)
        if tau is not None and np.all(np.isfinite(tau)):
            stamp_ns = sample.stamp_ns or self.handle.now_ns()
            self.torques.publish(joint_state_msg(self.handle.messages, stamp_ns, self.robot.joint_names,
                                                 sample.positions, efforts=tau))

    def _on_camera_pose(self, msg):
        sample = self.camera.update(msg, self.handle.now_ns())
        if sample is not None:
            self._feed("add_camera_pose", self._stamp(sample), sample.position, sample.quaternion)

    def _on_command(self, msg):
        """A commanded torque, applied from its receive time on (the messages carry no stamp)."""
        self.commands_received += 1
        try:
            if self.config.commanded_torques_type == JOINT_COMMAND:
                if int(msg.mode) != 3:
                    return  # position or velocity commands are not torques
                tau = joint_command_to_array(msg, self._joint_map)
            else:
                data = float64_multi_array_to_array(msg, len(self.robot.joint_names))
                tau = np.empty_like(data)
                tau[self._command_order] = data
        except MessageConversionError as err:
            self.commands_dropped += 1
            if self.commands_dropped == 1 or self.commands_dropped % 100 == 0:
                self.handle.get_logger().warning(f"commanded torques dropped ({self.commands_dropped}): {err}")
            return
        self._feed("add_commanded_torque", self.handle.now_ns() / NS_PER_S, tau)

    # ------------------------------------------------------------------ updates
    def _update(self):
        if self.joints.watchdog.poll(self.handle.now_ns()) == STALE:
            self.handle.get_logger().warning("joint states stale: no new data for the estimator")
        latest = self.joints.latest
        if latest is None or self.busy or not self.warmup.ready:  # an update runs compiled kernels
            return
        self._accepted_at_start = self._accepted()  # the estimator is the update's until it ends
        self.busy = True
        estimator, now = self.estimator, self._stamp(latest)
        self.handle.run_in_background(lambda: estimator.update(now), self._update_done, self.config.update_niceness)

    def _update_done(self, update, error):
        """Back on the node's callbacks: catch up on queued samples, then publish an accepted update."""
        self.busy = False
        pending, self._pending = self._pending, []
        if self._reset_requested:  # requested while the update ran: its result is discarded too
            self._reset()
            return
        for method, args in pending:
            getattr(self.estimator, method)(*args)
        if error is not None:
            self.handle.get_logger().error(f"estimator update failed: {type(error).__name__}: {error}")
            return
        if update is None:
            return
        self.last_update = update
        if not update.accepted:
            self._log_not_accepted(update)
            return
        self.estimates.publish(estimates_msg(self.handle.messages, self.estimator.values, self.estimator.stddev))
        if self.torque_estimator is not None:
            self.torque_estimator.set_model(self.estimator.model)
        self.published += 1
        summary = ", ".join(f"{k}={np.round(v, 4).tolist()}" for k, v in self.estimator.values.items())
        self.handle.get_logger().info(
            f"estimate accepted ({update.poses} poses, {update.motion_seconds:.0f} s of motion, held-back error {update.holdout_rms_before:.3g} -> "
            f"{update.holdout_rms_after:.3g} N·m): {summary}")

    def _log_not_accepted(self, update):
        """Routine outcomes at DEBUG, a change at INFO, a rejection at WARN once per kind (then DEBUG)."""
        logger, reason = self.handle.get_logger(), update.reason
        line = f"update not accepted ({update.poses} poses): {reason}"
        if reason.startswith(_ROUTINE):
            logger.debug(line)
        elif reason.startswith(_CHANGE):
            logger.info(line)
        elif rejection_kind(reason) in self._rejections_logged:
            logger.debug(line)
        else:
            self._rejections_logged.add(rejection_kind(reason))
            logger.warning(line)

    def _publish_torques(self):
        latest = self.joints.latest
        if latest is None or self.busy or not self.joints.is_fresh(self.handle.now_ns()):
            return  # (the estimator is not ours to read while an update runs)
        tau = self.estimator.estimated_torques()
        if tau is not None:
            self.torques.publish(joint_state_msg(self.handle.messages, self.handle.now_ns(), self.robot.joint_names,
                                                 latest.positions, efforts=tau))

    # ------------------------------------------------------------------ calibration file
    def _accepted(self):
        """(values, stddev) copies of the estimator's accepted estimate (not while an update runs)."""
        copy = lambda values: {name: np.copy(value) for name, value in values.items()}  # noqa: E731
        return copy(self.estimator.values), copy(self.estimator.stddev)

    def calibration(self):
        """The last accepted estimate as a Calibration (None before the first accepted update).

        While an update runs, the estimator is the update's: the estimate accepted when it
        started is the last accepted one (an estimate it accepts is published when it ends).
        """
        values, stddev = self._accepted_at_start if self.busy else self._accepted()
        if not values:
            return None
        return Calibration(robot=self.robot.config.name, parameters=values, stddev=stddev,
                           groups=tuple(self.config.groups))

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
        """``~/save`` (std_msgs/msg/Empty): as the ``~/save_calibration`` service."""
        self._serve_save(None)

    def _reset(self):
        """``~/reset``: forget rests and estimates; start again from the start-up model."""
        self.estimator, self.last_update, self._reset_requested = self._new_estimator(), None, False
        self._rejections_logged = set()
        if self.torque_estimator is not None:
            self.torque_estimator.set_model(self.estimator.model)
        self.handle.get_logger().info("estimator reset: rests and estimates forgotten")

    # ------------------------------------------------------------------ diagnostics
    def _publish_diagnostics(self):
        now_ns, name = self.handle.now_ns(), node_label(self.handle)
        statuses = [input_status(f"{name}: {self.joints.what}", self.joints, self._rates["joints"], now_ns)]
        if self.camera is not None:
            statuses.append(input_status(f"{name}: {self.camera.what}", self.camera, self._rates["camera"], now_ns))
        statuses += [self.warmup.status(name), self._health()]
        self.diagnostics.publish(diagnostic_array_msg(self.handle.messages, now_ns, statuses))

    def _health(self):
        last = self.last_update
        values = {"groups": ",".join(self.config.groups), "update running": self.busy,
                  "estimates published": self.published, "queued samples": len(self._pending)}
        if not self.busy:
            values["rest poses"] = self.estimator.pose_count
            share = cpu_share(self.estimator.updates, _CPU_UPDATES)
            values["estimator CPU [% of a core]"] = f"{100 * share:.1f}" if share == share else "n/a"
        if last is None:
            return status(WARN if not self.published else OK, f"{node_label(self.handle)}: estimator",
                          "no update yet (collecting rests)", values)
        values.update({"last update [s]": f"{last.time:.3f}", "last update accepted": last.accepted,
                       "held-back error before (noise units)": f"{last.holdout_rms_before:.4g}",
                       "held-back error after (noise units)": f"{last.holdout_rms_after:.4g}"})
        level = OK if last.accepted or self.published else WARN
        return status(level, f"{node_label(self.handle)}: estimator", last.reason, values)


def main(args=None):
    """Entry point of ``ros2 run diffsim_ros estimator_node`` (ends the process: exit code 0, or 1 after a start-up error)."""
    exit_process(run_node(EstimatorNode, "estimator", args))


if __name__ == "__main__":
    main()
