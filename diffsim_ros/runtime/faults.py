"""Input fault handling for nodes: staleness, NaN and out-of-order samples, joint-name checks.

Backend-neutral building blocks (no topics, no clock of their own: callers pass the node
time), so that estimator and controller nodes treat bad input the same way:

* :class:`Watchdog` — is the newest accepted input older than a timeout? Reports
  transitions (waiting -> fresh -> stale -> fresh) so a node logs each once.
* :class:`InputMonitor` — converts messages, drops NaN/inf, out-of-order and unconvertible
  samples with counters, and feeds a watchdog. :func:`joint_state_input` and
  :func:`pose_input` build the usual ones.
* :func:`check_joint_names` — a clear start-up error when configured joint names do not
  match the model.

Staleness is measured on receive time in node time (sim time with ``use_sim_time``), not
on header stamps, so clock offsets between robot and workstation do not matter and bag
replay with ``/clock`` works.
"""

from dataclasses import dataclass

from diffsim_ros.io.ros_messages import (
    NS_PER_S,
    JointMappingError,
    JointNameMap,
    MessageConversionError,
    joint_state_to_sample,
    pose_stamped_to_sample,
)

__all__ = [
    "FRESH",
    "InputCounters",
    "InputMonitor",
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
        """WAITING (no input yet), FRESH, or STALE. Time running backwards (bag loop) is STALE."""
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
        dropped_invalid: Dropped because conversion failed (missing joints, bad lengths).
        ignored: Messages not meant for this input (e.g. joint states of other joints).
    """

    received: int = 0
    accepted: int = 0
    dropped_nonfinite: int = 0
    dropped_out_of_order: int = 0
    dropped_invalid: int = 0
    ignored: int = 0

    @property
    def dropped(self):
        """All dropped samples."""
        return self.dropped_nonfinite + self.dropped_out_of_order + self.dropped_invalid


class InputMonitor:
    """Validated, time-ordered input samples with counters and a watchdog.

    Args:
        convert: ``convert(msg) -> sample`` (with ``stamp_ns`` and ``is_finite()``), None for
            messages to ignore; raising MessageConversionError marks the message invalid.
        timeout_s: Watchdog timeout [s].
        what: Name for messages (e.g. the topic).

    Attributes:
        latest: Last accepted sample (None before the first).
        counters: InputCounters.
        watchdog: Watchdog fed with the receive time of each accepted sample.
        last_error: Message of the last invalid input (None when there was none).
    """

    def __init__(self, convert, *, timeout_s, what="input"):
        self.convert, self.what = convert, what
        self.watchdog = Watchdog(timeout_s)
        self.counters = InputCounters()
        self.latest = None
        self.last_error = None
        self._last_stamp = None

    def update(self, msg, now_ns):
        """Process one message received at node time ``now_ns``.

        Returns:
            The accepted sample, or None when it was ignored or dropped (see ``counters``).
        """
        self.counters.received += 1
        try:
            sample = self.convert(msg)
        except MessageConversionError as err:
            self.counters.dropped_invalid += 1
            self.last_error = f"{self.what}: {err}"
            return None
        if sample is None:
            self.counters.ignored += 1
            return None
        if not sample.is_finite():
            self.counters.dropped_nonfinite += 1
            return None
        stamp = sample.stamp_ns or now_ns  # unset stamps: order by receive time
        if self._last_stamp is not None and stamp <= self._last_stamp:
            self.counters.dropped_out_of_order += 1
            return None
        self._last_stamp = stamp
        self.counters.accepted += 1
        self.latest = sample
        self.watchdog.feed(now_ns)
        return sample

    def is_fresh(self, now_ns):
        """Whether the latest accepted sample arrived within the timeout."""
        return self.watchdog.is_fresh(now_ns)

    def reset_order(self):
        """Forget the last stamp (after a time jump, e.g. a looping bag)."""
        self._last_stamp = None


def joint_state_input(joint_names, timeout_s, what="joint_states"):
    """InputMonitor of sensor_msgs/JointState in model joint order.

    Messages naming none of the model joints are ignored (other publishers on the topic);
    messages naming some but not all are invalid (``last_error`` names the missing joints).

    Args:
        joint_names: Model joint names, shape (n,).
        timeout_s: Staleness timeout [s].
        what: Name for messages.
    """
    joint_map = JointNameMap(joint_names)

    def convert(msg):
        if not joint_map.overlaps(msg.name):
            return None
        return joint_state_to_sample(msg, joint_map, what)

    return InputMonitor(convert, timeout_s=timeout_s, what=what)


def pose_input(timeout_s, what="camera_pose"):
    """InputMonitor of geometry_msgs/PoseStamped (PoseSample, quaternion w, x, y, z)."""
    return InputMonitor(lambda msg: pose_stamped_to_sample(msg, what), timeout_s=timeout_s, what=what)
