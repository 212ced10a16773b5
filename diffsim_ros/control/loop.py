"""One control cycle behind the safety layer, and the gate on estimated parameters.

The controller node's cycle as a library class, so that it is tested (property-based, in
``test/test_safety_properties.py``) without a ROS graph:

* :meth:`ControlLoop.step` — torques from the controller (an exception stops the command for
  that cycle, not the loop), the engagement torque when torque mode starts (the model's
  holding torque), then the :class:`~diffsim_ros.control.safety.SafetyLayer`.
* :meth:`ControlLoop.apply_estimates` — a new model from estimated parameters only when every
  value is inside the plausibility bounds (:mod:`diffsim_ros.model.plausibility`, the same
  definition identification uses); otherwise the model is kept and the decision says why. The
  safety layer's gravity hold follows the new model too.

The loop also measures the joint-state period (:class:`StatePeriod`) and hands it to a
controller that limits its damping for it (``observe_state_period``): damping made stable for
100 Hz states can run the arm away on 25 Hz ones.

Two clocks: the safety layer gets the node's time as it is (it must know how long the
hardware went without a command), while the controller and its reference run on a
:class:`ReferenceClock` that never jumps: a clock running backwards or leaping forward does not
make the reference skip back to an old waypoint or ahead to the last one.
"""

import bisect
import collections
import itertools
from typing import NamedTuple

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.gravity import holding_torques
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.plausibility import DEFAULT_BOUNDS, describe_violations, model_violations, plausibility_violations

__all__ = ["ControlLoop", "EstimateDecision", "JointVelocities", "NOT_MODEL_PARAMETERS", "ReferenceClock", "StatePeriod"]

NOT_MODEL_PARAMETERS = ("camera.pose",)
"""Estimated quantities that are not model parameters (the controller has no use for them)."""


class EstimateDecision(NamedTuple):
    """What :meth:`ControlLoop.apply_estimates` did.

    Attributes:
        applied: The controller now commands from the new model.
        message: One log line: what was applied, or why nothing was.
        ignored: Names that are not parameters of the model (e.g. another robot's joints).
    """

    applied: bool
    message: str
    ignored: tuple = ()


class ReferenceClock:
    """Time [s] for references: follows the node clock, but a step backwards or longer than
    ``max_step`` (a clock jump, a long pause) advances it by nothing.

    Args:
        max_step: Longest step [s] taken as elapsed time (control cycles are milliseconds).

    Attributes:
        jumps: Steps not taken as elapsed time.
    """

    def __init__(self, max_step=0.5):
        self.max_step = float(max_step)
        self.jumps = 0
        self._last = self._time = None

    def __call__(self, t):
        """Reference time [s] at node time ``t`` [s] (the same ``t`` gives the same value)."""
        if self._last is None:
            self._time = float(t)
        elif t != self._last:
            step = t - self._last
            if 0.0 < step <= self.max_step:
                self._time += step
            else:
                self.jumps += 1
        self._last = t
        return self._time


class JointVelocities:
    """The joint velocities a control cycle uses: the measured ones, else a backward difference.

    Offline data are differentiated by Savitzky-Golay filters
    (:func:`~diffsim_ros.estimation.signals.filtered_derivatives`, centred, so non-causal); a
    controller only has the past, and a driver that publishes no velocities gets the
    difference of its last two position samples. Never across a clock jump: a new ``epoch``
    (the input's count of time jumps) gives zeros until a second sample arrives.
    """

    def __init__(self):
        self._previous = None  # (time [s], q, epoch) of the last sample

    def __call__(self, t, q, qd=None, epoch=0):
        """Velocities [rad/s], shape (n,), at sample time ``t`` [s] (strictly increasing within an epoch).

        Args:
            t: Sample time [s].
            q: Positions [rad], shape (n,).
            qd: Measured velocities [rad/s], shape (n,), or None when the driver publishes none.
            epoch: Clock epoch of ``t``.
        """
        previous, self._previous = self._previous, (t, q, epoch)
        if qd is not None:
            return qd
        if previous is None or previous[2] != epoch:
            return np.zeros_like(q)
        return (q - previous[1]) / (t - previous[0])


class StatePeriod:
    """Period [s] of a joint-state stream, measured from the arrival times of its states.

    How long the controller holds one state, at a random instant: the time-weighted median of
    the last ``window`` intervals between new states (the interval covering half of their
    total time). Unlike the plain median it sees states delivered in bursts (four every 40 ms
    are a 40 ms period, not 0.1 ms), and unlike the mean hold time it ignores a single long
    gap. Intervals that are not periods are skipped: non-positive ones (a repeated time, a clock
    running backwards) and those longer than ``max_gap`` (dropouts, pauses, clock jumps; the
    input watchdog stops the torque for those).

    Args:
        window: Intervals in the median.
        min_intervals: Intervals needed before there is a measurement.
        max_gap: Longest interval [s] taken as a period.
    """

    def __init__(self, window=50, min_intervals=3, max_gap=0.5):
        self.min_intervals, self.max_gap = int(min_intervals), float(max_gap)
        self._intervals = collections.deque(maxlen=int(window))
        self._last = self.period = None

    def __call__(self, state_time):
        """The measured period [s] after a state received at ``state_time`` [s] (the same
        time again is the same state), or None before ``min_intervals`` intervals."""
        if state_time is None or state_time == self._last:
            return self.period
        if self._last is not None and 0.0 < state_time - self._last <= self.max_gap:
            self._intervals.append(state_time - self._last)
            if len(self._intervals) >= self.min_intervals:
                self.period = _weighted_median(self._intervals)
        self._last = state_time
        return self.period


