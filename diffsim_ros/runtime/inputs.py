"""Input monitors for nodes: staleness, NaN, implausible and out-of-order samples, time
jumps, joint-name checks.

Backend-neutral building blocks (no topics, no clock of their own: callers pass the node
time), so that estimator and controller nodes treat bad input the same way:

* :class:`Watchdog` — is the newest accepted input older than a timeout? Reports
  transitions (waiting -> fresh -> stale -> fresh) so a node logs each once.
* :class:`InputMonitor` — converts messages, drops NaN/inf, implausible, out-of-order and
  unconvertible samples with counters and log lines saying what was dropped and why, recovers
  from time jumps, and feeds a watchdog. :func:`joint_state_input` and :func:`pose_input`
  build the usual ones.
* :class:`PoseWorkspace` — the box a measured pose must lie in.
* :func:`check_joint_names` — a clear start-up error when configured joint names do not
  match the model.

Staleness is measured on receive time in node time (sim time with ``use_sim_time``), not
on header stamps, so clock offsets between robot and workstation do not matter and bag
replay with ``/clock`` works.

**Time jumps.** Stamps must increase, but a clock may jump (``/clock`` restarting with a
looping bag, a robot clock being set, one corrupt stamp). The monitor watches the offset
``stamp - receive time`` of the stream:

* the node's own clock running backwards resets the order check at once (the message that
  shows the jump is accepted);
* a stamp whose offset differs from the stream's by more than ``jump_threshold_s`` is dropped
  as a time jump (a single stamp 100 s in the future costs that one sample); when
  ``resync_samples`` consecutive samples agree on the new offset, the sender's clock did
  jump: the monitor adopts it and accepts them again.

Accepted samples carry their stamps on a continuous time base: the header stamp (the receive
time when the stamp is unset) plus a shift that changes only at a time jump, so downstream
time axes (velocity differences, estimator windows) never run backwards; ``epoch`` counts the
jumps, so a consumer can avoid differencing across one.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

from diffsim_ros.io.ros_messages import (
    NS_PER_S,
    JointMappingError,
    JointNameMap,
    MessageConversionError,
    joint_state_to_sample,
    pose_stamped_to_sample,
)
from diffsim_ros.model.plausibility import DEFAULT_BOUNDS

__all__ = [
    "FRESH",
    "InputCounters",
    "InputMonitor",
    "PoseWorkspace",
    "STALE",
    "WAITING",
    "Watchdog",
    "check_joint_names",
    "joint_state_input",
    "pose_input",
]

WAITING = "waiting"
FRESH = "fresh"
STALE = "stale"


def check_joint_names(expected, available, what="joint names"):
    """Raise JointMappingError unless every name of ``expected`` is in ``available``.

    Args:
        expected: Names that must be present (e.g. the model's joints), shape (n,).
        available: Names offered (e.g. a controller's joints, a message's names).
        what: What ``available`` is, for the message.

    Raises:
        JointMappingError: Naming the missing names and listing the available ones.
    """
    available = list(available)
    missing = [name for name in expected if name not in available]
    if missing:
        raise JointMappingError(f"{what}: missing joint(s) {missing}; available: {available}")
    duplicates = sorted({name for name in available if available.count(name) > 1})
    if duplicates:
        raise JointMappingError(f"{what}: duplicate joint name(s) {duplicates}")


class Watchdog:
    """Age of the newest input against a timeout.

    Args:
        timeout_s: Inputs older than this [s] are stale.
    """

    def __init__(self, timeout_s):
        if not timeout_s > 0:
            raise ValueError(f"watchdog timeout must be positive, got {timeout_s!r} s")
        self.timeout_ns = int(round(timeout_s * NS_PER_S))
        self.last_ns = None
        self._state = WAITING

    def feed(self, now_ns):
        """Record an accepted input at node time ``now_ns`` [ns]."""
        self.last_ns = int(now_ns)

    def age_s(self, now_ns):
        """Seconds since the last input (inf before the first)."""
        return float("inf") if self.last_ns is None else (now_ns - self.last_ns) / NS_PER_S

    def state(self, now_ns):
        """WAITING (no input yet), FRESH, or STALE. Time running backwards is STALE until the next input."""
        if self.last_ns is None:
            return WAITING
        if now_ns < self.last_ns or now_ns - self.last_ns > self.timeout_ns:
            return STALE
        return FRESH

    def is_fresh(self, now_ns):
        """Whether the input is recent enough to act on."""
        return self.state(now_ns) == FRESH

    def poll(self, now_ns):
        """The new state if it changed since the last poll, else None (log on transitions)."""
        state = self.state(now_ns)
        if state == self._state:
            return None
        self._state = state
        return state


@dataclass
class InputCounters:
    """Message counts of one input.

    Attributes:
        received: Messages seen.
        accepted: Samples accepted.
        dropped_nonfinite: Dropped for NaN/inf values.
        dropped_out_of_order: Dropped for a stamp not after the last accepted one.
        dropped_invalid: Dropped because conversion or a plausibility check failed (missing
            joints, bad lengths, positions outside the limits or the workspace).
        dropped_time_jump: Dropped for a stamp that jumped away from the stream's time base.
        time_jumps: Time jumps recovered from (node clock backwards, sender clock re-adopted).
        ignored: Messages not meant for this input (e.g. joint states of other joints).
    """

    received: int = 0
    accepted: int = 0
    dropped_nonfinite: int = 0
    dropped_out_of_order: int = 0
    dropped_invalid: int = 0
    dropped_time_jump: int = 0
    time_jumps: int = 0
    ignored: int = 0

    @property
    def dropped(self):
        """All dropped samples."""
        return self.dropped_nonfinite + self.dropped_out_of_order + self.dropped_invalid + self.dropped_time_jump

    def drop_notes(self):
        """One line per kind of drop that happened: ``"1000 of 2000 samples with NaN/inf dropped"``."""
        kinds = ((self.dropped_nonfinite, "with NaN/inf"), (self.dropped_out_of_order, "out of order or repeated"),
                 (self.dropped_invalid, "invalid (conversion or plausibility check failed)"),
                 (self.dropped_time_jump, "off the stream's time base (time jump)"))
        return [f"{count} of {self.received} samples {what} dropped" for count, what in kinds if count]


class InputMonitor:
    """Validated, time-ordered input samples with counters, log lines and a watchdog.

    Args:
        convert: ``convert(msg) -> sample`` (a dataclass with ``stamp_ns`` and
            ``is_finite()``), None for messages to ignore; raising MessageConversionError
            marks the message invalid (its text is logged).
        timeout_s: Watchdog timeout [s].
        what: Name for messages (e.g. the topic).
        logger: Node logger (``log(level, message)``) for what is dropped and why, and for
            time jumps; None: counters only. The first drop of each kind is logged at once,
            later ones at most every ``log_period_s`` with their count.
        jump_threshold_s: Largest change [s] of the stamp-to-receive-time offset that is not
            a time jump (transport delays and reordering are far smaller).
        resync_samples: Consecutive samples agreeing on a new offset that make the monitor
            adopt it (the sender's clock jumped).
        log_period_s: Shortest interval [s] between two log lines of one kind of drop.

    Attributes:
        latest: Last accepted sample (None before the first).
        counters: InputCounters.
        watchdog: Watchdog fed with the receive time of each accepted sample.
        last_error: Message of the last invalid input (None when there was none).
        epoch: Time jumps so far (0 before the first): samples of different epochs must not
            be differenced.
    """

    def __init__(self, convert, *, timeout_s, what="input", logger=None, jump_threshold_s=1.0, resync_samples=3,
                 log_period_s=5.0):
        if not jump_threshold_s > 0 or int(resync_samples) < 1 or not log_period_s >= 0:
            raise ValueError("jump_threshold_s must be > 0, resync_samples >= 1 and log_period_s >= 0")
        self.convert, self.what, self.logger = convert, what, logger
        self.watchdog = Watchdog(timeout_s)
        self.counters = InputCounters()
        self.latest = None
        self.last_error = None
        self.epoch = 0
        self.jump_threshold_ns = int(round(jump_threshold_s * NS_PER_S))
        self.resync_samples = int(resync_samples)
        self.log_period_ns = int(round(log_period_s * NS_PER_S))
        self._last_stamp = None  # raw stamp [ns] of the last accepted sample (None: order check reset)
        self._last_offset = None  # its stamp - receive time [ns]
        self._last_receive = None  # receive time [ns] of the last message of any kind
        self._accepted_at = None  # (continuous stamp, receive time) [ns] of the last accepted sample
        self._period = 0  # last positive continuous-stamp step [ns]
        self._shift = 0  # continuous stamp - raw stamp [ns]
        self._rebase = False
        self._candidates = []  # (stamp, offset) of consecutive samples off the time base
        self._notes = {}  # kind -> [node time of the last log line, drops not logged since]

    # ------------------------------------------------------------------ the input
    def update(self, msg, now_ns):
        """Process one message received at node time ``now_ns``.

        Returns:
            The accepted sample with its stamp on the continuous time base (module docstring),
            or None when it was ignored or dropped (see ``counters``; logged).
        """
        self.counters.received += 1
        self._check_node_clock(now_ns)
        try:
            sample = self.convert(msg)
        except MessageConversionError as err:
            self.counters.dropped_invalid += 1
            text = str(err)  # conversions may already name the input
            self.last_error = text if text.startswith(f"{self.what}:") else f"{self.what}: {text}"
            self._note(f"invalid:{type(err).__name__}", "error", f"{self.last_error}; message dropped", now_ns)
            return None
        if sample is None:
            self.counters.ignored += 1
            return None
        if not sample.is_finite():
            self.counters.dropped_nonfinite += 1
            self._note("nonfinite", "warning", f"{self.what}: dropped a sample with NaN/inf values", now_ns)
            return None
        stamp = sample.stamp_ns or now_ns  # unset stamps: order by receive time
        if not self._in_order(stamp, now_ns):
            return None
        return self._accept(sample, stamp, now_ns)

    def is_fresh(self, now_ns):
        """Whether the latest accepted sample arrived within the timeout."""
        return self.watchdog.is_fresh(now_ns)

    def reset_order(self):
        """Forget the last stamp: the next sample starts a new time base (a new epoch)."""
        self.epoch += 1
        self._last_stamp = self._last_offset = None
        self._candidates = []
        self._rebase = self._accepted_at is not None

    # ------------------------------------------------------------------ time
    def _check_node_clock(self, now_ns):
        previous, self._last_receive = self._last_receive, now_ns
        if previous is not None and now_ns < previous:
            self._time_jump(f"{self.what}: node clock jumped back {(previous - now_ns) / NS_PER_S:.6g} s; "
                            "order check reset", now_ns)

    def _in_order(self, stamp, now_ns):
        """Whether ``stamp`` continues the stream (counts and logs the drop otherwise)."""
        offset = stamp - now_ns
        if self._last_stamp is None:
            return True
        jump = offset - self._last_offset
        if abs(jump) <= self.jump_threshold_ns:
            self._candidates = []
            if stamp > self._last_stamp:
                return True
            self.counters.dropped_out_of_order += 1
            self._note("order", "warning", f"{self.what}: dropped a sample stamped {(self._last_stamp - stamp) / NS_PER_S:.6g} s "
                       "before (or at) the last accepted one", now_ns)
            return False
        previous = self._candidates[-1] if self._candidates else None
        if previous is not None and abs(offset - previous[1]) <= self.jump_threshold_ns and stamp > previous[0]:
            self._candidates.append((stamp, offset))
        else:
            self._candidates = [(stamp, offset)]
        if len(self._candidates) >= self.resync_samples:
            count = len(self._candidates)
            self._time_jump(f"{self.what}: stamps jumped {jump / NS_PER_S:+.6g} s against the receive time and "
                            f"{count} consecutive samples agree: the sender's clock changed, adopted "
                            f"({count - 1} dropped before)", now_ns)
            return True
        self.counters.dropped_time_jump += 1
        self._note("jump", "warning", f"{self.what}: dropped a sample stamped {jump / NS_PER_S:+.6g} s away from the "
                   f"stream's time base (more than {self.jump_threshold_ns / NS_PER_S:g} s)", now_ns)
        return False

    def _time_jump(self, message, now_ns):
        self.counters.time_jumps += 1
        self.reset_order()
        self._log("warning", message)

    def _accept(self, sample, stamp, now_ns):
        if self._rebase:
            # Continue the continuous time base from the last accepted sample by the receive gap
            # (the last sample period when the node clock itself jumped back).
            last_stamp, last_receive = self._accepted_at
            gap = now_ns - last_receive
            self._shift = last_stamp + (gap if gap > 0 else max(self._period, 1)) - stamp
            self._rebase = False
        continuous = stamp + self._shift
        if self._accepted_at is not None and continuous > self._accepted_at[0]:
            self._period = continuous - self._accepted_at[0]
        self._last_stamp, self._last_offset = stamp, stamp - now_ns
        self._accepted_at = (continuous, now_ns)
        self._candidates = []
        self.counters.accepted += 1
        sample = dataclasses.replace(sample, stamp_ns=continuous)
        self.latest = sample
        self.watchdog.feed(now_ns)
        return sample

    # ------------------------------------------------------------------ logging
    def _log(self, level, message):
        if self.logger is not None:
            self.logger.log(level, message)

    def _note(self, kind, level, message, now_ns):
        """Log a drop: the first of its kind at once, then at most every ``log_period_s`` with a count."""
        note = self._notes.get(kind)
        if note is not None and 0 <= now_ns - note[0] < self.log_period_ns:
            note[1] += 1
            return
        more = f" (and {note[1]} more since the last report)" if note is not None and note[1] else ""
        self._notes[kind] = [now_ns, 0]
        self._log(level, message + more)


class PoseWorkspace:
    """Axis-aligned box [m] a measured position must lie in (in the pose's frame).

    Args:
        lower: Corner (3,) [m].
        upper: Corner (3,) [m], each coordinate > ``lower``'s.
    """

    def __init__(self, lower, upper):
        self.lower = np.asarray(lower, dtype=np.float64).reshape(-1)
        self.upper = np.asarray(upper, dtype=np.float64).reshape(-1)
        if self.lower.shape != (3,) or self.upper.shape != (3,) or not (
                np.all(np.isfinite(self.lower)) and np.all(np.isfinite(self.upper)) and np.all(self.lower < self.upper)):
            raise ValueError(f"pose workspace needs finite 3-vectors min < max, got {lower!r}, {upper!r}")

    @classmethod
    def default(cls, bounds=DEFAULT_BOUNDS):
        """The cube of half-width ``camera_radius`` (the plausibility bound on camera distances)."""
        r = bounds.camera_radius
        return cls((-r, -r, -r), (r, r, r))

    @classmethod
    def from_config(cls, raw, where="camera.workspace", bounds=DEFAULT_BOUNDS):
        """From a config mapping ``{min: [x, y, z], max: [x, y, z]}``; None or empty gives :meth:`default`.

        Raises:
            ValueError: Not such a mapping (named).
        """
        if not raw:
            return cls.default(bounds)
        if not isinstance(raw, dict) or set(raw) != {"min", "max"}:
            raise ValueError(f"{where}: expected a mapping with 'min' and 'max' [x, y, z] in metres, got {raw!r}")
        try:
            return cls([float(v) for v in raw["min"]], [float(v) for v in raw["max"]])
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None

    def violation(self, position):
        """Why ``position`` (3,) [m] is outside, or None."""
        if np.all(self.lower <= position) and np.all(position <= self.upper):
            return None
        return (f"position {np.array2string(np.asarray(position), precision=4)} m is outside the workspace "
                f"{self.lower.tolist()} .. {self.upper.tolist()} m")


def joint_state_input(joint_names, timeout_s, what="joint_states", *, bounds=None, logger=None):
    """InputMonitor of sensor_msgs/JointState in model joint order.

    Messages naming none of the model joints are ignored (other publishers on the topic);
    messages naming some but not all are invalid (``last_error`` names the missing joints).

    Args:
        joint_names: Model joint names, shape (n,).
        timeout_s: Staleness timeout [s].
        what: Name for messages.
        bounds: JointStateBounds (:mod:`diffsim_ros.control.safety`): samples with implausible
            positions or speeds are dropped as invalid; None: not checked.
        logger: Node logger for drops and time jumps (see :class:`InputMonitor`).
    """
    joint_map = JointNameMap(joint_names)

    def convert(msg):
        if not joint_map.overlaps(msg.name):
            return None
        sample = joint_state_to_sample(msg, joint_map, what)
        if bounds is not None and sample.is_finite():
            reason = bounds.violation(sample.positions, sample.velocities)
            if reason is not None:
                raise MessageConversionError(f"implausible joint state: {reason}")
        return sample

    return InputMonitor(convert, timeout_s=timeout_s, what=what, logger=logger)


def pose_input(timeout_s, what="camera_pose", *, workspace=None, logger=None):
    """InputMonitor of geometry_msgs/PoseStamped (PoseSample, quaternion w, x, y, z).

    Args:
        timeout_s: Staleness timeout [s].
        what: Name for messages.
        workspace: PoseWorkspace the positions must lie in (default :meth:`PoseWorkspace.default`).
        logger: Node logger for drops and time jumps (see :class:`InputMonitor`).
    """
    workspace = PoseWorkspace.default() if workspace is None else workspace

    def convert(msg):
        sample = pose_stamped_to_sample(msg, what)
        if sample.is_finite():
            reason = workspace.violation(sample.position)
            if reason is not None:
                raise MessageConversionError(reason)
        return sample

    return InputMonitor(convert, timeout_s=timeout_s, what=what, logger=logger)
