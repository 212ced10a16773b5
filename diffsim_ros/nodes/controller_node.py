"""controller_node: gravity compensation, joint impedance or MPC torque commands to hardware.

A lifecycle (managed) node: it commands torque only while *active* (``autostart``, default
true, configures and activates it at start-up; ``ros2 lifecycle set /controller deactivate``
stops the torque: Baxter falls back to position mode, ros2_control gets the hold: by default
the model's holding torque, ramped in and faded out after ``safety.hold_fade_after``).

Each cycle the node takes the newest valid joint state,
computes the mode's torques on the current model and sends them through the
:class:`~diffsim_ros.control.SafetyLayer` (watchdog, NaN guard, joint-limit zone, effort and
rate limits) to the output (:mod:`diffsim_ros.nodes.outputs`). When joint states are stale
(older than ``safety.state_timeout``) or invalid, it stops commanding torque: Baxter — it
stops publishing, so the robot falls back to position mode; ros2_control — it publishes the
hold (``safety.hold``, :mod:`diffsim_ros.control.safety`). With ``follow_estimates`` it
switches to each new model the estimator publishes.

Impedance with a torque map (``impedance.model_term: map``, ``impedance.torque_map``) follows
each new model at once (the map is conditioned on it through h(q) and M_jj(q)); with
``impedance.rebuild_map`` the exact map for the new model is rebuilt in a separate
low-priority process and swapped in when done (a newer model meanwhile starts another
rebuild). Diagnostics say whether the map in use is exact.

Topics:

* subscribes ``joint_states_topic`` (sensor_msgs/msg/JointState, SENSOR_QOS), mapped by name;
* subscribes ``estimates_topic`` (std_msgs/msg/Float64MultiArray, LATCHED_QOS; layout in
  :mod:`diffsim_ros.nodes.messages`) when ``follow_estimates``;
* publishes the torque command (see :mod:`~diffsim_ros.nodes.outputs`, COMMAND_QOS) and, for
  Baxter while the model's gravity term is active, ``suppress_gravity_compensation``;
* publishes ``~/reference`` (sensor_msgs/msg/JointState, SENSOR_QOS): the desired positions
  and velocities (impedance and MPC);
* publishes ``/diagnostics`` (diagnostic_msgs/msg/DiagnosticArray) every second: joint-state
  rate, drops and watchdog; lifecycle state, safety status, cycle latency, and the state period
  impedance limits its damping for (configured, or longer measured), and the kernel warm-up
  (``<node>: kernels``, :mod:`diffsim_ros.runtime.warmup`: no command until its kernels are loaded).

A cycle runs on each joint-state arrival (``control_trigger: joint_state``, the lowest
latency) or on a timer at ``rate_hz`` (``timer``); with ``joint_state`` the timer still runs
at ``rate_hz`` to notice stale joint states. Gains and limits (``gravity_scale``,
``impedance.stiffness|damping|model_scale``, ``safety.*``) can be changed at run time
(``ros2 param set``); a change is validated like the start-up parameters and rejected as a
whole if invalid.
"""

import time
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from diffsim_ros.control import (
    ControlError,
    ControlLoop,
    GravityCompensation,
    JointImpedanceController,
    JointVelocities,
    MPCSettings,
    SafetyConfig,
    SafetyLayer,
    TorqueMap,
    check_within_limits,
)
from diffsim_ros.control.mpc_fast import make_mpc
from diffsim_ros.control.safety import HOLD_FADE_TIME
from diffsim_ros.control.references import make_reference
from diffsim_ros.control.torque_map import rebuild_torque_map_in_process
from diffsim_ros.io.ros_messages import MessageConversionError, NS_PER_S, joint_state_msg
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, JOINT_STATE
from diffsim_ros.nodes.messages import estimates_from_msg
from diffsim_ros.nodes.outputs import BAXTER, CommandOutput, safety_output
from diffsim_ros.nodes.references import waypoint_array
from diffsim_ros.nodes.robot import RobotNodeConfig, check_realtime_priority, joint_states_topic_param, load_robot, \
    realtime_priority_param, realtime_scheduling, robot_topic, set_threads, threads_param
