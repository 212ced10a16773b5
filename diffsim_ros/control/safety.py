"""The safety layer every torque command passes through before it reaches hardware.

Each control cycle the node calls :meth:`SafetyLayer.filter` with the controller's torques
and the joint state they were computed from. In order:

1. **Clock**: time running backwards (``/clock`` reset, bag loop) counts as no time elapsed;
   a forward jump lets the rate limit move at most ``MAX_RATE_INTERVAL`` worth of torque.
2. **Input watchdog**: no joint state yet, or a state older (or newer) than
   ``state_timeout``, stops torque commanding (what "stop" means depends on the output
   type, below).
3. **Input guard** on the state and the torques: NaN/inf, a wrong shape, a position more than
   ``position_slack`` beyond a joint limit or a speed above ``speed_factor`` times the URDF
   velocity limit (a sensor fault, not a motion) stop commanding for that cycle and are
   counted; NaN or inf is never returned.
4. **Effort limits** on the request: the smaller of the URDF limit and the configured one.
5. **Joint-limit zone**: within ``limit_margin`` of a position limit, the part of the clipped
   command that drives the joint further towards the limit fades out linearly (zero at the
   limit) and a spring-damper pushes the joint back; the command may always move a joint
   away from a limit. The sum is clipped to the effort limits again.
6. **Torque-rate limit** against the torque the hardware applies now (zero after the
   hardware has dropped out of torque mode, so every (re-)engagement ramps in).
7. **Zone bound on the final command**: inside a zone, the rate-limited command may not push
   towards the limit more than step 5 asked for. This is the one change the rate limit does
   not bound: a push into a limit is cut at once (towards safety), never held.
8. A final check (finite, within the effort limits) before anything is returned.

Output types (issue 6, section 2-3):

- ``"baxter"`` (``baxter_core_msgs/JointCommand``, TORQUE_MODE): "stop" returns ``None``,
  i.e. do not publish; the robot keeps the last command for at most ``robot_timeout`` =
  0.2 s and then falls back to position mode, so a later command ramps in again. The
  robot needs commands at >= 100 Hz: a longer gap between cycles is flagged ``late``.
- ``"ros2_control"`` (a ros2_control ``JointGroupEffortController``): the controller keeps
  applying its last command forever, so "stop" publishes a command every cycle that ramps
  from the last one to the hold torque at the torque-rate limit and then stays there
  (bounded by the joint-limit zone of the last valid state). :meth:`SafetyLayer.stop`
  (shutdown) publishes the hold torque at once: it is the last command the controller keeps.

The hold torque of the effort controller (``hold``):

- ``"gravity"`` (default): the model's holding torque g(q) - tau_spring(q)
  (:func:`~diffsim_ros.control.gravity.holding_torques`, what gravity compensation commands)
  at the last valid joint state, within the effort limits: a gravity-loaded arm stays where
  it was instead of falling. After ``hold_fade_after`` seconds without a controller command
  it fades linearly to zero over ``HOLD_FADE_TIME``, so a long outage still ends in a known
  state (zero effort). Before the first valid state there is nothing to hold: zero.
- ``"fixed"``: the fixed torques ``hold_command`` (default zeros: zero effort), no fade.

An inactive controller node calls :meth:`SafetyLayer.hold` every cycle while
:attr:`SafetyLayer.holding` (the gravity hold is still ramping or fading), then falls silent.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.gravity import holding_torques
from diffsim_ros.control.vectors import PerJoint, per_joint, to_numpy
from diffsim_ros.dynamics.fast import FastDynamics

from diffsim_ros._compiled import njit

__all__ = [
    "BAXTER", "FIXED_HOLD", "GRAVITY_HOLD", "HOLDS", "HOLD_FADE_TIME", "MAX_RATE_INTERVAL", "OUTPUT_TYPES",
    "ROS2_CONTROL", "JointStateBounds", "OutputType", "SafetyConfig", "SafetyLayer", "SafetyStatus",
]


@dataclass(frozen=True)
class OutputType:
    """What the hardware behind an output does when commands stop.

    Attributes:
        name: ``"baxter"`` or ``"ros2_control"``.
        publish_on_stop: Publish the hold command when stopped (else publish nothing).
        robot_timeout: Gap [s] after which the hardware leaves torque mode (None: never).
        min_rate: Command rate [Hz] the hardware needs (None: no requirement).
    """

    name: str
    publish_on_stop: bool
    robot_timeout: float | None
    min_rate: float | None


# The output names users write (``output:`` in the node parameters and launch files); the
# recordings' command type (io/recording.py) uses the same two.
BAXTER = "baxter"
ROS2_CONTROL = "ros2_control"
OUTPUT_TYPES = {
    BAXTER: OutputType(BAXTER, publish_on_stop=False, robot_timeout=0.2, min_rate=100.0),
    ROS2_CONTROL: OutputType(ROS2_CONTROL, publish_on_stop=True, robot_timeout=None, min_rate=None),
}

MAX_RATE_INTERVAL = 0.1
"""[s] Longest interval the torque-rate limit credits between two commands: after a longer gap
(a paused process, a clock jumping forward) a command still moves by at most rate x 0.1 s."""

GRAVITY_HOLD = "gravity"
FIXED_HOLD = "fixed"
HOLDS = (GRAVITY_HOLD, FIXED_HOLD)
"""The effort controller's hold torques (``SafetyConfig.hold``, module docstring)."""

