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

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.vectors import per_joint, to_numpy

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
        torque_rate_limit: Largest torque change [N·m/s] per joint.
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


@dataclass(frozen=True)
class SafetyStatus:
    """What the safety layer did in one cycle.

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
        engaged: Torque mode starts this cycle (the output ramps in from zero).
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
    def filter(self, t, tau, q, qd, state_time=None):
        """Make one command safe.

        Args:
            t: Current time [s] (node clock; simulated time with ``use_sim_time``).
            tau: Controller torques [N·m], shape (n,), or None when there is no command.
            q: Measured joint positions [rad], shape (n,), or None before the first state.
            qd: Measured joint velocities [rad/s], shape (n,), or None.
            state_time: Stamp [s] of the joint state (default ``t``: fresh).

        Returns:
            ``(command, status)``: command is a finite float64 array (n,) within the
            limits, or None when nothing must be published; status a :class:`SafetyStatus`.
        """
        late = self._late(t)
        self._last_cycle = t
        reason = self._input_problem(t, tau, q, qd, state_time)
        if reason is not None:
            return self._stop(t, reason, late)
        tau, q, qd = (np.asarray(x, dtype=np.float64) for x in (tau, q, qd))
        tau, near = self._limit_zone(tau, q, qd)
        tau, clipped = self._effort_clip(tau)
        engaged = self._published is None or self._left_torque_mode(t)
        out, limited = self._rate_limit(tau, self.applied_torque(t), 0.0 if engaged else t - self._published_time)
        if not (np.all(np.isfinite(out)) and np.all(np.abs(out) <= self.effort_limit * (1 + 1e-12))):
            self.faults += 1
            return self._stop(t, "unsafe_output", late)
        self._published, self._published_time = out.copy(), t
        status = SafetyStatus(
            active=True,
            publish=True,
            clipped=self._names(clipped),
            rate_limited=self._names(limited),
            near_limit=self._names(near),
            overspeed=self._names(np.abs(qd) > self.velocity_limit),
            late=late,
            engaged=engaged,
            faults=self.faults,
        )
        return out, status

    def stop(self, t, reason="stopped"):
        """Stop commanding torque (e.g. on shutdown); same return value as :meth:`filter`."""
        late = self._late(t)
        self._last_cycle = t
        return self._stop(t, reason, late)

    # ------------------------------------------------------------------ steps
    def _late(self, t):
        rate = self.output.min_rate
        return rate is not None and self._last_cycle is not None and t - self._last_cycle > 1.0 / rate

    def _left_torque_mode(self, t):
        timeout = self.output.robot_timeout
        return timeout is not None and t - self._published_time > timeout

    def _input_problem(self, t, tau, q, qd, state_time):
        """None when the inputs are usable, else the reason to stop."""
        if q is None or qd is None:
            return "no_state"
        if state_time is not None and not (t - state_time <= self.config.state_timeout):
            return "stale_state"
        if not (self._good(q) and self._good(qd)):
            self.faults += 1
            return "bad_state"
        if tau is None:
            return "no_command"
        if not self._good(tau):
            self.faults += 1
            return "bad_command"
        return None

    def _good(self, x):
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        return x.shape == (self.nq,) and bool(np.all(np.isfinite(x)))

    def _limit_zone(self, tau, q, qd):
        """Fade torque into a near limit and push back: ``(tau, near mask)``."""
        c = self.config
        with np.errstate(over="ignore", invalid="ignore"):  # absurd but finite states: clipped below
            return self._limit_zone_terms(c, tau, q, qd)

    def _limit_zone_terms(self, c, tau, q, qd):
        to_lower, to_upper = q - self.lower, self.upper - q
        fade_lower = np.clip(to_lower / c.limit_margin, 0.0, 1.0)
        fade_upper = np.clip(to_upper / c.limit_margin, 0.0, 1.0)
        tau = np.where(tau < 0.0, tau * fade_lower, tau * fade_upper)
        depth_lower = np.clip(c.limit_margin - to_lower, 0.0, None)
        depth_upper = np.clip(c.limit_margin - to_upper, 0.0, None)
        tau = tau + c.limit_stiffness * (depth_lower - depth_upper)
        damp = np.where(depth_lower > 0, np.clip(qd, None, 0.0), 0.0) + np.where(depth_upper > 0, np.clip(qd, 0.0, None), 0.0)
        tau = tau - c.limit_damping * damp
        return tau, (depth_lower > 0) | (depth_upper > 0)

    def _effort_clip(self, tau):
        out = np.clip(tau, -self.effort_limit, self.effort_limit)
        return out, out != tau

    def _rate_limit(self, tau, base, dt):
        """Move from ``base`` towards ``tau`` by at most rate * dt (dt < 0: the clock jumped back)."""
        step = self.rate_limit * max(dt, 0.0)
        out = base + np.clip(tau - base, -step, step)
        return out, np.abs(out - tau) > 1e-12

    def _stop(self, t, reason, late):
        if self.output.publish_on_stop:
            out = self.hold_command.copy()
            self._published, self._published_time = out.copy(), t
            return out, SafetyStatus(active=False, publish=True, reason=reason, late=late, faults=self.faults)
        return None, SafetyStatus(active=False, publish=False, reason=reason, late=late, faults=self.faults)

    def _names(self, mask):
        return tuple(name for name, m in zip(self.joint_names, mask) if m)