from diffsim_ros.resources import resolve_resource
from diffsim_ros.runtime import LATCHED_QOS, SENSOR_QOS, declare_config, param
from diffsim_ros.runtime.diagnostics import DIAGNOSTIC_ARRAY, ERROR, OK, WARN, Gaps, InputRates, diagnostic_array_msg, \
    input_status, node_label, status
from diffsim_ros.runtime.heap import GcPauses, frozen_objects
from diffsim_ros.runtime.inputs import FRESH, STALE, joint_state_input
from diffsim_ros.runtime.params import ParameterError, check_joint_lengths, check_ranges, config_values, group, \
    per_joint_value, updated_config
from diffsim_ros.runtime.rclpy_backend import exit_process, run_node
from diffsim_ros.runtime.warmup import KernelWarmup, PlainJointStateBounds
from diffsim_ros.sim.factory import make_simulator

__all__ = ["MODES", "TRIGGERS", "TUNABLE", "ControllerNode", "ControllerNodeConfig", "main"]

MODES = ("gravity_compensation", "impedance", "mpc")
TRIGGERS = ("timer", "joint_state")
_DIAGNOSTICS_PERIOD = 1.0  # [s]
_LATENCY_WINDOW = 2000  # cycles kept for the latency percentiles of the diagnostics
_BAXTER_MIN_RATE = 100.0  # [Hz] Baxter leaves torque mode when commands stop for 0.2 s
# Impedance model terms that include gravity: the robot's own compensation must be suppressed.
_GRAVITY_TERMS = ("analytic", "map", "map_servo", "gravity")