HOLD_FADE_TIME = 2.0
"""[s] The gravity hold fades linearly to zero over this time once ``hold_fade_after`` has
passed (a gentle sag a person near the arm can see, not a drop; the rate limit applies too)."""


@dataclass(frozen=True)
class SafetyConfig:
    """Safety settings (the ``safety`` block of a controller's parameters).

    Per-joint values may be a scalar, a sequence in model joint order, or a mapping
    ``joint name -> value`` (joints not named keep the default).

    Attributes:
        output: Output type, a key of :data:`OUTPUT_TYPES`.
        effort_limit: Configured effort limits [N·m]; the URDF limit applies where smaller.
            None: URDF limits only.
        torque_rate_limit: Largest torque change [N·m/s] per joint. The default 200 N·m/s
            suits gravity compensation and PD-like impedance; the stiff torque-map model
            term needs ~5000 N·m/s at 1 kHz (benchmarks/RESULTS.md).
        limit_margin: Width [rad] of the zone before each position limit.
        limit_stiffness: Restoring stiffness [N·m/rad] inside the zone.
        limit_damping: Damping [N·m·s/rad] of motion towards the limit inside the zone.
        state_timeout: Oldest accepted joint state [s].
        hold: What the effort controller holds when stopped: "gravity" (the model's holding
            torque at the last valid state, faded out after hold_fade_after) or "fixed"
            (hold_command; its default zeros is zero effort).
        hold_command: Torques [N·m] of the "fixed" hold (effort controller only); None: zeros.
        hold_fade_after: Time [s] without a controller command after which the "gravity"
            hold fades to zero effort (over 2 s).
        position_slack: A measured position further than this [rad] beyond a joint limit is a
            sensor fault: no command is computed from it.
        speed_factor: A measured speed above this multiple of the URDF velocity limit is a
            sensor fault (joints without a positive finite velocity limit are not checked).
    """

    output: str = "baxter"
    effort_limit: PerJoint | None = None
    torque_rate_limit: PerJoint = 200.0
    limit_margin: float = 0.1
    limit_stiffness: float = 50.0
    limit_damping: float = 5.0
    state_timeout: float = 0.05
    hold: str = GRAVITY_HOLD
    hold_command: PerJoint | None = None
    hold_fade_after: float = 10.0
    position_slack: float = 0.25
    speed_factor: float = 4.0

    def validate(self):
        """Raise ControlError naming the first unusable scalar setting (NaN fails every
        comparison) or a non-positive effort or rate limit; the per-joint values against the
        model's joints and limits are :class:`SafetyLayer`'s."""
        if self.hold not in HOLDS:
            raise ControlError(f"safety hold must be one of {HOLDS}, got {self.hold!r}")
        if self.hold == GRAVITY_HOLD and self.hold_command is not None:
            raise ControlError(f"safety hold_command {self.hold_command!r} is the torque of hold '{FIXED_HOLD}'; "
                               f"set safety hold to '{FIXED_HOLD}' to use it, or leave it empty for the gravity hold")
        for name in ("limit_margin", "state_timeout", "speed_factor"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ControlError(f"safety {name} must be a positive number, got {value!r}")
        for name in ("limit_stiffness", "limit_damping", "position_slack", "hold_fade_after"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ControlError(f"safety {name} must be a finite number >= 0, got {value!r}")
        for name in ("effort_limit", "torque_rate_limit"):
            value = getattr(self, name)
            values = [] if value is None else value.values() if isinstance(value, dict) else np.ravel(value)
            if not all(v > 0 for v in values):  # (inf, a mapping's default: none configured)
                raise ControlError(f"safety {name} must be positive, got {value!r}")


class JointStateBounds:
    """Which joint measurements are plausible: a position beyond a limit by more than a slack, or
    a speed above a multiple of the URDF velocity limit, is a sensor fault, not a motion.

    One definition for the safety layer and the nodes' joint-state inputs.

    Args:
        model: RobotModel (joint names, position and velocity limits).
        position_slack: [rad] allowed beyond each position limit.
        speed_factor: Multiple of the URDF velocity limit (joints without a positive finite
            velocity limit are not checked).
    """

    def __init__(self, model, position_slack=0.25, speed_factor=4.0):
        self.joint_names = tuple(model.joint_names)
        self.lower, self.upper = to_numpy(model.lower), to_numpy(model.upper)
        self.velocity_limit = to_numpy(model.velocity_limit)
        self.position_slack, self.speed_factor = float(position_slack), float(speed_factor)
        self.q_low, self.q_high = self.lower - self.position_slack, self.upper + self.position_slack
        known = np.isfinite(self.velocity_limit) & (self.velocity_limit > 0)
        self.max_speed = np.where(known, self.speed_factor * self.velocity_limit, np.inf)

    def violation(self, q, qd=None):
        """Why ``(q [rad], qd [rad/s])`` (finite, shape (n,); qd may be None) is implausible, or None."""
        speed = np.zeros_like(q) if qd is None else qd
        j = _implausible_joint(q, speed, self.q_low, self.q_high, self.max_speed)
        if j < 0:
            return None
        name = self.joint_names[j]
        if not self.q_low[j] <= q[j] <= self.q_high[j]:
            return (f"{name} position {q[j]:.6g} rad is more than {self.position_slack:g} rad outside its limits "
                    f"[{self.lower[j]:.6g}, {self.upper[j]:.6g}]")
        return f"{name} speed {abs(speed[j]):.6g} rad/s exceeds {self.speed_factor:g} x its velocity limit {self.velocity_limit[j]:.6g}"


class SafetyStatus(NamedTuple):
    """What the safety layer did in one cycle (a named tuple: cheap to create every cycle).

    Attributes:
        active: The controller's command (filtered) is being sent.
        publish: There is a message to publish (False: Baxter stopped, publish nothing).
        reason: ``"ok"``, or why commanding stopped: ``"no_state"``, ``"stale_state"``,
            ``"bad_state"`` (non-finite or malformed), ``"implausible_state"`` (beyond the
            position slack or speed factor), ``"no_command"``, ``"bad_command"``,
            ``"bad_time"``, ``"unsafe_output"``, ``"stopped"``, ``"inactive"``.
        clipped: Joints held at their effort limit.
        rate_limited: Joints whose torque change was limited.
        near_limit: Joints inside the joint-limit zone.
        overspeed: Joints faster than their URDF velocity limit (reported only).
        late: The gap since the previous cycle exceeded the hardware's minimum rate.
        engaged: Torque mode starts this cycle (the output ramps in from ``engage_torque``,
            or from what the hardware applies when none is given).
        faults: Cumulative count of rejected (non-finite, malformed or implausible) inputs.
        clock_jumped: Time ran backwards since the previous cycle (counted as no time elapsed).
        detail: What was wrong with a rejected input ("" otherwise), for the log.
        hold: What the effort controller's stop command holds: ``"gravity"``, ``"fading"``,
            ``"zero"`` (faded out, or no valid state yet) or ``"fixed"``; "" when commanding.
    """

    active: bool
    publish: bool
    reason: str = "ok"
    clipped: tuple = ()
    rate_limited: tuple = ()
    near_limit: tuple = ()
    overspeed: tuple = ()
    late: bool = False
    engaged: bool = False
    faults: int = 0
    clock_jumped: bool = False
    detail: str = ""
    hold: str = ""


class SafetyLayer:
    """Limits, guards and the per-output-type watchdog (see the module docstring).

    Args:
        model: RobotModel giving joint names and URDF position, velocity and effort limits.
        config: :class:`SafetyConfig`.

    Attributes:
        state_bounds: JointStateBounds of the measurements commanded from.
        clock_jumps: Times the clock ran backwards between cycles.

    Raises:
        ControlError: Unknown output type or hold, a joint without any finite effort limit,
            non-positive rates or timeouts, a hold command outside the limits or with the
            gravity hold.
    """

    def __init__(self, model, config=SafetyConfig()):
        self.joint_names = tuple(model.joint_names)
        self.config = config
        if config.output not in OUTPUT_TYPES:
            raise ControlError(f"unknown safety output '{config.output}'; choose from {sorted(OUTPUT_TYPES)}")
        self.output = OUTPUT_TYPES[config.output]
        self.lower = to_numpy(model.lower)
        self.upper = to_numpy(model.upper)
        self.velocity_limit = to_numpy(model.velocity_limit)
        urdf = to_numpy(model.effort_limit)
        configured = per_joint(config.effort_limit, self.joint_names, "safety effort_limit", math.inf)
        self.effort_limit = np.minimum(urdf, configured)
        self.rate_limit = per_joint(config.torque_rate_limit, self.joint_names, "safety torque_rate_limit", math.inf)
        self._validate()
        self.state_bounds = JointStateBounds(model, config.position_slack, config.speed_factor)
        self.hold_command = self._fixed_hold()
        # The gravity hold's dynamics snapshot; only an effort controller is ever held by us.
        gravity = self.output.publish_on_stop and config.hold == GRAVITY_HOLD
        self._fast = FastDynamics.from_model(model) if gravity else None
        self.reset()

    def _fixed_hold(self):
        """The torques [N·m] of the fixed hold (zeros for the gravity hold's start), (n,)."""
        hold = per_joint(self.config.hold_command, self.joint_names, "safety hold_command", 0.0)
        if not np.all(np.isfinite(hold)) or np.any(np.abs(hold) > self.effort_limit):
            raise ControlError(f"safety hold_command {hold.tolist()} is not finite or exceeds the effort limits")
        return hold

    def _validate(self):
        bad = [n for n, v in zip(self.joint_names, self.effort_limit) if not (np.isfinite(v) and v > 0)]
        if bad:
            raise ControlError(f"joints {bad} have no positive finite effort limit (URDF or safety effort_limit)")
        bad = [n for n, v in zip(self.joint_names, self.rate_limit) if not v > 0]
        if bad:
            raise ControlError(f"safety torque_rate_limit must be positive for joints {bad}")
        bad = [n for n, lo, hi in zip(self.joint_names, self.lower, self.upper) if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi)]
        if bad:
            raise ControlError(f"joints {bad} have no finite position limits lower < upper (URDF)")
        self.config.validate()

    # ------------------------------------------------------------------ state
    def reset(self):
        """Forget the command history (as after a restart): the next command ramps in."""
        self._published = None  # torque last published [N·m], (n,)
        self._published_time = None
        self._last_cycle = None
        self._last_q = None  # last valid measured positions [rad]: bounds the stop ramp, gives the hold
        self._hold_start = None  # time [s] of the first stop cycle since the last controller command
        self._hold_q = self._hold_torque = None  # the gravity hold torque and the q it is for
        self.faults = 0
        self.clock_jumps = 0

    def continue_from(self, previous):
        """Continue ``previous``'s command history and hold (a retune must not re-engage or restart a fade).

        Returns:
            This layer.
        """
        for name in ("_published", "_published_time", "_last_cycle", "_last_q", "_hold_start", "faults", "clock_jumps"):
            setattr(self, name, getattr(previous, name))
        return self

    def update_model(self, model):
        """Hold with ``model``'s gravity and springs from now on (a calibration update; same joints).

        Raises:
            ControlError: Other joints.
        """
        if tuple(model.joint_names) != self.joint_names:
            raise ControlError(f"model joints {list(model.joint_names)} differ from {list(self.joint_names)}")
        if self._fast is not None:
            self._fast = FastDynamics.from_model(model)
            self._hold_q = None

    @property
    def holding(self):
        """Whether the gravity hold still publishes: a torque not yet faded to zero (call :meth:`hold`)."""
        return (self._fast is not None and self._hold_start is not None and self._published is not None
                and bool(np.any(self._published)))

    @property
    def nq(self):
        return len(self.joint_names)

    def applied_torque(self, t):
        """Torque [N·m] the hardware applies at time ``t`` [s] as far as we know, shape (n,)."""
        if self._published is None:
            return self.hold_command.copy() if self.output.publish_on_stop else np.zeros(self.nq)
        if self._left_torque_mode(t):
            return np.zeros(self.nq)  # the robot has left torque mode
        return self._published.copy()

    # ------------------------------------------------------------------ the cycle
    def needs_engagement(self, t):
        """Whether the next command at ``t`` [s] starts torque mode (then pass ``engage_torque``)."""
        return self._published is None or self._left_torque_mode(t)

    def filter(self, t, tau, q, qd, state_time=None, engage_torque=None):
        """Make one command safe.

        Args:
            t: Current time [s] (node clock; simulated time with ``use_sim_time``).
            tau: Controller torques [N·m], shape (n,), or None when there is no command.
            q: Measured joint positions [rad], shape (n,), or None before the first state.
            qd: Measured joint velocities [rad/s], shape (n,), or None.
            state_time: Stamp [s] of the joint state (default ``t``: fresh).
            engage_torque: Torque [N·m], shape (n,), the motors were already applying when
                torque mode starts (e.g. the model's holding torque: the robot's own position
                controller was holding the arm). The output ramps in from it instead of from
                zero, so the arm does not sag while the robot's gravity compensation is
                suppressed. Ignored unless :meth:`needs_engagement`; clipped to the limits.

        Returns:
            ``(command, status)``: command is a finite float64 array (n,) within the
            limits, or None when nothing must be published; status a :class:`SafetyStatus`.
        """
        if not _finite_scalar(t):
            self.faults += 1
            return self._stop(None, "bad_time", False, False, f"time {t!r} is not finite")
        jumped, late = self._clock(t)
        reason, inputs, detail = self._inputs(t, tau, q, qd, state_time)
        if reason is not None:
            return self._stop(t, reason, late, jumped, detail)
        tau, q, qd = inputs
        engaged = self.needs_engagement(t)
        base = self._published if not engaged else self._engagement_base(t, engage_torque)
        c = self.config
        out, flags, ok = _make_safe(
            tau, q, qd, base, self.rate_limit, self._rate_interval(t, engaged), self.lower, self.upper,
            self.effort_limit, self.velocity_limit, c.limit_margin, c.limit_stiffness, c.limit_damping,
        )
        if not ok:
            self.faults += 1
            return self._stop(t, "unsafe_output", late, jumped, "the filtered command was not finite or within limits")
        self._published, self._published_time = out, t
        self._hold_start = None
        names = self._flag_names(flags)
        return out.copy(), SafetyStatus(True, True, "ok", *names, late=late, engaged=engaged, faults=self.faults,
                                        clock_jumped=jumped)

    def stop(self, t, reason="stopped"):
        """Stop commanding torque for good (shutdown); same return value as :meth:`filter`.

        The effort controller gets the hold torque at once (as far as the gravity hold has
        faded; bounded by the joint-limit zone of the last valid state): it keeps the last
        command it received.
        """
        finite = _finite_scalar(t)
        jumped, late = self._clock(t) if finite else (False, False)
        if not self.output.publish_on_stop:
            return None, SafetyStatus(active=False, publish=False, reason=reason, late=late, faults=self.faults,
                                      clock_jumped=jumped)
        if finite and self._hold_start is None:
            self._hold_start = t
        out = self._zone_bounded(self._hold_target(t if finite else None))
        self._published, self._published_time = out.copy(), t if finite else self._published_time
        return out, SafetyStatus(active=False, publish=True, reason=reason, late=late, faults=self.faults,
                                 clock_jumped=jumped, hold=self._hold_phase(t if finite else None))

    def hold(self, t, q=None, qd=None, state_time=None, reason="inactive"):
        """One cycle without a controller (an inactive node); same return value as :meth:`filter`.

        Baxter: nothing to publish. The fixed hold: the hold command at once, as :meth:`stop`.
        The gravity hold: one step of its ramp and fade; publish while :attr:`holding`.

        Args:
            t: Current time [s].
            q: Measured positions [rad], shape (n,), or None; a valid, fresh state (as
                :meth:`filter` checks it) is the one held from now on: gravity compensation
                of the arm as it is. A constant torque would hold only briefly: at many poses
                gravity pulls the arm further away from where it was held.
            qd: Measured velocities [rad/s], shape (n,), or None.
            state_time: Stamp [s] of the joint state (default ``t``).
            reason: SafetyStatus.reason of the cycle.
        """
        if self._fast is None:
            return self.stop(t, reason)
        if not _finite_scalar(t):
            self.faults += 1
            return self._stop(None, "bad_time", False, False, f"time {t!r} is not finite")
        jumped, late = self._clock(t)
        if q is not None:
            self._inputs(t, None, q, qd, state_time)  # a valid state becomes the one held; faults counted
        return self._stop(t, reason, late, jumped, "")

    # ------------------------------------------------------------------ steps
    def _clock(self, t):
        """``(jumped, late)`` at time ``t``; a backward jump counts as no time elapsed."""
        jumped = self._last_cycle is not None and t < self._last_cycle
        if jumped:
            self.clock_jumps += 1
            if self._published_time is not None:
                self._published_time = t
            if self._hold_start is not None:  # the hold keeps the time it has held, no more
                self._hold_start -= self._last_cycle - t
            late = False
        else:
            late = self._late(t)
        self._last_cycle = t
        return jumped, late

    def _rate_interval(self, t, engaged):
        """Interval [s] the rate limit credits since the last command (0 when engaging)."""
        return 0.0 if engaged else min(max(t - self._published_time, 0.0), MAX_RATE_INTERVAL)

    def _engagement_base(self, t, engage_torque):
        if engage_torque is not None:
            engage = self._vector(engage_torque)
            if engage is not None:
                return np.clip(engage, -self.effort_limit, self.effort_limit)
            self.faults += 1  # a non-finite estimate: fall back to what the hardware applies
        return self.applied_torque(t)

    def _late(self, t):
        rate = self.output.min_rate
        slack = (1.0 + LATE_TOLERANCE) / rate if rate is not None else None
        return rate is not None and self._last_cycle is not None and t - self._last_cycle > slack

    def _left_torque_mode(self, t):
        timeout = self.output.robot_timeout
        return timeout is not None and t - self._published_time > timeout

    def _inputs(self, t, tau, q, qd, state_time):
        """``(reason, (tau, q, qd), detail)``: reason None when the inputs are usable float64 vectors."""
        if q is None or qd is None:
            return "no_state", None, ""
        if state_time is not None and not abs(t - state_time) <= self.config.state_timeout:
            return "stale_state", None, f"joint state from {state_time:.6g} s at {t:.6g} s"
        q, qd = self._vector(q), self._vector(qd)
        if q is None or qd is None:
            self.faults += 1
            return "bad_state", None, "joint state not finite or of the wrong shape"
        b = self.state_bounds
        if _implausible_joint(q, qd, b.q_low, b.q_high, b.max_speed) >= 0:
            self.faults += 1
            return "implausible_state", None, b.violation(q, qd)
        self._last_q = q
        if tau is None:
            return "no_command", None, ""
        tau = self._vector(tau)
        if tau is None:
            self.faults += 1
            return "bad_command", None, "controller torques not finite or of the wrong shape"
        return None, (tau, q, qd), ""

    def _vector(self, x):
        """``x`` as a finite float64 vector of shape (n,), or None."""
        if not (type(x) is np.ndarray and x.dtype == np.float64):
            try:
                x = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError):
                return None
        return x if x.shape == (self.nq,) and _all_finite(x) else None

    def _stop(self, t, reason, late, jumped, detail):
        """No controller command this cycle: Baxter publishes nothing; the effort controller ramps to hold."""
        status = dict(active=False, reason=reason, late=late, faults=self.faults, clock_jumped=jumped, detail=detail)
        if not self.output.publish_on_stop:
            return None, SafetyStatus(publish=False, **status)
        if t is not None and self._hold_start is None:
            self._hold_start = t
        target = self._hold_target(t)
        if self._published is None or t is None:
            out = self._zone_bounded(target if self._published is None else self._published)
        else:
            step = self.rate_limit * self._rate_interval(t, False)
            out = self._zone_bounded(self._published + np.clip(target - self._published, -step, step))
        if t is not None:
            self._published, self._published_time = out.copy(), t
        return out, SafetyStatus(publish=True, hold=self._hold_phase(t), **status)

    def _hold_target(self, t):
        """Torque [N·m] the effort controller is held with at ``t`` [s] (None: unknown, no fade), (n,)."""
        if self._fast is None or self._last_q is None:
            return self.hold_command  # the fixed hold, or zeros: no valid state to hold yet
        if self._hold_q is not self._last_q:  # a new valid state (or model): its gravity and springs
            self._hold_q = self._last_q
            torque = holding_torques(self._fast, self._last_q)
            self._hold_torque = np.clip(torque, -self.effort_limit, self.effort_limit)
        return self._hold_torque * self._fade(t)

    def _fade(self, t):
        """Factor in [0, 1] on the gravity hold: 1 for ``hold_fade_after`` s, then down to 0 over HOLD_FADE_TIME."""
        if t is None or self._hold_start is None:
            return 1.0
        past = t - self._hold_start - self.config.hold_fade_after
        return min(max(1.0 - past / HOLD_FADE_TIME, 0.0), 1.0)

    def _hold_phase(self, t):
        """SafetyStatus.hold of a stop command at ``t`` [s]."""
        if self._fast is None:
            return FIXED_HOLD
        fade = self._fade(t)
        return "zero" if self._last_q is None or fade == 0.0 else GRAVITY_HOLD if fade == 1.0 else "fading"

    def _zone_bounded(self, command):
        """``command`` with no more push into a limit than the zone of the last valid state allows."""
        if self._last_q is None:
            return command.copy()
        return _zone_bound(command, self._last_q, self.lower, self.upper, self.effort_limit, self.config.limit_margin)

    def _flag_names(self, flags):
        """Joint names per flag bit: ``(clipped, rate_limited, near_limit, overspeed)``."""
        flags = flags.tolist()
        if not any(flags):
            return (), (), (), ()
        return tuple(
            tuple(name for name, f in zip(self.joint_names, flags) if f & bit)
            for bit in (CLIPPED, RATE_LIMITED, NEAR_LIMIT, OVERSPEED)
        )


