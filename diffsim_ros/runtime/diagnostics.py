"""``/diagnostics`` (diagnostic_msgs/msg/DiagnosticArray) for the nodes: input rates, drops, watchdogs.

Each node publishes one DiagnosticArray per period with one status per concern, named
``<node>: <concern>`` as ``diagnostic_aggregator`` and ``rqt_robot_monitor`` expect. Input
statuses come from an :class:`~diffsim_ros.runtime.inputs.InputMonitor`: the receive and accept
rates over the last period, drop counts by cause, and the watchdog state (OK when fresh,
WARN while waiting for the first sample, ERROR when stale). Node-specific statuses (controller
mode and safety, estimator health) are built by the nodes with :func:`status`.
"""

import time
from dataclasses import dataclass, field

from diffsim_ros.io.ros_messages import NS_PER_S, header_fields
from diffsim_ros.runtime.inputs import FRESH, STALE

__all__ = ["DIAGNOSTIC_ARRAY", "ERROR", "Gaps", "InputRates", "OK", "STALE_LEVEL", "Status", "WARN",
           "diagnostic_array_msg", "input_status", "node_label", "status"]

DIAGNOSTIC_ARRAY = "diagnostic_msgs/msg/DiagnosticArray"
OK, WARN, ERROR, STALE_LEVEL = 0, 1, 2, 3  # DiagnosticStatus levels


@dataclass(frozen=True)
class Status:
    """One DiagnosticStatus: level (OK/WARN/ERROR/STALE_LEVEL), name, message, key-value pairs."""

    level: int
    name: str
    message: str
    values: dict = field(default_factory=dict)
    hardware_id: str = ""


def node_label(handle):
    """The node's name for status names: ``ns/name`` in a namespace, else ``name``."""
    namespace = handle.namespace.strip("/")
    return f"{namespace}/{handle.name}" if namespace else handle.name


def status(level, name, message, values=None, hardware_id=""):
    """A :class:`Status` (values are shown as strings)."""
    return Status(int(level), str(name), str(message), dict(values or {}), str(hardware_id))


class Gaps:
    """Wall-clock gaps between successive events of a periodic output (monotonic clock).

    What a downstream watchdog sees: a publisher's longest silence, measured where it publishes,
    so that a gap at a receiver can be told apart from one at the source.

    Args:
        limit_ms: Gaps longer than this are counted [ms].

    Attributes:
        events: Events so far.
        largest_ms: Longest gap so far [ms].
        over_limit: Number of gaps longer than ``limit_ms``.
    """

    def __init__(self, limit_ms=50.0):
        self.limit_ms = float(limit_ms)
        self.events, self.largest_ms, self.over_limit = 0, 0.0, 0
        self._last = None

    def tick(self, now=None):
        """One event at ``now`` [s, monotonic] (default: now)."""
        now = time.monotonic() if now is None else now
        self.events += 1
        if self._last is not None:
            gap = (now - self._last) * 1e3
            self.largest_ms = max(self.largest_ms, gap)
            self.over_limit += gap > self.limit_ms
        self._last = now

    def pause(self):
        """The output stops on purpose: the time until the next event is no gap."""
        self._last = None

    def values(self, what):
        """Diagnostic key-values ``largest <what> gap [ms]`` and ``<what> gaps > <limit> ms``."""
        return {f"largest {what} gap [ms]": f"{self.largest_ms:.1f}",
                f"{what} gaps > {self.limit_ms:g} ms": self.over_limit}


class InputRates:
    """Receive/accept rates of an InputMonitor between successive diagnostics [Hz]."""

    def __init__(self):
        self._last = None  # (node time [ns], received, accepted)

    def update(self, counters, now_ns):
        """``(received_hz, accepted_hz)`` since the previous call (0 on the first)."""
        previous, self._last = self._last, (now_ns, counters.received, counters.accepted)
        if previous is None or now_ns <= previous[0]:
            return 0.0, 0.0
        seconds = (now_ns - previous[0]) / NS_PER_S
        return (counters.received - previous[1]) / seconds, (counters.accepted - previous[2]) / seconds


def input_status(name, monitor, rates, now_ns):
    """Status of one input: watchdog state, rates and drop counts.

    Args:
        name: Status name (``<node>: <topic>``).
        monitor: InputMonitor.
        rates: The input's InputRates.
        now_ns: Node time [ns].
    """
    received_hz, accepted_hz = rates.update(monitor.counters, now_ns)
    state = monitor.watchdog.state(now_ns)
    level = OK if state == FRESH else ERROR if state == STALE else WARN
    c = monitor.counters
    message = {FRESH: "receiving", STALE: "stale"}.get(state, "waiting for the first message")
    if c.dropped and level == OK:
        level, message = WARN, f"receiving; {c.dropped} dropped"
    values = {
        "watchdog": state, "age [s]": f"{monitor.watchdog.age_s(now_ns):.3f}",
        "received rate [Hz]": f"{received_hz:.1f}", "accepted rate [Hz]": f"{accepted_hz:.1f}",
        "received": c.received, "accepted": c.accepted, "ignored": c.ignored,
        "dropped non-finite": c.dropped_nonfinite, "dropped out of order": c.dropped_out_of_order,
        "dropped invalid": c.dropped_invalid, "last error": monitor.last_error or "",
    }
    return status(level, name, message, values)


def diagnostic_array_msg(factory, stamp_ns, statuses):
    """diagnostic_msgs/msg/DiagnosticArray of :class:`Status` items, stamped ``stamp_ns``."""
    return factory.new(DIAGNOSTIC_ARRAY, header=header_fields(stamp_ns), status=[
        {"level": s.level, "name": s.name, "message": s.message, "hardware_id": s.hardware_id,
         "values": [{"key": str(k), "value": str(v)} for k, v in s.values.items()]}
        for s in statuses
    ])
