"""Property-based tests of the safety layer and the controller loop (issue 16, item 3).

For any sequence of joint states, controller torques, references, estimates and time stamps —
NaN, inf, time jumps backwards and far forwards, absurd values included — every published
command

1. is finite and has the model's shape;
2. is within the effort limits;
3. is within the torque-rate limit: consecutive published commands differ by at most
   ``rate x min(elapsed, MAX_RATE_INTERVAL)`` (time running backwards counts as none; the first
   command of a (re-)engagement equals the engagement torque). The one exception, by design
   (control/safety.py, step 7): inside a joint-limit zone the push into the limit may be cut
   faster — a change towards the restoring direction only;
4. never pushes a joint further into its limit zone: inside the zone of the latest valid
   measurement, the push towards the limit is at most ``effort_limit x fade`` (zero at the
   limit);

and the loop resumes after a fault clears within a stated bound:

* safety layer alone: the first cycle whose inputs are all good (finite time, a fresh
  plausible state, finite torques) is active — resumption within one cycle;
* controller loop with the joint-state input monitor: within ``RESUME_STATES`` = 3 good joint
  states (a sender clock that jumped is adopted on the third agreeing sample), the cycle after
  them is active.

Deterministic (``derandomize=True``) and bounded (fixed example counts, no deadline; ~10 s).
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffsim_ros.control import (
    ControlError,
    ControlLoop,
    GravityCompensation,
    JointImpedanceController,
    JointStateBounds,
    SafetyConfig,
    SafetyLayer,
    SetPoint,
    check_within_limits,
    holding_torques,
)
from diffsim_ros.control.safety import MAX_RATE_INTERVAL
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.io.ros_messages import joint_state_msg
from diffsim_ros.io.ros_types import TypestoreMessages
from diffsim_ros.model import load_robot_config
from diffsim_ros.runtime.inputs import joint_state_input
from oracles import BAXTER_LEFT

TOL = 1e-9  # [N·m] arithmetic slack of the checks
RATE_CREDIT = 0.1  # [s] longest interval the rate limit may credit (control/safety.py MAX_RATE_INTERVAL)
RESUME_STATES = 3
NS = 1_000_000_000
MODEL = load_robot_config(BAXTER_LEFT).build_model()
N = MODEL.nq
LOWER, UPPER = MODEL.lower.numpy(), MODEL.upper.numpy()
FACTORY = TypestoreMessages()


def property_settings(max_examples):
    """Deterministic and bounded: derandomized, no example database, a fixed number of examples."""
    return settings(derandomize=True, deadline=None, database=None, max_examples=max_examples,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---------------------------------------------------------------------- strategies
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, 0.0])
TORQUE = st.one_of(st.floats(-2000.0, 2000.0), SPECIAL)
SPEED = st.one_of(st.floats(-5.0, 5.0), SPECIAL)


@st.composite
def positions(draw, valid_only=False):
    """Joint positions: anywhere in range, hugging a limit, past it, or absurd."""
    kind = draw(st.sampled_from(["range", "near_limit", "past_limit", "absurd"]) if not valid_only
                else st.sampled_from(["range", "near_limit"]))
    u = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=N, max_size=N)))
    q = LOWER + u * (UPPER - LOWER)
    if kind == "near_limit":
        j, side, depth = draw(st.integers(0, N - 1)), draw(st.booleans()), draw(st.floats(-0.02, 0.2))
        q[j] = UPPER[j] - depth if side else LOWER[j] + depth
    elif kind == "past_limit":
        j, offset = draw(st.integers(0, N - 1)), draw(st.floats(-1.0, 1.0))
        q[j] = (UPPER[j] if offset > 0 else LOWER[j]) + offset
    elif kind == "absurd":
        q[draw(st.integers(0, N - 1))] = draw(SPECIAL)
    return q


def vectors(element):
    return st.lists(element, min_size=N, max_size=N).map(np.array)


TIME_STEPS = st.one_of(st.sampled_from([1e-3, 5e-3, 5e-3, 5e-3, 0.0, 0.3, -5.0, 100.0, math.nan]),
                       st.floats(-1.0, 1.0))

CYCLE = st.fixed_dictionaries({
    "dt": TIME_STEPS,
    "tau": st.one_of(vectors(TORQUE), st.none(), st.just(np.zeros(3))),
    "q": st.one_of(positions(), st.none()),
    "qd": st.one_of(vectors(SPEED), st.just(np.zeros(N))),
    "age": st.one_of(st.none(), st.sampled_from([0.0, 0.01, 1.0, -1.0])),
    "engage": st.one_of(st.none(), vectors(st.floats(-100.0, 100.0)), st.just(np.full(N, math.nan))),
    "inactive": st.sampled_from([False, False, False, True]),  # an inactive node's hold cycle
})

LAYER = st.fixed_dictionaries({
    "output": st.sampled_from(["baxter", "ros2_control"]),
    "torque_rate_limit": st.sampled_from([50.0, 200.0, 1000.0, 1e6]),
    "limit_margin": st.sampled_from([0.05, 0.1, 0.3]),
    "limit_stiffness": st.sampled_from([0.0, 50.0, 500.0]),
    "limit_damping": st.sampled_from([0.0, 5.0]),
    "hold": st.sampled_from(["gravity", "fixed"]),
    "hold_fraction": st.floats(-0.5, 0.5),
    "hold_fade_after": st.sampled_from([0.0, 0.2, 10.0]),
})


def make_layer(spec):
    effort = MODEL.effort_limit.numpy()
    fixed = spec["output"] != "baxter" and spec["hold"] == "fixed"
    hold = spec["hold_fraction"] * effort * np.linspace(-1.0, 1.0, N) if fixed else None
    return SafetyLayer(MODEL, SafetyConfig(
        output=spec["output"], torque_rate_limit=spec["torque_rate_limit"], limit_margin=spec["limit_margin"],
        limit_stiffness=spec["limit_stiffness"], limit_damping=spec["limit_damping"], hold=spec["hold"],
        hold_command=hold, hold_fade_after=spec["hold_fade_after"]))


# ---------------------------------------------------------------------- the invariants
class CommandChecker:
    """Checks every command of one safety layer against the module docstring's properties."""

    def __init__(self, layer):
        self.layer = layer
        self.bounds = JointStateBounds(MODEL, layer.config.position_slack, layer.config.speed_factor)
        self.previous = None  # (command, time it was published [s])
        self.last_cycle = None
        self.last_valid_q = None
        self.commands = 0

    def valid_state(self, t, q, qd, state_time):
        """Whether the layer takes (q, qd) as the latest valid measurement this cycle."""
        if q is None or qd is None or not _finite_time(t):
            return False
        if state_time is not None and not abs(t - state_time) <= self.layer.config.state_timeout:
            return False
        q, qd = np.asarray(q, dtype=float), np.asarray(qd, dtype=float)
        return (q.shape == qd.shape == (N,) and np.all(np.isfinite(q)) and np.all(np.isfinite(qd))
                and self.bounds.violation(q, qd) is None)

    def cycle(self, t, q, qd, state_time, engage, out, status):
        layer = self.layer
        if _finite_time(t):
            if self.last_cycle is not None and t < self.last_cycle and self.previous is not None:
                self.previous = (self.previous[0], t)  # a backward jump counts as no time elapsed
            self.last_cycle = t
        if self.valid_state(t, q, qd, state_time):
            self.last_valid_q = np.asarray(q, dtype=float)
        assert (out is not None) == status.publish
        if layer.output.publish_on_stop:
            assert out is not None, "the effort controller must get a command every cycle"
        if out is None:
            return
        self.commands += 1
        effort = layer.effort_limit
        assert out.shape == (N,) and out.dtype == np.float64 and np.all(np.isfinite(out)), out
        assert np.all(np.abs(out) <= effort * (1 + 1e-12)), out
        zone_upper, zone_lower = self._zones()
        self._check_zone(out, zone_upper, zone_lower)
        base, credit = self._rate_base(t, engage, status)
        if base is not None:
            change = out - base
            too_fast = np.abs(change) > layer.rate_limit * credit + TOL
            restoring = (zone_upper & (change < 0)) | (zone_lower & (change > 0))
            assert not np.any(too_fast & ~restoring), (
                f"rate limit: change {change[too_fast & ~restoring]} in {credit} s, reason {status.reason}")
        self.previous = (out.copy(), t if _finite_time(t) else (self.previous[1] if self.previous else None))

    def _zones(self):
        """Joints inside the upper / lower zone of the latest valid measurement, and fades."""
        if self.last_valid_q is None:
            return np.zeros(N, bool), np.zeros(N, bool)
        margin = self.layer.config.limit_margin
        return UPPER - self.last_valid_q < margin, self.last_valid_q - LOWER < margin

    def _check_zone(self, out, zone_upper, zone_lower):
        if self.last_valid_q is None:
            return
        margin, effort, q = self.layer.config.limit_margin, self.layer.effort_limit, self.last_valid_q
        fade_upper = np.clip((UPPER - q) / margin, 0.0, 1.0)
        fade_lower = np.clip((q - LOWER) / margin, 0.0, 1.0)
        assert np.all(out[zone_upper] <= effort[zone_upper] * fade_upper[zone_upper] + TOL), "pushes into an upper limit"
        assert np.all(out[zone_lower] >= -effort[zone_lower] * fade_lower[zone_lower] - TOL), "pushes into a lower limit"

    def _rate_base(self, t, engage, status):
        """``(torque the change is measured from, seconds of rate credit)``; base None: nothing to check."""
        layer = self.layer
        if status.engaged:  # the first command of torque mode: exactly the engagement torque
            engage = None if engage is None else np.asarray(engage, dtype=float)
            if engage is not None and engage.shape == (N,) and np.all(np.isfinite(engage)):
                return np.clip(engage, -layer.effort_limit, layer.effort_limit), 0.0
            return (layer.hold_command if layer.output.publish_on_stop else np.zeros(N)), 0.0
        if self.previous is None:
            return None, 0.0  # the effort controller's first command: the hold command, from no command
        command, when = self.previous
        if when is None or not _finite_time(t):
            return command, 0.0
        return command, min(max(t - when, 0.0), RATE_CREDIT)