LATE_TOLERANCE = 0.25
"""A cycle counts as late when its gap exceeds the hardware period by more than this fraction
(timer jitter of a few hundred microseconds at 100 Hz is normal, not a fault)."""

CLIPPED, RATE_LIMITED, NEAR_LIMIT, OVERSPEED = 1, 2, 4, 8
"""Bits of the per-joint flags of :func:`_make_safe`."""


def _finite_scalar(t):
    return isinstance(t, (int, float, np.floating, np.integer)) and math.isfinite(t)


@njit(cache=True)
def _all_finite(x):
    for v in x:
        if not np.isfinite(v):
            return False
    return True


@njit(cache=True)
def _implausible_joint(q, qd, q_low, q_high, max_speed):
    """Index of the first joint with an implausible position or speed, -1 when all are plausible."""
    for j in range(q.shape[0]):
        if not (q_low[j] <= q[j] <= q_high[j]) or abs(qd[j]) > max_speed[j]:
            return j
    return -1


@njit(cache=True)
def _fades(q, lower, upper, margin):
    """Fade factors ``(towards lower, towards upper)`` in [0, 1] of one joint: 0 at or past the limit."""
    return min(max((q - lower) / margin, 0.0), 1.0), min(max((upper - q) / margin, 0.0), 1.0)