def _weighted_median(intervals):
    # Plain Python: 50 floats sort in ~4 us, numpy's call overheads make it ~15 (1 kHz states).
    ordered = sorted(intervals)
    covered = list(itertools.accumulate(ordered))
    return float(ordered[bisect.bisect_left(covered, 0.5 * covered[-1])])


class ControlLoop:
    """A controller behind the safety layer (module docstring).

    Args:
        controller: Object with ``compute(t, q, qd) -> tau or None`` and ``update_model(model)``.
        safety: SafetyLayer.
        model: RobotModel the controller commands from (estimates are applied to it).
        bounds: PlausibilityBounds estimates must satisfy.

    Attributes:
        model: Current model.
        model_updates: Estimates applied.
        error: Why the controller failed in the last cycle (None when it did not).
        reference_time: ReferenceClock the controller (and its reference) runs on.
        state_period: StatePeriod of the joint states passed to :meth:`step`.
        notice: A line for the log when the controller changed what it does for the measured
            state period (None otherwise; the caller clears it).
    """

    def __init__(self, controller, safety, model, bounds=DEFAULT_BOUNDS):
        self.controller, self.safety, self.bounds = controller, safety, bounds
        self.reference_time = ReferenceClock()
        self.state_period = StatePeriod()
        self.notice = None
        self.base_model = model
        self._use(model)
        self.model_updates = 0
        self.error = None

    def _use(self, model):
        self.model = model
        self._fast = FastDynamics.from_model(model)

    def step(self, t, q, qd, state_time=None, fresh=True):
        """One cycle: ``(command or None, SafetyStatus)`` as :meth:`SafetyLayer.filter`.

        Args:
            t: Node time [s] (the controller gets ``reference_time(t)``).
            q: Measured positions [rad], shape (n,), or None before the first state.
            qd: Measured velocities [rad/s], shape (n,), or None.
            state_time: Time [s] the state was received (None: ``t``).
            fresh: Whether the input watchdog considers the state fresh (else no command).
        """
        tau = None
        self.error = None
        if not (isinstance(t, (int, float, np.floating)) and np.isfinite(t)):
            return self.safety.filter(t, None, q, qd, state_time)  # refused there, counted as a fault
        t_reference = self.reference_time(t)
        if q is not None and state_time is not None:
            self._observe_period(state_time)
        if q is not None and fresh:
            tau = self._compute(t_reference, q, qd)
        engage = None
        if tau is not None and self.safety.needs_engagement(t):
            engage = self._holding(q)  # what held the arm until now
        return self.safety.filter(t, tau, q, qd, state_time, engage_torque=engage)

    def _observe_period(self, state_time):
        measured = self.state_period(state_time)
        observe = getattr(self.controller, "observe_state_period", None)
        if measured is not None and observe is not None and observe(measured):
            self.notice = (f"joint states arrive every {1e3 * measured:.1f} ms: damping now limited for a "
                           f"{1e3 * self.controller.state_period:.1f} ms state period")

    def _compute(self, t, q, qd):
        try:
            with np.errstate(all="ignore"):  # non-finite torques are the safety layer's to reject
                return self.controller.compute(t, q, qd)
        except Exception as err:  # a failing controller must stop the torque, not the loop
            self.error = f"{type(err).__name__}: {err}"
            return None

    def _holding(self, q):
        try:
            with np.errstate(all="ignore"):
                return holding_torques(self._fast, np.asarray(q, dtype=np.float64))
        except Exception:  # a malformed state: the safety layer rejects it and ramps from zero
            return None

    def apply_estimates(self, values):
        """Command from ``base_model`` with estimated ``values`` (name -> value) if they are plausible.

        Returns:
            EstimateDecision. Nothing changes unless ``applied``.
        """
        known = set(self.base_model.parameter_names())
        ignored = tuple(sorted(k for k in values if k not in known and k not in NOT_MODEL_PARAMETERS))
        used = {k: v for k, v in values.items() if k in known}
        note = f"; ignored {list(ignored)}: not parameters of this model" if ignored else ""
        if not used:
            return EstimateDecision(False, f"estimates not applied: no parameter of this model{note}", ignored)
        violations = plausibility_violations(used, self.bounds)
        if violations:
            return EstimateDecision(False, f"estimates not applied (implausible, model kept): "
                                           f"{describe_violations(violations)}{note}", ignored)
        try:
            model = self.base_model.with_parameters(used)
            violations = model_violations(model, self.bounds)
            if violations:
                raise ControlError(f"implausible model: {describe_violations(violations)}")
            self.controller.update_model(model)
        except (RobotModelError, ValueError) as err:  # ControlError and TorqueMapError are ValueErrors
            return EstimateDecision(False, f"estimates not applied: {err}{note}", ignored)
        self._use(model)
        self.safety.update_model(model)  # a stop holds the arm with the calibrated gravity and springs
        self.model_updates += 1
        summary = ", ".join(f"{k}={np.round(np.asarray(v, dtype=float), 4).tolist()}" for k, v in used.items())
        return EstimateDecision(True, f"model updated from estimates: {summary}{note}", ignored)
