"""Embedded in-process runtime: several nodes, real ROS 2 message types, deterministic time.

No network and no ROS installation: messages are rosbags typestore objects (standard ROS 2
types of one distribution plus ``baxter_core_msgs``), serialized to CDR on publish and
deserialized per subscription, so every message crossing a topic is a valid ROS 2 message
and subscribers never share objects with publishers.

Scheduling. Timer firings and message deliveries are events in one queue ordered by
``(time, order of scheduling)``: events at equal times run first-scheduled-first, a timer's
next firing is scheduled just before its callback runs, and a published message is taken
by each subscription in a later event at the same time. Each subscription has a queue
honouring QoS history/depth (KEEP_LAST drops the oldest, counted in ``dropped``), so depth
matters when several messages are published before a subscriber runs. QoS
reliability/durability are matched as DDS does (incompatible pairs are logged and not
connected); transient_local publishers replay their last ``depth`` messages to late
transient_local subscriptions.

Time. ``clock="sim"``: simulated time starting at ``start_ns``, jumping from event to event
(no sleeping; runs as fast as the callbacks). ``clock="wall"``: system time, sleeping until
each event is due. A node with parameter ``use_sim_time: true`` takes its time from the
``/clock`` topic (``rosgraph_msgs/msg/Clock``), as rclpy does: its time is 0 until the first
clock message, and its timers fire when clock messages advance its time past their due
time (once per clock update, skipping missed periods, like rcl). ``/clock`` comes from
``clock_period_s`` (the runtime publishes its own time) or from a bag played with
:meth:`EmbeddedRuntime.play_bag`.

Recording. :meth:`EmbeddedRuntime.record` writes every published message (or the listed
topics) to a rosbag2 (sqlite3 or mcap) with message definitions, type hashes and offered
QoS, stamped with the runtime time; the bag appears at its path only when the runtime shuts
down cleanly.
"""

import copy
import heapq
import itertools
import logging
import re
import time
import types
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from diffsim_ros.io.bags import BagError, BagWriter, bag_info, iter_bag
from diffsim_ros.io.ros_messages import NS_PER_S, clock_msg, seconds_to_ns, time_to_ns
from diffsim_ros.io.ros_types import CLOCK, TypestoreMessages, make_typestore, normalize_type_name
from diffsim_ros.runtime.interface import Logger, NodeHandle, Publisher, Service, Subscription, Timer
from diffsim_ros.runtime.params import ParameterError, load_parameter_files
from diffsim_ros.runtime.qos import (
    CLOCK_QOS,
    KEEP_LAST,
    TRANSIENT_LOCAL,
    QosProfile,
    as_qos_profile,
    incompatibility,
    to_bag_qos,
)

__all__ = [
    "BagPlayer",
    "DEFAULT_START_NS",
    "EmbeddedError",
    "EmbeddedNodeHandle",
    "EmbeddedRuntime",
    "LogRecord",
    "SIM",
    "WALL",
]

SIM = "sim"
WALL = "wall"
# Simulated time starts at a fixed, realistic epoch (2023-11-14) so that stamps are never 0.
DEFAULT_START_NS = 1_700_000_000 * NS_PER_S