@njit(cache=True)
def _zone_bound(command, q, lower, upper, effort, margin):
    """``command`` [N·m] with every push towards a limit at most ``effort * fade`` (n,)."""
    out = command.copy()
    for j in range(out.shape[0]):
        fade_lower, fade_upper = _fades(q[j], lower[j], upper[j], margin)
        out[j] = min(max(out[j], -effort[j] * fade_lower), effort[j] * fade_upper)
    return out


@njit(cache=True)
def _make_safe(tau, q, qd, base, rate, dt, lower, upper, effort, max_speed, margin, stiffness, damping):
    """Effort clip, joint-limit zone, rate limit and zone bound of one command (compiled: a few µs).

    Returns:
        ``(out (n,), flags (n,) of CLIPPED | RATE_LIMITED | NEAR_LIMIT | OVERSPEED, ok)``;
        ok is False unless every output is finite and within the effort limits.
    """
    n = tau.shape[0]
    out = np.empty(n)
    flags = np.zeros(n, dtype=np.int64)
    ok = True
    for j in range(n):
        e = effort[j]
        value = min(max(tau[j], -e), e)
        if value != tau[j]:
            flags[j] |= CLIPPED
        # The zone: fade the clipped push into the limit, add a spring-damper pushing back.
        fade_lower, fade_upper = _fades(q[j], lower[j], upper[j], margin)
        value *= fade_lower if value < 0.0 else fade_upper
        depth_lower, depth_upper = margin * (1.0 - fade_lower), margin * (1.0 - fade_upper)
        depth_lower += max(lower[j] - q[j], 0.0)  # past the limit: the spring keeps growing
        depth_upper += max(q[j] - upper[j], 0.0)
        if depth_lower > 0.0 or depth_upper > 0.0:
            flags[j] |= NEAR_LIMIT
            value += stiffness * (depth_lower - depth_upper)
            if depth_lower > 0.0 and qd[j] < 0.0:
                value -= damping * qd[j]
            if depth_upper > 0.0 and qd[j] > 0.0:
                value -= damping * qd[j]
        if abs(qd[j]) > max_speed[j]:
            flags[j] |= OVERSPEED
        wanted = min(max(value, -e), e)
        if wanted != value:
            flags[j] |= CLIPPED
        step = rate[j] * dt
        limited = base[j] + min(max(wanted - base[j], -step), step)
        if abs(limited - wanted) > 1e-12:
            flags[j] |= RATE_LIMITED
        # Inside a zone the rate limit may not hold a push into the limit above what the zone allows.
        if fade_upper < 1.0:
            limited = min(limited, max(wanted, 0.0))
        if fade_lower < 1.0:
            limited = max(limited, min(wanted, 0.0))
        out[j] = limited
        ok = ok and np.isfinite(limited) and abs(limited) <= e * (1.0 + 1e-12)
    return out, flags, ok
