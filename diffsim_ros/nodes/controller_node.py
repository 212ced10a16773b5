"""controller_node: gravity compensation, joint impedance or MPC torque commands to hardware.

Every cycle (``rate_hz``, >= 100 Hz for Baxter) the node takes the newest valid joint state,
computes the mode's torques on the current model and sends them through the
:class:`~diffsim_ros.control.SafetyLayer` (watchdog, NaN guard, joint-limit zone, effort and
rate limits) to the output (:mod:`diffsim_ros.nodes.outputs`). When joint states are stale
(older than ``safety.state_timeout``) or invalid, it stops commanding torque: Baxter — it
stops publishing, so the robot falls back to position mode; ros2_control — it publishes the
configured hold command. With ``follow_estimates`` it switches to each new model the
estimator publishes.

Topics:

* subscribes ``joint_states_topic`` (sensor_msgs/msg/JointState, SENSOR_QOS), mapped by name;
* subscribes ``estimates_topic`` (std_msgs/msg/Float64MultiArray, LATCHED_QOS; layout in
  :mod:`diffsim_ros.nodes.messages`) when ``follow_estimates``;
* publishes the torque command (see :mod:`~diffsim_ros.nodes.outputs`, COMMAND_QOS) and, for
  Baxter while the model's gravity term is active, ``suppress_gravity_compensation``;
* publishes ``~/reference`` (sensor_msgs/msg/JointState, SENSOR_QOS): the desired positions
  and velocities (impedance and MPC).
"""

from dataclasses import dataclass

import numpy as np

from diffsim_ros.control import (
    ControlLoop,
    GravityCompensation,
    JointImpedanceController,
    ModelPredictiveController,
    MPCSettings,
    SafetyConfig,
    SafetyLayer,
    TorqueMap,
    check_within_limits,
)
from diffsim_ros.control.simulators import mpc_simulator
from diffsim_ros.io.ros_messages import MessageConversionError, NS_PER_S, joint_state_msg
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, JOINT_STATE
from diffsim_ros.nodes.messages import estimates_from_msg
from diffsim_ros.nodes.outputs import BAXTER, CommandOutput, safety_output
from diffsim_ros.nodes.references import make_reference, waypoint_array
from diffsim_ros.nodes.robot import DEFAULT_ROBOT_CONFIG, load_robot, robot_topic, set_threads
from diffsim_ros.resources import resolve_resource
from diffsim_ros.runtime import LATCHED_QOS, SENSOR_QOS, declare_config, param
from diffsim_ros.runtime.faults import FRESH, STALE, joint_state_input
from diffsim_ros.runtime.rclpy_backend import run_node

__all__ = ["MODES", "ControllerNode", "ControllerNodeConfig", "main"]

MODES = ("gravity_compensation", "impedance", "mpc")
_BAXTER_MIN_RATE = 100.0  # [Hz] Baxter leaves torque mode when commands stop for 0.2 s
# Impedance model terms that include gravity: the robot's own compensation must be suppressed.
_GRAVITY_TERMS = ("analytic", "map", "gravity")