_TOPIC_NAME = re.compile(r"^(~/|/)?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}


class EmbeddedError(RuntimeError):
    """Misuse of the embedded runtime (bad topic name, type clash, publishing after shutdown)."""


@dataclass(frozen=True)
class LogRecord:
    """One log line: node time [ns], node name, level, message."""

    time_ns: int
    node: str
    level: str
    message: str


# --- entities -------------------------------------------------------------------------------


class _Topic:
    def __init__(self, name, msg_type):
        self.name, self.msg_type = name, msg_type
        self.publishers, self.subscriptions = [], []
        self.published = 0


class _Publisher(Publisher):
    def __init__(self, node, topic, msg_type, qos):
        self.node, self.topic, self.msg_type, self.qos = node, topic, msg_type, qos
        self.history = deque(maxlen=qos.depth) if qos.durability == TRANSIENT_LOCAL else None
        self.published = 0

    def publish(self, msg):
        self.node.runtime._publish(self, msg)

    def get_subscription_count(self):
        return sum(1 for sub in self.node.runtime._topics[self.topic].subscriptions if sub.accepts(self))


class _Subscription(Subscription):
    """Per-subscription queue. Counters: received (enqueued), taken (callbacks run), dropped."""

    def __init__(self, node, topic, msg_type, callback, qos):
        self.node, self.topic, self.msg_type, self.callback, self.qos = node, topic, msg_type, callback, qos
        self.queue = deque(maxlen=qos.depth if qos.history == KEEP_LAST else None)
        self.scheduled = False
        self.received = self.taken = self.dropped = 0

    def accepts(self, publisher):
        return incompatibility(publisher.qos, self.qos) is None


class _Service(Service):
    def __init__(self, node, name, srv_type, callback):
        self.node, self.name, self.srv_type, self.callback = node, name, srv_type, callback
        self.calls = 0


class _Timer(Timer):
    def __init__(self, node, period_ns, callback, next_due):
        self.node, self.period_ns, self.callback, self.next_due = node, period_ns, callback, next_due
        self._canceled = False
        self.calls = 0

    def cancel(self):
        self._canceled = True

    @property
    def is_canceled(self):
        return self._canceled

    def advance_past(self, now_ns):
        """Next due time after ``now_ns``, skipping missed periods (rcl semantics)."""
        missed = max(0, (now_ns - self.next_due) // self.period_ns + 1)
        self.next_due += missed * self.period_ns


class _EmbeddedLogger(Logger):
    """Logs to ``runtime.log_records`` and the Python logger ``diffsim_ros.runtime.<node>``."""

    def __init__(self, node):
        super().__init__()
        self.node = node
        self.python_logger = logging.getLogger(f"diffsim_ros.runtime.{node.name}")

    def _now_ns(self):
        return self.node.now_ns()

    def _emit(self, level, message):
        self.node.runtime.log_records.append(LogRecord(self._now_ns(), self.node.name, level, message))
        self.python_logger.log(_LEVELS[level], "[%s] %s", self.node.name, message)


# --- node handle ----------------------------------------------------------------------------


class EmbeddedNodeHandle(NodeHandle):
    """A node of an :class:`EmbeddedRuntime` (create with :meth:`EmbeddedRuntime.create_node`).

    Attributes:
        parameters: Declared parameters -> value.
        use_sim_time: Whether node time comes from ``/clock``.
    """

    def __init__(self, runtime, name, namespace, overrides, explicit):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise EmbeddedError(f"invalid node name {name!r}")
        self.runtime, self.name = runtime, name
        self.namespace = "/" + namespace.strip("/") if namespace.strip("/") else "/"
        self._overrides, self._explicit = dict(overrides), set(explicit)
        self.parameters = {}
        self._shutdown_callbacks = []
        self._parameter_callbacks = []
        self._logger = _EmbeddedLogger(self)
        self.use_sim_time = self._declare_use_sim_time()
        self._sim_now = 0
        self._sim_timers = []
        if self.use_sim_time:
            self.create_subscription(CLOCK, "/clock", self._on_clock, CLOCK_QOS)

    @property
    def fqn(self):
        """Fully qualified node name."""
        return f"{self.namespace.rstrip('/')}/{self.name}"

    @property
    def messages(self):
        return self.runtime.messages

    def _declare_use_sim_time(self):
        value = self.declare_parameter("use_sim_time", False, "take node time from the /clock topic")
        if not isinstance(value, bool):
            raise ParameterError(f"node '{self.name}': parameter 'use_sim_time' must be a bool, got {value!r}")
        return value

    def resolve(self, topic):
        """Absolute topic name (relative names are in the node namespace, ``~/`` in the node's)."""
        if not isinstance(topic, str) or not _TOPIC_NAME.match(topic):
            raise EmbeddedError(f"node '{self.name}': invalid topic name {topic!r}")
        if topic.startswith("~/"):
            return f"{self.fqn}/{topic[2:]}"
        if topic.startswith("/"):
            return topic
        return f"{self.namespace.rstrip('/')}/{topic}"

    def create_publisher(self, msg_type, topic, qos=10):
        return self.runtime._add_publisher(self, normalize_type_name(msg_type), self.resolve(topic), as_qos_profile(qos))

    def create_subscription(self, msg_type, topic, callback, qos=10):
        msg_type, topic = normalize_type_name(msg_type), self.resolve(topic)
        return self.runtime._add_subscription(self, msg_type, topic, callback, as_qos_profile(qos))

    def create_timer(self, period_s, callback):
        period_ns = seconds_to_ns(period_s)
        if period_ns <= 0:
            raise EmbeddedError(f"node '{self.name}': timer period must be positive, got {period_s!r} s")
        timer = _Timer(self, period_ns, callback, self.now_ns() + period_ns)
        if self.use_sim_time:
            self._sim_timers.append(timer)
        else:
            self.runtime._schedule_timer(timer)
        return timer

    def now_ns(self):
        return self._sim_now if self.use_sim_time else self.runtime.now_ns()

    def get_logger(self):
        return self._logger

    def declare_parameter(self, name, default, description=""):
        if name in self.parameters:
            raise ParameterError(f"node '{self.name}': parameter '{name}' declared twice")
        value = self._overrides.get(name, default)
        self.parameters[name] = value
        return value

    def undeclared_overrides(self):
        """Explicit overrides that the node never declared (likely typos)."""
        return sorted(self._explicit - set(self.parameters))

    def add_on_shutdown(self, callback):
        self._shutdown_callbacks.append(callback)

    def create_service(self, srv_type, name, callback):
        name = self.resolve(name)
        if name in self.runtime._services:
            raise EmbeddedError(f"node '{self.name}': service {name} already exists")
        service = _Service(self, name, str(srv_type), callback)
        self.runtime._services[name] = service
        return service

    def add_on_set_parameters_callback(self, callback):
        self._parameter_callbacks.append(callback)

    def set_parameters(self, changes):
        """Change declared parameters at run time (as ``ros2 param set``), atomically.

        Returns:
            None when applied, else the reason the first rejecting callback gave (nothing changed).
        """
        undeclared = sorted(set(changes) - set(self.parameters))
        if undeclared:
            return f"parameter(s) {undeclared} are not declared"
        for callback in self._parameter_callbacks:
            reason = callback(dict(changes))
            if reason is not None:
                return reason
        self.parameters.update(changes)
        return None

    def run_in_background(self, work, done, niceness=0):
        # Deterministic: the work runs now and its completion is the next event (no priority change).
        try:
            result, error = work(), None
        except Exception as err:  # handed to done(), as the threaded backend does
            result, error = None, err
        self.runtime._schedule(self.runtime.now_ns(), lambda: done(result, error))

    def _on_clock(self, msg):
        previous, self._sim_now = self._sim_now, time_to_ns(msg.clock)
        for timer in self._sim_timers:
            if previous == 0 or self._sim_now < previous:
                timer.next_due = self._sim_now + timer.period_ns  # ROS time (re)activated or jumped back
        due = sorted((t for t in self._sim_timers if not t.is_canceled and t.next_due <= self._sim_now),
                     key=lambda t: t.next_due)
        for timer in due:
            timer.advance_past(self._sim_now)
            self.runtime._schedule(self.runtime.now_ns(), lambda timer=timer: self.runtime._fire(timer))


# --- runtime --------------------------------------------------------------------------------


class EmbeddedRuntime:
    """In-process ROS 2 graph of several nodes.

    Args:
        clock: "sim" (simulated time, deterministic) or "wall" (system time).
        start_ns: Simulated start time [ns] (sim clock only).
        parameter_files: ROS 2 params YAML files applied to every node created (by node name).
        clock_period_s: When set, publish the runtime time on ``/clock`` at this period.
        typestore: rosbags typestore (default: a new Humble store with baxter_core_msgs).

    Use as a context manager; leaving the ``with`` block shuts the nodes down and finishes
    the recording (or discards it when an exception is propagating).
    """

    def __init__(self, *, clock=SIM, start_ns=DEFAULT_START_NS, parameter_files=(), clock_period_s=None, typestore=None):
        if clock not in (SIM, WALL):
            raise EmbeddedError(f"clock must be {SIM!r} or {WALL!r}, got {clock!r}")
        self.clock = clock
        self.messages = TypestoreMessages(typestore if typestore is not None else make_typestore())
        self.parameter_files = [Path(p) for p in parameter_files]
        self.log_records = []
        self.nodes = []
        self._now = int(start_ns) if clock == SIM else time.time_ns()
        self._events, self._seq = [], itertools.count()
        self._topics, self._faults, self._services = {}, {}, {}
        self._recorder = None
        self._shutdown_requested = self._shut_down = False
        self._checked_overrides = set()
        if clock_period_s is not None:
            self._start_clock_publisher(clock_period_s)

    # -- graph ------------------------------------------------------------------------------

    def create_node(self, name, namespace="/", parameter_overrides=None):
        """A new node handle; parameters from the runtime's files, then ``parameter_overrides``."""
        self._check_running()
        if any(node.name == name and node.namespace.strip("/") == namespace.strip("/") for node in self.nodes):
            raise EmbeddedError(f"a node named {name!r} already exists in namespace {namespace!r}")
        overrides = load_parameter_files(self.parameter_files, name, namespace) if self.parameter_files else {}
        explicit = dict(parameter_overrides or {})
        overrides.update(explicit)
        node = EmbeddedNodeHandle(self, name, namespace, overrides, explicit)
        self.nodes.append(node)
        return node

    def add_node(self, node_class, name, namespace="/", parameter_overrides=None, **kwargs):
        """Create a handle and construct ``node_class(handle, **kwargs)``; returns the node object.

        A managed node (``node_class.managed``) is constructed (configured) and, with its
        ``autostart`` parameter (default true), activated; else call its ``on_activate()``.
        """
        handle = self.create_node(name, namespace, parameter_overrides)
        autostart = getattr(node_class, "managed", False) and \
            handle.declare_parameter("autostart", True, "configure and activate at start-up (lifecycle node)")
        node = node_class(handle, **kwargs)
        if autostart:
            node.on_activate()
        return node

    def call_service(self, name, **request):
        """Call the service ``name`` with a request of the given fields; returns the response fields (dict)."""
        self._check_running()
        service = self._services.get(name)
        if service is None:
            raise EmbeddedError(f"no service {name}; services: {sorted(self._services)}")
        service.calls += 1
        return dict(service.callback(types.SimpleNamespace(**request)) or {})

    def topics(self):
        """Topic name -> message type of every topic with a publisher or subscription."""
        return {name: topic.msg_type for name, topic in sorted(self._topics.items())}

    def inject_fault(self, topic, fault):
        """Pass every message published on ``topic`` through ``fault`` before delivery.

        Args:
            topic: Absolute topic name.
            fault: ``fault(msg, now_ns) -> iterable of (delay_s, msg)``: return ``[]`` to drop,
                several entries to duplicate, delays to reorder, modified messages to corrupt.
                Recording still sees the message as published.
        """
        self._faults[topic] = fault

    def _topic(self, name, msg_type, node):
        topic = self._topics.setdefault(name, _Topic(name, msg_type))
        if topic.msg_type != msg_type:
            raise EmbeddedError(f"node '{node.name}': topic {name} has type {topic.msg_type}, not {msg_type}")
        if not self.messages.has_type(msg_type):
            raise EmbeddedError(f"node '{node.name}': message type {msg_type} of topic {name} is not in the typestore")
        return topic

    def _add_publisher(self, node, msg_type, name, qos):
        self._check_running()
        publisher = _Publisher(node, name, msg_type, qos)
        topic = self._topic(name, msg_type, node)
        topic.publishers.append(publisher)
        for subscription in topic.subscriptions:
            self._check_match(publisher, subscription)
        if self._recorder is not None:
            self._recorder.declare(publisher)
        return publisher

    def _add_subscription(self, node, msg_type, name, callback, qos):
        self._check_running()
        subscription = _Subscription(node, name, msg_type, callback, qos)
        topic = self._topic(name, msg_type, node)
        topic.subscriptions.append(subscription)
        for publisher in topic.publishers:
            matched = self._check_match(publisher, subscription)
            if matched and publisher.history and subscription.qos.durability == TRANSIENT_LOCAL:
                for data in publisher.history:
                    self._enqueue(subscription, data)
        return subscription

    def _check_match(self, publisher, subscription):
        reason = incompatibility(publisher.qos, subscription.qos)
        if reason:
            subscription.node.get_logger().warning(
                f"incompatible QoS on {subscription.topic} with the publisher of node "
                f"'{publisher.node.name}': {reason}; no messages will be received from it"
            )
        return reason is None

    # -- messages ---------------------------------------------------------------------------

    def _publish(self, publisher, msg):
        if self._shut_down:
            raise EmbeddedError(f"node '{publisher.node.name}': publish on {publisher.topic} after shutdown")
        msg_type = getattr(msg, "__msgtype__", None)
        if msg_type != publisher.msg_type:
            raise TypeError(
                f"node '{publisher.node.name}': publisher on {publisher.topic} takes {publisher.msg_type}, "
                f"got {msg_type or type(msg).__name__}"
            )
        data = self._serialize(publisher, msg)
        now = self.now_ns()
        publisher.published += 1
        topic = self._topics[publisher.topic]
        topic.published += 1
        if publisher.history is not None:
            publisher.history.append(data)
        if self._recorder is not None:
            self._recorder.write(publisher, data, now)
        deliveries = self._apply_fault(publisher, msg, data, now)
        for subscription in topic.subscriptions:
            if subscription.accepts(publisher):
                for delay_ns, payload in deliveries:
                    if delay_ns <= 0:
                        self._enqueue(subscription, payload)
                    else:
                        self._schedule(now + delay_ns, lambda s=subscription, p=payload: self._enqueue(s, p))

    def _serialize(self, publisher, msg):
        try:
            return self.messages.serialize(msg, publisher.msg_type)
        except ValueError as err:
            raise TypeError(f"node '{publisher.node.name}': invalid message on {publisher.topic}: {err}") from None

    def _apply_fault(self, publisher, msg, data, now):
        fault = self._faults.get(publisher.topic)
        if fault is None:
            return [(0, data)]
        outputs = fault(copy.deepcopy(msg), now)  # a private, writable copy: the publisher may reuse msg
        return [(seconds_to_ns(delay), self._serialize(publisher, out)) for delay, out in outputs]

    def _enqueue(self, subscription, data):
        if subscription.queue.maxlen is not None and len(subscription.queue) == subscription.queue.maxlen:
            subscription.dropped += 1
        subscription.queue.append(data)
        subscription.received += 1
        if not subscription.scheduled:
            subscription.scheduled = True
            self._schedule(self.now_ns(), lambda: self._take(subscription))

    def _take(self, subscription):
        data = subscription.queue.popleft()
        if subscription.queue:
            self._schedule(self.now_ns(), lambda: self._take(subscription))
        else:
            subscription.scheduled = False
        subscription.taken += 1
        subscription.callback(self.messages.deserialize(data, subscription.msg_type))

    # -- time and events --------------------------------------------------------------------

    def now_ns(self):
        """Runtime time [ns]: simulated, or system time with ``clock="wall"``."""
        return self._now if self.clock == SIM else time.time_ns()

    def now(self):
        """Runtime time [s]."""
        return self.now_ns() / NS_PER_S

    def _schedule(self, time_ns, callback):
        heapq.heappush(self._events, (int(time_ns), next(self._seq), callback))

    def _schedule_timer(self, timer):
        self._schedule(timer.next_due, lambda: self._fire(timer))

    def _fire(self, timer):
        if timer.is_canceled:
            return
        if not timer.node.use_sim_time:
            timer.advance_past(self.now_ns())
            self._schedule_timer(timer)
        timer.calls += 1
        timer.callback()

    def _run_next(self):
        due, _, callback = heapq.heappop(self._events)
        if self.clock == SIM:
            self._now = max(self._now, due)
        else:
            _sleep_until(due)
        callback()

    def spin_once(self):
        """Run the next event (advancing time to it). Returns False when there is none."""
        self._check_running()
        self._warn_undeclared_overrides()
        if not self._events:
            return False
        self._run_next()
        return True

    def spin_until(self, time_ns):
        """Run every event due up to ``time_ns``, then set the time to ``time_ns``."""
        self._check_running()
        self._warn_undeclared_overrides()
        while self._events and self._events[0][0] <= time_ns and not self._shutdown_requested:
            self._run_next()
        if self.clock == SIM:
            self._now = max(self._now, int(time_ns))
        else:
            _sleep_until(time_ns)

    def spin_for(self, seconds):
        """Run for ``seconds`` of runtime time."""
        self.spin_until(self.now_ns() + seconds_to_ns(seconds))

    def spin_until_condition(self, predicate, timeout_s):
        """Run events until ``predicate()`` holds or ``timeout_s`` of runtime time passed.

        Returns:
            Whether the predicate held.
        """
        deadline = self.now_ns() + seconds_to_ns(timeout_s)
        self._warn_undeclared_overrides()
        while not predicate():
            if not self._events or self._events[0][0] > deadline or self._shutdown_requested:
                self.spin_until(deadline)
                return bool(predicate())
            self._run_next()
        return True

    def spin(self):
        """Run until :meth:`request_shutdown` is called or no event is left."""
        while not self._shutdown_requested and self.spin_once():
            pass

    def request_shutdown(self):
        """Make :meth:`spin` (and the other spin methods) return after the current event."""
        self._shutdown_requested = True

    def _check_running(self):
        if self._shut_down:
            raise EmbeddedError("the runtime is shut down")

    def _warn_undeclared_overrides(self):
        for node in self.nodes:
            if node in self._checked_overrides:
                continue
            self._checked_overrides.add(node)
            for name in node.undeclared_overrides():
                node.get_logger().warning(f"parameter override '{name}' is not declared by this node (ignored)")

    def _start_clock_publisher(self, period_s):
        node = self.create_node("embedded_clock")
        publisher = node.create_publisher(CLOCK, "/clock", CLOCK_QOS)
        node.create_timer(period_s, lambda: publisher.publish(clock_msg(self.messages, self.now_ns())))

    # -- recording, replay, shutdown ---------------------------------------------------------

    def record(self, path, storage="sqlite3", topics=None, overwrite=False):
        """Record published messages to a rosbag2 at ``path`` (written at shutdown).

        Args:
            path: Bag directory to create.
            storage: "sqlite3" or "mcap".
            topics: Topic names to record (default: every topic).
            overwrite: Replace an existing bag.

        Returns:
            The bag path.
        """
        self._check_running()
        if self._recorder is not None:
            raise EmbeddedError(f"already recording to {self._recorder.writer.path}")
        self._recorder = _Recorder(BagWriter(path, storage, typestore=self.messages.typestore, overwrite=overwrite),
                                   topics)
        for topic in self._topics.values():
            for publisher in topic.publishers:
                self._recorder.declare(publisher)
        return Path(path)

    def play_bag(self, path, *, topics=None, rate=1.0, publish_clock=True, remap=None, node_name="rosbag2_player",
                 start_ns=None, stop_ns=None):
        """Replay a bag into the graph, starting now (``ros2 bag play [--clock]``).

        Args:
            path: The bag.
            topics: Topics to play (default: all).
            rate: Playback speed factor.
            publish_clock: Publish the bag's receive times on ``/clock`` before each message
                (for nodes with ``use_sim_time``).
            remap: Mapping bag topic -> topic to publish on.
            node_name: Name of the player node.
            start_ns: Play the messages received from this time on [ns] (default: all;
                ``ros2 bag play --start-offset``).
            stop_ns: ... and before this time [ns] (``--playback-until-timestamp``).

        Returns:
            BagPlayer.
        """
        self._check_running()
        return BagPlayer(self, path, topics=topics, rate=rate, publish_clock=publish_clock, remap=remap,
                         node_name=node_name, start_ns=start_ns, stop_ns=stop_ns)

    def shutdown(self, keep_recording=True):
        """Run the nodes' shutdown callbacks, then finish (or discard) the recording.

        Messages published by shutdown callbacks are recorded but not delivered. A callback's
        KeyboardInterrupt (Ctrl-C, or a save that an atomic writer refused after one) is raised
        after every other callback ran, and the recording is discarded.
        """
        if self._shut_down:
            return
        errors, interrupt = [], None
        for node in self.nodes:
            for callback in node._shutdown_callbacks:
                try:
                    callback()
                except KeyboardInterrupt as err:  # Ctrl-C, or a save refused after one: the others still run
                    interrupt = err
                except Exception as err:  # every node must get its shutdown call
                    node.get_logger().error(f"shutdown callback failed: {type(err).__name__}: {err}")
                    errors.append(err)
        self._shut_down = self._shutdown_requested = True
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.finish(keep_recording and not errors and interrupt is None)
        if interrupt is not None:
            raise interrupt
        if errors:
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.shutdown()
        else:
            try:
                self.shutdown(keep_recording=False)
            except Exception:  # the propagating exception is the one to report
                pass
        return False


def _sleep_until(time_ns):
    delay = (time_ns - time.time_ns()) / NS_PER_S
    if delay > 0:
        time.sleep(delay)


class _Recorder:
    def __init__(self, writer, topics):
        self.writer = writer.open()
        self.topics = set(topics) if topics is not None else None

    def declare(self, publisher):
        if self.topics is None or publisher.topic in self.topics:
            self.writer.add_topic(publisher.topic, publisher.msg_type, to_bag_qos(publisher.qos))

    def write(self, publisher, data, now_ns):
        if self.topics is None or publisher.topic in self.topics:
            self.writer.write(publisher.topic, data, now_ns)

    def finish(self, keep):
        if keep:
            self.writer.close()
        else:
            self.writer.abort()


def _profile_from_bag(qos_list):
    """QosProfile of a bag topic's first offered profile (default reliable/volatile/10)."""
    if not qos_list:
        return QosProfile()
    qos = qos_list[0]
    return QosProfile(
        depth=max(1, int(qos.depth)),
        reliability="best_effort" if qos.reliability.name == "BEST_EFFORT" else "reliable",
        durability="transient_local" if qos.durability.name == "TRANSIENT_LOCAL" else "volatile",
    )


class BagPlayer:
    """Publishes a bag's messages into an :class:`EmbeddedRuntime` at their recorded pace.

    Created by :meth:`EmbeddedRuntime.play_bag`. Message ``i`` is published at runtime time
    ``start + (t_i - t_0) / rate`` (t = bag receive times), preceded by a ``/clock`` message
    with ``t_i`` when ``publish_clock``.

    Attributes:
        published: Messages published so far.
        done: Whether the whole bag was played.
    """

    def __init__(self, runtime, path, *, topics=None, rate=1.0, publish_clock=True, remap=None,
                 node_name="rosbag2_player", start_ns=None, stop_ns=None):
        if rate <= 0:
            raise BagError(f"playback rate must be positive, got {rate}")
        self.runtime, self.rate, self.published, self.done = runtime, float(rate), 0, False
        info = bag_info(path)
        topics = sorted(info.topics) if topics is None else list(topics)
        missing = sorted(set(topics) - set(info.topics))
        if missing:
            raise BagError(f"{path}: topic(s) {missing} not in the bag; it has {info.describe_topics()}")
        remap = dict(remap or {})
        self.node = runtime.create_node(node_name)
        self._publishers = {
            topic: self.node.create_publisher(
                info.topics[topic][0], remap.get(topic, topic), _profile_from_bag(info.offered_qos.get(topic))
            )
            for topic in topics
        }
        self._clock = self.node.create_publisher(CLOCK, "/clock", CLOCK_QOS) if publish_clock else None
        self._records = iter_bag(path, topics=topics, typestore=runtime.messages.typestore, start_ns=start_ns,
                                 stop_ns=stop_ns)
        self.node.add_on_shutdown(self.close)
        self._start_rt, self._start_bag = runtime.now_ns(), None
        self._schedule_next()

    def close(self):
        """Stop playing and close the bag."""
        self._records.close()
        self.done = True

    def _schedule_next(self):
        record = None if self.done else next(self._records, None)
        if record is None:
            self.done = True
            return
        if self._start_bag is None:
            self._start_bag = record.timestamp_ns
        due = self._start_rt + int(round((record.timestamp_ns - self._start_bag) / self.rate))
        self.runtime._schedule(due, lambda: self._play(record))

    def _play(self, record):
        if self._clock is not None:
            self._clock.publish(clock_msg(self.runtime.messages, record.timestamp_ns))
        self._publishers[record.topic].publish(record.msg)
        self.published += 1
        self._schedule_next()