@dataclass(frozen=True)
class ControllerNodeConfig(RobotNodeConfig):
    """Parameters of controller_node (per-joint lists: one value for all joints, or one per joint)."""

    mode: str = param("gravity_compensation", "gravity_compensation, impedance or mpc")
    output: str = param(BAXTER, "baxter (JointCommand) or ros2_control (Float64MultiArray)")
    side: str = param("left", "Baxter limb: /robot/limb/<side>/joint_command")
    controller_name: str = param("effort_controller", "ros2_control: commands on /<controller_name>/commands")
    controller_joints: list[str] = param([], "ros2_control: the controller's joints in its order (default: the robot "
                                             "config's robot.controller_joints, else model order)")
    joint_states_topic: str = joint_states_topic_param()
    rate_hz: float = param(200.0, "command rate [Hz] (Baxter needs >= 100)")
    follow_estimates: bool = param(True, "use each model the estimator publishes")
    estimates_topic: str = param("/estimator/estimates", "estimator's parameter estimates")
    gravity_scale: float = param(1.0, "gravity compensation factor")
    stiffness: list[float] = param([50.0], "impedance stiffness K [N·m/rad]", name="impedance.stiffness", per_joint=True)
    damping: list[float] = param([5.0], "impedance damping D [N·m·s/rad]", name="impedance.damping", per_joint=True)
    state_period: float = param(0.01, "joint-state period [s] the damping acts on: D is limited where it would "
                                "destabilize the arm (0.01: Baxter's 100 Hz states; a longer measured period "
                                "is used instead; 0: D as given)",
                                name="impedance.state_period")
    model_term: str = param("analytic", "impedance model term: analytic, map, map_servo, gravity or none",
                            name="impedance.model_term")
    model_scale: float = param(1.0, "impedance model-term factor", name="impedance.model_scale")
    torque_map: str = param("", "torque map .npz (model terms map and map_servo)", name="impedance.torque_map")
    rebuild_map: bool = param(True, "rebuild the torque map for each new model in the background and swap it in",
                              name="impedance.rebuild_map")
    mpc_dt: float = param(0.01, "MPC simulator step [s]", name="mpc.dt")
    mpc_simulator: str = param("rigid", "MPC prediction simulator (one substep): rigid or pbd (slower)",
                               name="mpc.simulator")
    mpc: MPCSettings = group(MPCSettings, "mpc")
    waypoints: list[float] = param([], "reference waypoints [rad], flat k x n (empty: hold the start)",
                                   name="reference.waypoints")
    move_duration: float = param(2.0, "minimum-jerk move duration [s]", name="reference.move_duration")
    hold_duration: float = param(1.0, "rest at each waypoint [s]", name="reference.hold_duration")
    loop: bool = param(False, "repeat the waypoints", name="reference.loop")
    # The safety layer's settings; its output type follows `output`.
    safety: SafetyConfig = group(SafetyConfig, "safety", exclude=("output",), kinds={
        "effort_limit": list[float], "torque_rate_limit": list[float], "hold_command": list[float]},
        convert={"effort_limit": per_joint_value, "torque_rate_limit": per_joint_value,
                 "hold_command": per_joint_value})
    control_trigger: str = param("timer", "when a command is computed: timer (rate_hz) or joint_state (each arrival)")
    threads: int = threads_param()
    realtime_priority: int = realtime_priority_param("the command stream keeps its rate on busy cores")

    def validate(self):
        check_realtime_priority(self.realtime_priority)
        if self.control_trigger not in TRIGGERS:
            raise ValueError(f"control_trigger must be one of {TRIGGERS}, got {self.control_trigger!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        safety_output(self.output)
        if self.output == BAXTER and self.rate_hz < _BAXTER_MIN_RATE:
            raise ValueError(f"rate_hz {self.rate_hz} < {_BAXTER_MIN_RATE}: Baxter leaves torque mode without commands")
        if not self.rate_hz > 0:
            raise ValueError("rate_hz must be positive")
        if not self.state_period >= 0:
            raise ValueError(f"impedance.state_period must be >= 0 s, got {self.state_period!r}")
        check_ranges(self, positive=("mpc_dt", "move_duration", "threads"),
                     non_negative=("gravity_scale", "stiffness", "damping", "model_scale", "hold_duration"))


# Parameters that may change while the node runs (gains and limits); the others need a restart.
TUNABLE = frozenset({"gravity_scale", "impedance.stiffness", "impedance.damping", "impedance.model_scale"} |
                    {f"safety.{name}" for name in ("effort_limit", "torque_rate_limit", "limit_margin", "limit_stiffness",
                                                   "limit_damping", "state_timeout", "hold", "hold_command",
                                                   "hold_fade_after")})


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
        active: Whether the lifecycle state is active (torque may be commanded).
        latencies: Recent joint-state receipt -> command publish times [s] (event-driven cycles).
    """

    managed = True  # a lifecycle node: torque only while active

    def __init__(self, handle):
        self.handle = handle
        self.config = cfg = declare_config(handle, ControllerNodeConfig)
        set_threads(cfg.threads)
        self.robot = load_robot(cfg.robot_config, cfg.calibration_file)
        self.model = self.robot.model
        self.joint_names = self.robot.joint_names
        check_joint_lengths(cfg, len(self.joint_names), f"node '{handle.name}'")
        self.waypoints = waypoint_array(cfg.waypoints, len(self.joint_names))
        check_within_limits(self.waypoints, self.model, "reference.waypoints")
        self.reference = _DeferredReference()
        self.controller = self._controller(self.model, cfg)
        self.safety = SafetyLayer(self.model, self._safety_config(cfg))
        self.loop = ControlLoop(self.controller, self.safety, self.model, self.robot.config.bounds)
        self.output = CommandOutput(handle, cfg.output, self.joint_names, cfg.side, cfg.controller_name,
                                    cfg.controller_joints or self.robot.config.controller_joints)
        self.status, self.model_updates, self.stopped, self.active = None, 0, False, False
        self._map_rebuild, self.map_rebuilds = None, 0  # None, "running" or "again"
        self.latencies = deque(maxlen=_LATENCY_WINDOW)
        # Wall-clock gaps between consecutive commands (a deliberate stop restarts the count).
        self.command_gaps = Gaps(limit_ms=50.0)  # Baxter drops out of torque mode after a silence
        self.gc_pauses = GcPauses()  # what the garbage collector still costs the loop (runtime/heap.py)
        self.scheduling = realtime_scheduling(handle, cfg.realtime_priority)
        self._velocities = JointVelocities()  # measured, or differenced when the state has none
        self._state = None  # (q [rad], qd [rad/s]) of the newest accepted joint state
        self._epoch_ns = None  # node time of control time 0
        self._last_cycle_ns = None  # node time of the last cycle
        topic = robot_topic(self.robot.config, "joint_states", cfg.joint_states_topic) or "/joint_states"
        self.joints = joint_state_input(self.joint_names, cfg.safety.state_timeout, topic,
                                        bounds=PlainJointStateBounds(self.safety.state_bounds), logger=handle.get_logger())
        self._rates = InputRates()
        handle.create_subscription(JOINT_STATE, topic, self._on_joint_state, SENSOR_QOS)
        if cfg.follow_estimates:
            handle.create_subscription(FLOAT64_MULTI_ARRAY, cfg.estimates_topic, self._on_estimates, LATCHED_QOS)
        self.reference_publisher = handle.create_publisher(JOINT_STATE, "~/reference", SENSOR_QOS)
        self.diagnostics = handle.create_publisher(DIAGNOSTIC_ARRAY, "/diagnostics", 10)
        self.timer = handle.create_timer(1.0 / cfg.rate_hz, self._tick)
        handle.create_timer(_DIAGNOSTICS_PERIOD, self._publish_diagnostics)
        handle.add_on_set_parameters_callback(self._on_set_parameters)
        # Never a compile on the executor: no command until the kernels are compiled (a child process) and loaded.
        self.warmup = KernelWarmup(self._kernel_families(), self._prime_kernels, handle.get_logger(),
                                   enabled=handle.owns_process)
        handle.add_on_shutdown(self.warmup.close)
        handle.add_on_shutdown(self.stop)
        handle.get_logger().info(f"{cfg.mode} on {len(self.joint_names)} joints -> {self.output.topic} at "
                                 f"{cfg.rate_hz:g} Hz ({cfg.control_trigger}); inactive until activated")

    # ------------------------------------------------------------------ set-up
    def _controller(self, model, cfg, reference=None):
        reference = self.reference if reference is None else reference
        if cfg.mode == "gravity_compensation":
            return GravityCompensation(model, cfg.gravity_scale)
        if cfg.mode == "impedance":
            tmap = getattr(getattr(self, "controller", None), "torque_map", None)  # a retune keeps a rebuilt map
            if tmap is None and cfg.torque_map:
                tmap = TorqueMap.load(resolve_resource(cfg.torque_map), model)
            return JointImpedanceController(model, per_joint_value(cfg.stiffness), per_joint_value(cfg.damping),
                                            reference, cfg.model_term, cfg.model_scale, tmap,
                                            state_period=cfg.state_period or None)
        # the compiled Riccati solver, predicting with the rigid step (shipped default) or the compiled PBD step
        return make_mpc(make_simulator(model, cfg.mpc_dt, cfg.mpc_simulator, substeps=1), reference, cfg.mpc)

    def _kernel_families(self):
        """Kernel families of the node's compiled path: the control laws and safety layer, and the MPC's step."""
        cfg = self.config
        if cfg.mode != "mpc":
            return ["control"]
        return ["control", "rigid" if cfg.mpc_simulator == "rigid" else "pbd_mpc"]

    def _prime_kernels(self):
        """The node's control path on throwaway objects at mid-range: commanding, stale and stopping
        cycles (loads its kernels into the process; runs off the executor)."""
        cfg, dt = self.config, 1.0 / self.config.rate_hz
        q = 0.5 * (self.safety.lower + self.safety.upper)
        reference = _DeferredReference()
        reference.target = make_reference(q, self.waypoints, 0.0, cfg.move_duration, cfg.hold_duration, cfg.loop)
        safety = SafetyLayer(self.model, self._safety_config(cfg))
        loop = ControlLoop(self._controller(self.model, cfg, reference), safety, self.model, self.robot.config.bounds)
        for k in range(3):
            loop.step(k * dt, q, np.zeros_like(q), k * dt)
        loop.step(3 * dt, q, np.zeros_like(q), 0.0, fresh=False)
        safety.stop(4 * dt)

    @staticmethod
    def _safety_config(cfg):
        return replace(cfg.safety, output=safety_output(cfg.output))

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

    # ------------------------------------------------------------------ lifecycle
    def on_activate(self):
        """Start commanding torque (ramping in from what holds the arm now)."""
        if self.stopped or self.active:
            return
        self.active = True
        self.handle.get_logger().info("activated: commanding torque")

    def on_deactivate(self):
        """Stop commanding torque: Baxter falls back to position mode, ros2_control gets the hold."""
        if not self.active:
            return
        self.active = False
        self._publish_hold()
        self.handle.get_logger().info("deactivated: torque commands stopped")

    # ------------------------------------------------------------------ inputs
    def _on_joint_state(self, msg):
        if self.stopped:
            return
        received = time.perf_counter()
        now_ns = self.handle.now_ns()
        sample = self.joints.update(msg, now_ns)  # logs what it drops
        if sample is None:
            return
        stamp = self.control_time(sample.stamp_ns or self.joints.watchdog.last_ns)
        self._state = (sample.positions, self._velocities(stamp, sample.positions, sample.velocities, self.joints.epoch))
        if self.reference.target is None:
            cfg = self.config
            start = np.clip(sample.positions, self.safety.lower, self.safety.upper)  # never hold beyond a limit
            self.reference.target = make_reference(start, self.waypoints, self.loop.reference_time(self.control_time(now_ns)),
                                                   cfg.move_duration, cfg.hold_duration, cfg.loop)
        if self.config.control_trigger == "joint_state" and self.active:
            if self._cycle(now_ns):
                self.latencies.append(time.perf_counter() - received)

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
        if decision.applied and not getattr(self.controller, "map_exact", True) and self.config.rebuild_map:
            self._rebuild_map()

    # ------------------------------------------------------------------ torque map
    def _rebuild_map(self):
        """Rebuild the torque map for the current model off the node (one rebuild at a time)."""
        if self._map_rebuild is not None:
            self._map_rebuild = "again"  # the running one is for an older model
            return
        controller = self.controller
        tmap, model, start = controller.torque_map, controller.model, time.monotonic()
        self._map_rebuild = "running"
        self.handle.get_logger().info("torque map conditioned on the new model; rebuilding it in the background")
        self.handle.run_in_background(lambda: rebuild_torque_map_in_process(tmap, model),
                                      lambda result, error: self._map_rebuilt(result, error, start))

    def _map_rebuilt(self, tmap, error, start):
        again, self._map_rebuild = self._map_rebuild == "again", None
        logger = self.handle.get_logger()
        if error is not None:
            logger.error(f"torque map rebuild failed (the conditioned map stays in use): {error}")
        elif self.controller.use_map(tmap):
            self.map_rebuilds += 1
            logger.info(f"torque map rebuilt for the current model in {time.monotonic() - start:.1f} s and swapped in")
        if not self.controller.map_exact and not self.stopped and (again or error is None):
            self._rebuild_map()  # the model changed while it was being built

    def _on_set_parameters(self, changes):
        """Validate and apply run-time gain/limit changes; a reason string rejects them."""
        ours = {name: value for name, value in changes.items() if name in self._parameter_names()}
        if not ours:
            return None  # runtime parameters (use_sim_time, autostart)
        try:  # every value is checked (NaN, inf, lengths, ranges) before anything else is said
            cfg = updated_config(self.config, ours, f"node '{self.handle.name}'", joint_count=len(self.joint_names))
        except ParameterError as err:
            return str(err)
        fixed = sorted(set(ours) - TUNABLE)
        if fixed:
            return f"{fixed} take effect only at start-up: restart the node (run-time changes: {sorted(TUNABLE)})"
        try:
            controller = self._controller(self.model, cfg) if cfg.mode != "mpc" else self.controller
            safety = _retuned(self.safety, SafetyLayer(self.model, self._safety_config(cfg)))
        except (ParameterError, ControlError, ValueError) as err:
            return str(err)
        self.config, self.controller, self.safety = cfg, controller, safety
        self.loop.controller, self.loop.safety = controller, safety
        self.joints.watchdog.timeout_ns = int(round(cfg.safety.state_timeout * NS_PER_S))
        self.handle.get_logger().info(f"parameters changed: {ours}")
        return None

    def _parameter_names(self):
        return config_values(self.config).keys()

    # ------------------------------------------------------------------ the cycle
    def _tick(self):
        if self.stopped:
            return
        if not self.active:
            if self.safety.holding:  # inactive: the gravity hold ramps and fades until it is zero
                self._publish_hold()
            return
        now_ns = self.handle.now_ns()
        self._log_watchdog(now_ns)
        if self.config.control_trigger == "joint_state" and self.joints.is_fresh(now_ns):
            return  # each arrival runs a cycle; the timer only notices stale states
        self._cycle(now_ns)

    def _cycle(self, now_ns):
        """One command: compute, make safe, publish. Returns whether a command was published.

        None while the kernels warm up: an uncompiled path would compile on the executor for
        minutes (Baxter stays in position mode, an effort controller keeps its last command).
        """
        if not self.warmup.ready:
            self.command_gaps.pause()
            return False
        t = self.control_time(now_ns)
        self._last_cycle_ns = now_ns
        q = qd = state_time = None
        if self._state is not None:
            q, qd = self._state
            state_time = self.control_time(self.joints.watchdog.last_ns)
        command, status = self.loop.step(t, q, qd, state_time, fresh=self.joints.is_fresh(now_ns))
        if self.loop.error is not None:
            self.handle.get_logger().error(f"{self.config.mode} failed: {self.loop.error}", throttle_duration_sec=1.0)
        if self.loop.notice is not None:
            self.handle.get_logger().warning(self.loop.notice)
            self.loop.notice = None
        if command is not None:
            self.output.publish(command)
            if status.active and self.gravity_active:
                self.output.suppress_gravity_compensation()
        self._count_gap(status.active)
        self._log_status(status)
        if self.reference.target is not None and self.config.mode != "gravity_compensation":
            self._publish_reference(now_ns, self.loop.reference_time(t))
        return command is not None

    def _count_gap(self, commanding):
        """Track the wall-clock gaps between consecutive torque commands (diagnostics)."""
        if commanding:
            self.command_gaps.tick()
        else:
            self.command_gaps.pause()

    def _publish_reference(self, now_ns, t):
        q_d, qd_d, _ = self.reference(t)
        self.reference_publisher.publish(joint_state_msg(self.handle.messages, now_ns, self.joint_names, q_d, qd_d))

    def _log_watchdog(self, now_ns):
        change = self.joints.watchdog.poll(now_ns)
        logger = self.handle.get_logger()
        if change == STALE:
            stop = ("stop publishing (robot falls back to position mode)" if self.config.output == BAXTER
                    else f"{self.config.safety.hold} hold")
            logger.warning(f"joint states stale (> {self.config.safety.state_timeout:g} s): torque commands stopped, {stop}")
        elif change == FRESH:
            logger.info("joint states fresh: commanding torque")

    def _log_status(self, status):
        previous, self.status = self.status, status
        if status.reason not in ("ok", "stale_state", "no_state") and (previous is None or previous.reason != status.reason):
            detail = f": {status.detail}" if status.detail else ""
            self.handle.get_logger().warning(f"safety layer stopped the command: {status.reason}{detail} (faults {status.faults})")
        self._log_fade(previous, status)
        if status.clock_jumped:
            self.handle.get_logger().warning("clock jumped backwards: counted as no time elapsed, commanding on")
        if status.late:
            self.handle.get_logger().warning("command cycle late for the hardware's minimum rate", throttle_duration_sec=5.0)

    def _log_fade(self, previous, status):
        if status.hold == "fading" and (previous is None or previous.hold != "fading"):
            self.handle.get_logger().warning(
                f"no controller command for {self.config.safety.hold_fade_after:g} s: the gravity hold fades to "
                f"zero effort over {HOLD_FADE_TIME:g} s")

    def _publish_hold(self):
        if not self.warmup.ready:  # never commanded yet; the hold's kernels would compile here
            return
        q = qd = state_time = None
        if self._state is not None:  # the hold follows the arm while joint states are fresh
            (q, qd), state_time = self._state, self.control_time(self.joints.watchdog.last_ns)
        command, status = self.safety.hold(self.control_time(self.handle.now_ns()), q, qd, state_time)
        if command is not None:
            self.output.publish(command)
        previous, self.status = self.status, status
        self._log_fade(previous, status)

    def _publish_stop(self):
        if not self.warmup.ready:  # never commanded yet; the hold's kernels would compile here
            return
        command, _ = self.safety.stop(self.control_time(self.handle.now_ns()))
        if command is not None:
            self.output.publish(command)

    def stop(self):
        """Stop commanding for good (shutdown): ros2_control gets the hold command once."""
        if self.stopped:
            return
        self.stopped, self.active = True, False
        self.timer.cancel()
        self._publish_stop()
        self.gc_pauses.close()

    # ------------------------------------------------------------------ diagnostics
    def _publish_diagnostics(self):
        now_ns = self.handle.now_ns()
        name = node_label(self.handle)
        joints = input_status(f"{name}: {self.joints.what}", self.joints, self._rates, now_ns)
        statuses = [joints, self.warmup.status(name), self._control_status()]
        self.diagnostics.publish(diagnostic_array_msg(self.handle.messages, now_ns, statuses))

    def _control_status(self):
        cfg, last = self.config, self.status
        state = "stopped" if self.stopped else "active" if self.active else "inactive"
        level = OK if self.active and last is not None and last.active else WARN if not self.active else ERROR
        reason = last.reason if last is not None else "no cycle yet"
        if last is None and self.active and not self.warmup.ready:
            level, reason = WARN, "warming up: no command until the kernels are ready"
        values = {"lifecycle": state, "mode": cfg.mode, "output": self.output.topic, "trigger": cfg.control_trigger,
                  "commands published": self.output.published, "safety": reason,
                  "safety faults": last.faults if last else 0, "model updates": self.model_updates,
                  **self.command_gaps.values("command"),
                  "largest GC pause [ms]": f"{self.gc_pauses.largest_ms:.1f}",
                  "full GC collections": self.gc_pauses.full_collections,
                  "GC frozen objects": frozen_objects(), "scheduling": self.scheduling}
        if getattr(self.controller, "state_period", None) is not None:  # impedance with the damping limit
            values["damping limited for a state period of [ms]"] = f"{1e3 * self.controller.state_period:.1f}"
        if getattr(self.controller, "torque_map", None) is not None:
            values.update({"torque map": "exact" if self.controller.map_exact else "conditioned on the model",
                           "torque map rebuilds": self.map_rebuilds, "torque map rebuild": self._map_rebuild or "idle"})
        if last is not None:
            values.update({"clipped": ",".join(last.clipped), "near limit": ",".join(last.near_limit),
                           "late": last.late})
        if self.latencies:
            latency = np.asarray(self.latencies) * 1e3
            values.update({"receipt->publish p50 [ms]": f"{np.percentile(latency, 50):.3f}",
                           "receipt->publish p99 [ms]": f"{np.percentile(latency, 99):.3f}",
                           "receipt->publish max [ms]": f"{latency.max():.3f}"})
        message = f"{state}, {cfg.mode}: " + ("commanding torque" if level == OK else reason)
        return status(level, f"{node_label(self.handle)}: control", message, values)


def _retuned(old, new):
    """``new`` SafetyLayer continuing ``old``'s command history, so a retune does not re-engage.

    The rate limit then runs from the last published torque instead of ramping in again, and a
    hold keeps its time.
    """
    return new.continue_from(old)


def main(args=None):
    """Entry point of ``ros2 run diffsim_ros controller_node`` (ends the process: exit code 0, or 1 after a start-up error)."""
    exit_process(run_node(ControllerNode, "controller", args))


if __name__ == "__main__":
    main()