@dataclass(frozen=True)
class ControllerNodeConfig:
    """Parameters of controller_node (per-joint lists: one value for all joints, or one per joint)."""

    robot_config: str = param(DEFAULT_ROBOT_CONFIG, "robot config YAML (path or package:// URI)")
    calibration_file: str = param("", "calibration.yaml applied to the nominal model at start-up ('' for none)")
    mode: str = param("gravity_compensation", "gravity_compensation, impedance or mpc")
    output: str = param(BAXTER, "baxter (JointCommand) or ros2_control (Float64MultiArray)")
    side: str = param("left", "Baxter limb: /robot/limb/<side>/joint_command")
    controller_name: str = param("effort_controller", "ros2_control: commands on /<controller_name>/commands")
    controller_joints: list[str] = param([], "ros2_control: the controller's joints in its order (default: model order)")
    joint_states_topic: str = param("", "joint state topic (default: the robot config's topics.joint_states)")
    rate_hz: float = param(200.0, "command rate [Hz] (Baxter needs >= 100)")
    follow_estimates: bool = param(True, "use each model the estimator publishes")
    estimates_topic: str = param("/estimator/estimates", "estimator's parameter estimates")
    gravity_scale: float = param(1.0, "gravity compensation factor")
    stiffness: list[float] = param([50.0], "impedance stiffness K [N·m/rad]", name="impedance.stiffness")
    damping: list[float] = param([5.0], "impedance damping D [N·m·s/rad]", name="impedance.damping")
    model_term: str = param("analytic", "impedance model term: analytic, map, gravity or none", name="impedance.model_term")
    model_scale: float = param(1.0, "impedance model-term factor", name="impedance.model_scale")
    torque_map: str = param("", "torque map .npz (model_term map)", name="impedance.torque_map")
    mpc_dt: float = param(0.01, "MPC simulator step [s]", name="mpc.dt")
    mpc_simulator: str = param("rigid", "MPC prediction simulator (one substep): rigid or pbd (slower)",
                               name="mpc.simulator")
    mpc_horizon: int = param(3, "MPC horizon [steps]", name="mpc.horizon")
    mpc_iterations: int = param(2, "MPC Gauss-Newton iterations per cycle", name="mpc.max_iterations")
    mpc_initialization: str = param("previous", "MPC initialization: zero, previous or gravity", name="mpc.initialization")
    mpc_jacobian_every: int = param(1, "refresh the MPC Jacobian every N cycles", name="mpc.jacobian_every")
    mpc_position_tolerance: float = param(1e-3, "MPC position error worth one cost unit [rad]",
                                          name="mpc.position_tolerance")
    mpc_velocity_tolerance: float = param(2e-2, "MPC velocity error worth one cost unit [rad/s]",
                                          name="mpc.velocity_tolerance")
    mpc_smoothness_tolerance: float = param(5.0, "MPC torque change worth one cost unit [N·m]",
                                            name="mpc.smoothness_tolerance")
    mpc_effort_tolerance: float = param(100.0, "MPC deviation from the holding torque worth one cost unit [N·m]",
                                        name="mpc.effort_tolerance")
    waypoints: list[float] = param([], "reference waypoints [rad], flat k x n (empty: hold the start)",
                                   name="reference.waypoints")
    move_duration: float = param(2.0, "minimum-jerk move duration [s]", name="reference.move_duration")
    hold_duration: float = param(1.0, "rest at each waypoint [s]", name="reference.hold_duration")
    loop: bool = param(False, "repeat the waypoints", name="reference.loop")
    effort_limit: list[float] = param([], "effort limits [N·m] (empty: URDF limits)", name="safety.effort_limit")
    torque_rate_limit: list[float] = param([200.0], "torque rate limit [N·m/s]", name="safety.torque_rate_limit")
    limit_margin: float = param(0.1, "joint-limit zone width [rad]", name="safety.limit_margin")
    limit_stiffness: float = param(50.0, "joint-limit zone stiffness [N·m/rad]", name="safety.limit_stiffness")
    limit_damping: float = param(5.0, "joint-limit zone damping [N·m·s/rad]", name="safety.limit_damping")
    state_timeout: float = param(0.05, "oldest joint state commanded from [s]", name="safety.state_timeout")
    hold_command: list[float] = param([], "ros2_control: torques published when stopped [N·m] (empty: zeros)",
                                      name="safety.hold_command")
    threads: int = param(1, "torch threads")

    def validate(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        safety_output(self.output)
        if self.output == BAXTER and self.rate_hz < _BAXTER_MIN_RATE:
            raise ValueError(f"rate_hz {self.rate_hz} < {_BAXTER_MIN_RATE}: Baxter leaves torque mode without commands")
        if not self.rate_hz > 0:
            raise ValueError("rate_hz must be positive")


def _per_joint(values):
    """A parameter list as a scalar (one value) or a sequence (per joint) for the control layer."""
    values = list(values)
    return values[0] if len(values) == 1 else (values or None)


class _DeferredReference:
    """The reference, created when the first joint state gives the start configuration."""

    def __init__(self):
        self.target = None

    def __call__(self, t):
        return self.target(t)


class ControllerNode:
    """Torque controller behind the safety layer (module docstring).

    Attributes:
        model: The model commanded from (updated from the estimator's estimates).
        safety: SafetyLayer.
        status: SafetyStatus of the last cycle (None before the first).
        model_updates: Estimates applied.
    """

    def __init__(self, handle):
        self.handle = handle
        self.config = cfg = declare_config(handle, ControllerNodeConfig)
        set_threads(cfg.threads)
        self.robot = load_robot(cfg.robot_config, cfg.calibration_file)
        self.model = self.robot.model
        self.joint_names = self.robot.joint_names
        self.waypoints = waypoint_array(cfg.waypoints, len(self.joint_names))
        check_within_limits(self.waypoints, self.model, "reference.waypoints")
        self.reference = _DeferredReference()
        self.controller = self._controller(self.model)
        self.safety = SafetyLayer(self.model, self._safety_config(cfg))
        self.loop = ControlLoop(self.controller, self.safety, self.model, self.robot.config.bounds)
        self.output = CommandOutput(handle, cfg.output, self.joint_names, cfg.side, cfg.controller_name,
                                    cfg.controller_joints)
        self.status, self.model_updates, self.stopped = None, 0, False
        self._previous = None  # (stamp [s], q) for velocities when the state has none
        self._state = None  # (q [rad], qd [rad/s]) of the newest accepted joint state
        self._epoch_ns = None  # node time of control time 0
        topic = robot_topic(self.robot.config, "joint_states", cfg.joint_states_topic) or "/joint_states"
        self.joints = joint_state_input(self.joint_names, cfg.state_timeout, topic, bounds=self.safety.state_bounds,
                                        logger=handle.get_logger())
        handle.create_subscription(JOINT_STATE, topic, self._on_joint_state, SENSOR_QOS)
        if cfg.follow_estimates:
            handle.create_subscription(FLOAT64_MULTI_ARRAY, cfg.estimates_topic, self._on_estimates, LATCHED_QOS)
        self.reference_publisher = handle.create_publisher(JOINT_STATE, "~/reference", SENSOR_QOS)
        self.timer = handle.create_timer(1.0 / cfg.rate_hz, self._tick)
        handle.add_on_shutdown(self.stop)
        handle.get_logger().info(f"{cfg.mode} on {len(self.joint_names)} joints -> {self.output.topic} at {cfg.rate_hz:g} Hz")

    # ------------------------------------------------------------------ set-up
    def _controller(self, model):
        cfg = self.config
        if cfg.mode == "gravity_compensation":
            return GravityCompensation(model, cfg.gravity_scale)
        if cfg.mode == "impedance":
            tmap = TorqueMap.load(resolve_resource(cfg.torque_map), model) if cfg.torque_map else None
            return JointImpedanceController(model, _per_joint(cfg.stiffness), _per_joint(cfg.damping), self.reference,
                                            cfg.model_term, cfg.model_scale, tmap)
        settings = MPCSettings(
            horizon=cfg.mpc_horizon, max_iterations=cfg.mpc_iterations, initialization=cfg.mpc_initialization,
            jacobian_every=cfg.mpc_jacobian_every, position_tolerance=cfg.mpc_position_tolerance,
            velocity_tolerance=cfg.mpc_velocity_tolerance, smoothness_tolerance=cfg.mpc_smoothness_tolerance,
            effort_tolerance=cfg.mpc_effort_tolerance)
        return ModelPredictiveController(mpc_simulator(model, cfg.mpc_dt, cfg.mpc_simulator), self.reference, settings)

    @staticmethod
    def _safety_config(cfg):
        return SafetyConfig(
            output=safety_output(cfg.output), effort_limit=_per_joint(cfg.effort_limit),
            torque_rate_limit=_per_joint(cfg.torque_rate_limit), limit_margin=cfg.limit_margin,
            limit_stiffness=cfg.limit_stiffness, limit_damping=cfg.limit_damping,
            state_timeout=cfg.state_timeout, hold_command=_per_joint(cfg.hold_command),
        )

    @property
    def gravity_active(self):
        """Whether our commands include gravity compensation (Baxter's own must be suppressed)."""
        return self.config.mode != "impedance" or self.config.model_term in _GRAVITY_TERMS

    def control_time(self, now_ns):
        """Controller time [s] of a node time [ns]: seconds since the node's first clock reading.

        The controllers, the reference and the safety layer work in float seconds; counted from
        1970 they would resolve only ~0.2 µs, enough to misjudge a 10 ms cycle as late.
        """
        if self._epoch_ns is None and now_ns > 0:
            self._epoch_ns = int(now_ns)
        return (now_ns - (self._epoch_ns or 0)) / NS_PER_S

    # ------------------------------------------------------------------ inputs
    def _on_joint_state(self, msg):
        if self.stopped:
            return
        sample = self.joints.update(msg, self.handle.now_ns())  # logs what it drops
        if sample is None:
            return
        self._state = (sample.positions, self._velocities(sample))
        if self.reference.target is None:
            cfg = self.config
            start = np.clip(sample.positions, self.safety.lower, self.safety.upper)  # never hold beyond a limit
            t_start = self.loop.reference_time(self.control_time(self.handle.now_ns()))
            self.reference.target = make_reference(start, self.waypoints, t_start,
                                                   cfg.move_duration, cfg.hold_duration, cfg.loop)

    def _on_estimates(self, msg):
        logger = self.handle.get_logger()
        try:
            values, _ = estimates_from_msg(msg, self.config.estimates_topic)
        except MessageConversionError as err:
            logger.error(f"estimates not applied: {err}")
            return
        decision = self.loop.apply_estimates(values)  # only plausible estimates; a bad one must not reach the arm
        (logger.info if decision.applied else logger.error)(decision.message)
        self.model, self.model_updates = self.loop.model, self.loop.model_updates

    def _velocities(self, sample):
        """Measured velocities [rad/s], or a difference of the last two samples when none are published."""
        stamp = self.control_time(sample.stamp_ns or self.joints.watchdog.last_ns)
        previous, self._previous = self._previous, (stamp, sample.positions, self.joints.epoch)
        if sample.velocities is not None:
            return sample.velocities
        if previous is None or previous[2] != self.joints.epoch:  # never difference across a time jump
            return np.zeros_like(sample.positions)
        return (sample.positions - previous[1]) / (stamp - previous[0])  # stamps strictly increase

    # ------------------------------------------------------------------ the cycle
    def _tick(self):
        if self.stopped:
            return
        now_ns = self.handle.now_ns()
        t = self.control_time(now_ns)
        self._log_watchdog(now_ns)
        q = qd = state_time = None
        if self._state is not None:
            q, qd = self._state
            state_time = self.control_time(self.joints.watchdog.last_ns)
        command, status = self.loop.step(t, q, qd, state_time, fresh=self.joints.is_fresh(now_ns))
        if self.loop.error is not None:
            self.handle.get_logger().error(f"{self.config.mode} failed: {self.loop.error}", throttle_duration_sec=1.0)
        self._log_status(status)
        if command is not None:
            self.output.publish(command)
            if status.active and self.gravity_active:
                self.output.suppress_gravity_compensation()
        if self.reference.target is not None and self.config.mode != "gravity_compensation":
            self._publish_reference(now_ns, self.loop.reference_time(t))

    def _publish_reference(self, now_ns, t):
        q_d, qd_d, _ = self.reference(t)
        self.reference_publisher.publish(joint_state_msg(self.handle.messages, now_ns, self.joint_names, q_d, qd_d))

    def _log_watchdog(self, now_ns):
        change = self.joints.watchdog.poll(now_ns)
        logger = self.handle.get_logger()
        if change == STALE:
            stop = "stop publishing (robot falls back to position mode)" if self.config.output == BAXTER else "hold command"
            logger.warning(f"joint states stale (> {self.config.state_timeout:g} s): torque commands stopped, {stop}")
        elif change == FRESH:
            logger.info("joint states fresh: commanding torque")

    def _log_status(self, status):
        previous, self.status = self.status, status
        if status.reason not in ("ok", "stale_state", "no_state") and (previous is None or previous.reason != status.reason):
            detail = f": {status.detail}" if status.detail else ""
            self.handle.get_logger().warning(f"safety layer stopped the command: {status.reason}{detail} (faults {status.faults})")
        if status.clock_jumped:
            self.handle.get_logger().warning("clock jumped backwards: counted as no time elapsed, commanding on")
        if status.late:
            self.handle.get_logger().warning("command cycle late for the hardware's minimum rate", throttle_duration_sec=5.0)

    def stop(self):
        """Stop commanding for good (shutdown): ros2_control gets the hold command once."""
        if self.stopped:
            return
        self.stopped = True
        self.timer.cancel()
        command, _ = self.safety.stop(self.control_time(self.handle.now_ns()))
        if command is not None:
            self.output.publish(command)


def main(args=None):
    """Entry point of ``ros2 run diffsim_ros controller_node``."""
    run_node(ControllerNode, "controller", args)


if __name__ == "__main__":
    main()
