"""The safety layer every torque command passes through before it reaches hardware.

Each control cycle the node calls :meth:`SafetyLayer.filter` with the controller's torques
and the joint state they were computed from. In order:

1. **Input watchdog**: no joint state yet, or a state older than ``state_timeout``, stops
   torque commanding (what "stop" means depends on the output type, below).
2. **NaN/inf and shape guard** on the state and the torques: a bad sample stops commanding
   for that cycle and is counted; NaN or inf is never returned.
3. **Joint-limit proximity**: within ``limit_margin`` of a position limit, the part of the
   command that drives the joint further towards the limit fades out linearly (zero at the
   limit) and a spring-damper pushes the joint back; the command may always move a joint
   away from a limit.
4. **Effort limits**: the smaller of the URDF limit and the configured limit, per joint.
5. **Torque-rate limit** against the torque the hardware applies now (zero after the
   hardware has dropped out of torque mode, so every (re-)engagement ramps in).
6. A final check (finite, within the effort limits) before anything is returned.

Output types (issue 6, section 2-3):

- ``"baxter"`` (``baxter_core_msgs/JointCommand``, TORQUE_MODE): "stop" returns ``None``,
  i.e. do not publish; the robot keeps the last command for at most ``robot_timeout`` =
  0.2 s and then falls back to position mode, so a later command ramps in from zero. The
  robot needs commands at >= 100 Hz: a longer gap between cycles is flagged ``late``.
- ``"effort_controller"`` (ros2_control ``JointGroupEffortController``): the controller keeps
  applying its last command forever, so "stop" returns the configured hold command (default
  zeros), which is published.
"""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.vectors import per_joint, to_numpy

from diffsim_ros._compiled import njit

__all__ = ["OUTPUT_TYPES", "OutputType", "SafetyConfig", "SafetyLayer", "SafetyStatus"]


@dataclass(frozen=True)
class OutputType:
    """What the hardware behind an output does when commands stop.

    Attributes:
        name: ``"baxter"`` or ``"effort_controller"``.
        publish_on_stop: Publish the hold command when stopped (else publish nothing).
        robot_timeout: Gap [s] after which the hardware leaves torque mode (None: never).
        min_rate: Command rate [Hz] the hardware needs (None: no requirement).
    """

    name: str
    publish_on_stop: bool
    robot_timeout: float | None
    min_rate: float | None


OUTPUT_TYPES = {
    "baxter": OutputType("baxter", publish_on_stop=False, robot_timeout=0.2, min_rate=100.0),
    "effort_controller": OutputType("effort_controller", publish_on_stop=True, robot_timeout=None, min_rate=None),
}


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
        hold_command: Torques [N·m] published when stopped (effort controller only);
            None: zeros.
    """

    output: str = "baxter"
    effort_limit: object = None
    torque_rate_limit: object = 200.0
    limit_margin: float = 0.1
    limit_stiffness: float = 50.0
    limit_damping: float = 5.0
    state_timeout: float = 0.05
    hold_command: object = None


class SafetyStatus(NamedTuple):
    """What the safety layer did in one cycle (a named tuple: cheap to create every cycle).

    Attributes:
        active: The controller's command (filtered) is being sent.
        publish: There is a message to publish (False: Baxter stopped, publish nothing).
        reason: ``"ok"``, or why commanding stopped: ``"no_state"``, ``"stale_state"``,
            ``"bad_state"``, ``"no_command"``, ``"bad_command"``, ``"unsafe_output"``,
            ``"stopped"``.
        clipped: Joints held at their effort limit.
        rate_limited: Joints whose torque change was limited.
        near_limit: Joints inside the joint-limit zone.
        overspeed: Joints faster than their URDF velocity limit (reported only).
        late: The gap since the previous cycle exceeded the hardware's minimum rate.
        engaged: Torque mode starts this cycle (the output ramps in from ``engage_torque``,
            or from what the hardware applies when none is given).
        faults: Cumulative count of rejected (non-finite or malformed) inputs.
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