def _finite_time(t):
    return isinstance(t, float) and math.isfinite(t)


def _good(checker, t, tau, q, qd, state_time):
    """All inputs good: the layer must command (resumption within one cycle)."""
    tau = None if tau is None else np.asarray(tau, dtype=float)
    return (tau is not None and tau.shape == (N,) and np.all(np.isfinite(tau))
            and checker.valid_state(t, q, qd, state_time))


# ---------------------------------------------------------------------- the safety layer alone
@property_settings(250)
@given(LAYER, st.lists(CYCLE, min_size=1, max_size=60))
def test_safety_layer_commands_are_always_safe_and_resume_at_once(spec, cycles):
    layer = make_layer(spec)
    checker = CommandChecker(layer)
    t = 100.0
    for cycle in cycles:
        if math.isnan(cycle["dt"]):
            now = math.nan  # a broken clock reading
        else:
            t += cycle["dt"]
            now = t
        state_time = None if cycle["age"] is None or not math.isfinite(now) else now - cycle["age"]
        # The fixed hold of an inactive node is published at once (as at shutdown): only the gravity
        # hold ramps, and only it is checked against the rate limit here.
        if cycle["inactive"] and spec["hold"] == "gravity":
            out, status = layer.hold(now, cycle["q"], cycle["qd"], state_time)
            checker.cycle(now, cycle["q"], cycle["qd"], state_time, None, out, status)
            assert not status.active
            continue
        out, status = layer.filter(now, cycle["tau"], cycle["q"], cycle["qd"], state_time, engage_torque=cycle["engage"])
        checker.cycle(now, cycle["q"], cycle["qd"], state_time, cycle["engage"], out, status)
        if _good(checker, now, cycle["tau"], cycle["q"], cycle["qd"], state_time):
            assert status.active and status.reason == "ok", status