class SafetyLayer:
    """Limits, guards and the per-output-type watchdog (see the module docstring).

    Args:
        model: RobotModel giving joint names and URDF position, velocity and effort limits.
        config: :class:`SafetyConfig`.

    Raises:
        ControlError: Unknown output type, a joint without any finite effort limit,
            non-positive rates or timeouts, or a hold command outside the limits.
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
        hold = per_joint(config.hold_command, self.joint_names, "safety hold_command", 0.0)
        if not np.all(np.isfinite(hold)) or np.any(np.abs(hold) > self.effort_limit):
            raise ControlError(f"safety hold_command {hold.tolist()} is not finite or exceeds the effort limits")
        self.hold_command = hold
        self.reset()

    def _validate(self):
        bad = [n for n, v in zip(self.joint_names, self.effort_limit) if not (np.isfinite(v) and v > 0)]
        if bad:
            raise ControlError(f"joints {bad} have no positive finite effort limit (URDF or safety effort_limit)")
        bad = [n for n, v in zip(self.joint_names, self.rate_limit) if not v > 0]
        if bad:
            raise ControlError(f"safety torque_rate_limit must be positive for joints {bad}")
        c = self.config
        for name in ("limit_margin", "state_timeout"):
            if not getattr(c, name) > 0:
                raise ControlError(f"safety {name} must be positive, got {getattr(c, name)}")
        for name in ("limit_stiffness", "limit_damping"):
            if not getattr(c, name) >= 0:
                raise ControlError(f"safety {name} must be >= 0, got {getattr(c, name)}")

    # ------------------------------------------------------------------ state
    def reset(self):
        """Forget the command history (as after a restart): the next command ramps in."""
        self._published = None  # torque last published [N·m], (n,)
        self._published_time = None
        self._last_cycle = None
        self.faults = 0

    @property
    def nq(self):
        return len(self.joint_names)

    def applied_torque(self, t):
        """Torque [N·m] the hardware applies at time ``t`` [s] as far as we know, shape (n,)."""
        if self._published is None:
            return self.hold_command.copy() if self.output.publish_on_stop else np.zeros(self.nq)
        timeout = self.output.robot_timeout
        if timeout is not None and t - self._published_time > timeout:
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
        late = self._late(t)
        self._last_cycle = t
        reason, inputs = self._inputs(t, tau, q, qd, state_time)
        if reason is not None:
            return self._stop(t, reason, late)
        tau, q, qd = inputs
        engaged = self.needs_engagement(t)
        dt = 0.0 if engaged else max(t - self._published_time, 0.0)  # < 0: the clock jumped back
        base = self._published if not engaged else self._engagement_base(t, engage_torque)
        c = self.config
        out, flags, ok = _make_safe(
            tau, q, qd, base, self.rate_limit, dt, self.lower, self.upper, self.effort_limit,
            self.velocity_limit, c.limit_margin, c.limit_stiffness, c.limit_damping,
        )
        if not ok:
            self.faults += 1
            return self._stop(t, "unsafe_output", late)
        self._published, self._published_time = out, t
        names = self._flag_names(flags)
        return out.copy(), SafetyStatus(True, True, "ok", *names, late=late, engaged=engaged, faults=self.faults)

    def stop(self, t, reason="stopped"):
        """Stop commanding torque (e.g. on shutdown); same return value as :meth:`filter`."""
        late = self._late(t)
        self._last_cycle = t
        return self._stop(t, reason, late)

    # ------------------------------------------------------------------ steps
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
        """``(reason, (tau, q, qd))``: reason None when the inputs are usable float64 vectors."""
        if q is None or qd is None:
            return "no_state", None
        if state_time is not None and not (t - state_time <= self.config.state_timeout):
            return "stale_state", None
        q, qd = self._vector(q), self._vector(qd)
        if q is None or qd is None:
            self.faults += 1
            return "bad_state", None
        if tau is None:
            return "no_command", None
        tau = self._vector(tau)
        if tau is None:
            self.faults += 1
            return "bad_command", None
        return None, (tau, q, qd)

    def _vector(self, x):
        """``x`` as a finite float64 vector of shape (n,), or None."""
        if not (type(x) is np.ndarray and x.dtype == np.float64):
            try:
                x = np.asarray(x, dtype=np.float64)
            except (TypeError, ValueError):
                return None
        return x if x.shape == (self.nq,) and _all_finite(x) else None

    def _stop(self, t, reason, late):
        if self.output.publish_on_stop:
            out = self.hold_command.copy()
            self._published, self._published_time = out.copy(), t
            return out, SafetyStatus(active=False, publish=True, reason=reason, late=late, faults=self.faults)
        return None, SafetyStatus(active=False, publish=False, reason=reason, late=late, faults=self.faults)

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


@njit(cache=True)
def _all_finite(x):
    for v in x:
        if not np.isfinite(v):
            return False
    return True


@njit(cache=True)
def _make_safe(tau, q, qd, base, rate, dt, lower, upper, effort, max_speed, margin, stiffness, damping):
    """Joint-limit zone, effort clip and rate limit of one command (compiled: a few µs).

    Returns:
        ``(out (n,), flags (n,) of CLIPPED | RATE_LIMITED | NEAR_LIMIT | OVERSPEED, ok)``;
        ok is False unless every output is finite and within the effort limits.
    """
    n = tau.shape[0]
    out = np.empty(n)
    flags = np.zeros(n, dtype=np.int64)
    ok = True
    for j in range(n):
        to_lower, to_upper = q[j] - lower[j], upper[j] - q[j]
        value = tau[j]
        # Within the zone: fade the push into the limit, add a spring-damper pushing back.
        fade = to_lower / margin if value < 0.0 else to_upper / margin
        value *= min(max(fade, 0.0), 1.0)
        depth_lower, depth_upper = max(margin - to_lower, 0.0), max(margin - to_upper, 0.0)
        if depth_lower > 0.0 or depth_upper > 0.0:
            flags[j] |= NEAR_LIMIT
            value += stiffness * (depth_lower - depth_upper)
            if depth_lower > 0.0 and qd[j] < 0.0:
                value -= damping * qd[j]
            if depth_upper > 0.0 and qd[j] > 0.0:
                value -= damping * qd[j]
        if abs(qd[j]) > max_speed[j]:
            flags[j] |= OVERSPEED
        clipped = min(max(value, -effort[j]), effort[j])
        if clipped != value:
            flags[j] |= CLIPPED
        step = rate[j] * dt
        limited = base[j] + min(max(clipped - base[j], -step), step)
        if abs(limited - clipped) > 1e-12:
            flags[j] |= RATE_LIMITED
        out[j] = limited
        ok = ok and np.isfinite(limited) and abs(limited) <= effort[j] * (1.0 + 1e-12)
    return out, flags, ok