# ---------------------------------------------------------------------- the controller loop
ESTIMATE = st.dictionaries(
    st.sampled_from(["payload.mass", "left_s1.spring.stiffness", "left_e1.damping", "payload.com", "right_s0.damping"]),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-50.0, 1e6, -1e6, -100.0, 0.5, 2.0])),
    min_size=1, max_size=3)

EVENT = st.one_of(
    st.tuples(st.just("state"), positions(), vectors(SPEED), st.sampled_from([0, 0, 0, -5 * NS, 100 * NS, 10 * NS])),
    st.tuples(st.just("tick"), TIME_STEPS.filter(lambda dt: dt == dt)),
    st.tuples(st.just("estimate"), ESTIMATE),
    st.tuples(st.just("reference"), positions()),
)


class _Reference:
    def __init__(self, target):
        self.target = SetPoint(target)

    def __call__(self, t):
        return self.target(t)


def make_loop(spec, mode):
    layer = make_layer(spec)
    reference = _Reference(np.clip(np.zeros(N), LOWER, UPPER))
    if mode == "gravity_compensation":
        controller = GravityCompensation(MODEL)
    else:
        controller = JointImpedanceController(MODEL, [80, 80, 30, 30, 10, 10, 5], [30, 30, 8, 10, 0.1, 0.1, 0.05],
                                              reference, "analytic")
    return ControlLoop(controller, layer, MODEL), reference


class LoopDriver:
    """The controller node's wiring, without ROS: joint states through the input monitor, the loop on ticks."""

    def __init__(self, loop):
        self.loop = loop
        self.monitor = joint_state_input(MODEL.joint_names, loop.safety.config.state_timeout,
                                         bounds=loop.safety.state_bounds)
        self.checker = CommandChecker(loop.safety)
        self.now_ns = 1_000 * NS
        self.stamp_offset = 0
        self.state = None

    def joint_state(self, q, qd, offset_change=0):
        self.stamp_offset += offset_change
        msg = joint_state_msg(FACTORY, self.now_ns + self.stamp_offset, MODEL.joint_names, q, qd)
        sample = self.monitor.update(msg, self.now_ns)
        if sample is not None:
            self.state = (sample.positions, sample.velocities)

    def tick(self, dt):
        self.now_ns += int(round(dt * NS))
        t = self.now_ns / NS
        q, qd = self.state if self.state is not None else (None, None)
        state_time = None if self.monitor.watchdog.last_ns is None else self.monitor.watchdog.last_ns / NS
        out, status = self.loop.step(t, q, qd, state_time, fresh=self.monitor.is_fresh(self.now_ns))
        self.checker.cycle(t, q, qd, state_time, self._engage(q, status), out, status)
        return out, status

    def _engage(self, q, status):
        return holding_torques(FastDynamics.from_model(self.loop.model), q) if status.engaged and q is not None else None


@property_settings(80)
@given(LAYER, st.sampled_from(["gravity_compensation", "impedance"]), st.lists(EVENT, min_size=1, max_size=50),
       positions(valid_only=True))
def test_controller_loop_commands_are_always_safe_and_resume_after_faults(spec, mode, events, recovery_q):
    loop, reference = make_loop(spec, mode)
    driver = LoopDriver(loop)
    for event in events:
        kind = event[0]
        if kind == "state":
            driver.joint_state(event[1], event[2], event[3])
        elif kind == "tick":
            driver.tick(event[1])
        elif kind == "estimate":
            decision = loop.apply_estimates(event[1])
            if decision.applied:  # only plausible estimates ever reach the model
                assert loop.model.get_parameter("payload.mass").item() >= 0.0
        else:
            try:
                reference.target = SetPoint(check_within_limits(event[1], MODEL, "reference")[0])
            except ControlError:
                assert not np.all((event[1] >= LOWER) & (event[1] <= UPPER))
    # The fault clears: good joint states every 5 ms with a tick after each.
    statuses = []
    for _ in range(RESUME_STATES + 2):
        driver.now_ns += 5_000_000
        driver.joint_state(recovery_q, np.zeros(N))
        statuses.append(driver.tick(0.0)[1])
    assert all(s.active for s in statuses[RESUME_STATES - 1:]), [s.reason for s in statuses]


def test_the_checker_catches_what_it_must():
    """The invariants are not vacuous: a layer without the zone bound or the rate limit fails them."""
    assert MAX_RATE_INTERVAL == RATE_CREDIT
    layer = make_layer({"output": "ros2_control", "torque_rate_limit": 100.0, "limit_margin": 0.1,
                        "limit_stiffness": 0.0, "limit_damping": 0.0, "hold": "fixed", "hold_fraction": 0.0,
                        "hold_fade_after": 10.0})
    checker = CommandChecker(layer)
    q = 0.5 * (LOWER + UPPER)
    out, status = layer.filter(0.0, np.zeros(N), q, np.zeros(N))
    checker.cycle(0.0, q, np.zeros(N), None, None, out, status)
    with pytest.raises(AssertionError, match="rate limit"):
        checker.cycle(0.001, q, np.zeros(N), None, None, out + 1.0, status._replace(engaged=False))
    at_limit = q.copy()
    at_limit[0] = UPPER[0]
    with pytest.raises(AssertionError, match="pushes into an upper limit"):
        pushing = np.zeros(N)
        pushing[0] = 0.05  # within the rate limit, but into the limit
        checker.cycle(0.002, at_limit, np.zeros(N), None, None, pushing, status)
