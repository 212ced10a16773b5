"""The transport interface that node logic is written against.

A node is a plain class whose constructor takes a :class:`NodeHandle`; it declares its
parameters (``runtime.params.declare_config``), creates publishers, subscriptions and
timers, and builds messages with ``handle.new_message`` or the builders of
``diffsim_ros.io.ros_messages`` (passing ``handle.messages``). Two backends implement the
handle: ``runtime.rclpy_backend`` (a real ROS 2 node) and ``runtime.embedded`` (in-process,
deterministic, with rosbags message types). Message types are named by string
(``"sensor_msgs/msg/JointState"``); received messages have the ROS field names on both.

The method names and argument orders follow rclpy (``create_publisher(msg_type, topic,
qos)``, ``create_timer(period_s, callback)``, logger ``warning(..., throttle_duration_sec=)``).

A node module (one node class, ``main(args=None)``, parameters declared once)::

    @dataclass(frozen=True)
    class HoldConfig:
        rate_hz: float = param(100.0, "command rate [Hz]")
        timeout_s: float = param(0.1, "joint state timeout [s]")

    class HoldNode:
        def __init__(self, handle):
            self.handle = handle
            self.config = declare_config(handle, HoldConfig)
            self.joints = joint_state_input(JOINTS, self.config.timeout_s)
            handle.create_subscription(JOINT_STATE, "/joint_states", self.on_joint_state, SENSOR_QOS)
            self.commands = handle.create_publisher(FLOAT64_MULTI_ARRAY, "/effort_controller/commands", COMMAND_QOS)
            handle.create_timer(1.0 / self.config.rate_hz, self.tick)

        def on_joint_state(self, msg):
            self.joints.update(msg, self.handle.now_ns())

        def tick(self):
            if self.joints.is_fresh(self.handle.now_ns()):
                torque = ...  # library call on self.joints.latest.positions
                self.commands.publish(float64_multi_array_msg(self.handle.messages, torque))

    def main(args=None):
        run_node(HoldNode, "hold", args)  # runtime.rclpy_backend

and in-process: ``EmbeddedRuntime().add_node(HoldNode, "hold", parameter_overrides={...})``.
"""

import sys
from abc import ABC, abstractmethod

from diffsim_ros.io.ros_messages import NS_PER_S

__all__ = ["LOG_LEVELS", "Logger", "NodeHandle", "Publisher", "Service", "Subscription", "Timer"]


class Publisher(ABC):
    """Publishes messages of one type on one topic.

    Attributes:
        topic: Resolved topic name.
        msg_type: ``pkg/msg/Type``.
        qos: QosProfile.
    """

    topic: str
    msg_type: str

    @abstractmethod
    def publish(self, msg):
        """Send ``msg`` (a message of ``msg_type`` built by this backend's factory)."""

    @abstractmethod
    def get_subscription_count(self):
        """Number of matched subscriptions."""


class Subscription(ABC):
    """A callback receiving the messages of one topic. Attributes: topic, msg_type, qos."""

    topic: str
    msg_type: str


class Service(ABC):
    """A service server calling ``callback(request) -> dict of response fields``. Attributes: name, srv_type."""

    name: str
    srv_type: str


class Timer(ABC):
    """A periodic callback on the node's clock (sim time when ``use_sim_time`` is true)."""

    @abstractmethod
    def cancel(self):
        """Stop firing."""

    @property
    @abstractmethod
    def is_canceled(self):
        """Whether :meth:`cancel` was called."""


LOG_LEVELS = ("debug", "info", "warning", "error", "fatal")
# Modules whose frames are skipped when finding the call site of a throttled/once log call.
_LOGGING_MODULES = {"diffsim_ros.runtime.interface", "diffsim_ros.runtime.embedded", "diffsim_ros.runtime.rclpy_backend"}


def _call_site():
    """(file, line) of the first caller outside the runtime: the key of once/throttled logs."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _LOGGING_MODULES:
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


class Logger(ABC):
    """Node logger with rclpy's keyword arguments ``throttle_duration_sec`` and ``once``.

    Throttling is per call site (as in rclpy) and measured on node time, implemented here
    once for both backends.
    """

    def __init__(self):
        self._last_ns = {}

    @abstractmethod
    def _now_ns(self):
        """Node time [ns] for throttling."""

    @abstractmethod
    def _emit(self, level, message):
        """Write one log line."""

    def log(self, level, message, *, throttle_duration_sec=None, once=False):
        """Log ``message`` at ``level`` (one of LOG_LEVELS), optionally throttled or once per call site."""
        if level not in LOG_LEVELS:
            raise ValueError(f"unknown log level {level!r}; use one of {LOG_LEVELS}")
        if once or throttle_duration_sec is not None:
            site, now = _call_site(), self._now_ns()
            last = self._last_ns.get(site)
            if last is not None and (once or now - last < throttle_duration_sec * NS_PER_S):
                return
            self._last_ns[site] = now
        self._emit(level, str(message))

    def debug(self, message, **kwargs):
        """Log at debug level."""
        self.log("debug", message, **kwargs)

    def info(self, message, **kwargs):
        """Log at info level."""
        self.log("info", message, **kwargs)

    def warning(self, message, **kwargs):
        """Log at warning level."""
        self.log("warning", message, **kwargs)

    warn = warning

    def error(self, message, **kwargs):
        """Log at error level."""
        self.log("error", message, **kwargs)

    def fatal(self, message, **kwargs):
        """Log at fatal level."""
        self.log("fatal", message, **kwargs)


class NodeHandle(ABC):
    """What a node may do: topics, timers, clock, logging, parameters, message construction.

    Attributes:
        name: Node name.
        namespace: Node namespace ("/" for none).
        messages: Message factory of this backend (``new(type_name, **fields)``), for the
            builders of ``diffsim_ros.io.ros_messages``.
        owns_process: Whether the node has its process to itself (rclpy ``run_node``), so that
            process-wide settings (real-time priority) are its own to make.
    """

    name: str
    namespace: str
    owns_process = False

    @property
    @abstractmethod
    def messages(self):
        """The backend's message factory."""

    @abstractmethod
    def create_publisher(self, msg_type, topic, qos=10):
        """A Publisher of ``msg_type`` on ``topic`` with a QosProfile or a history depth."""

    @abstractmethod
    def create_subscription(self, msg_type, topic, callback, qos=10):
        """A Subscription calling ``callback(msg)`` for each message of ``msg_type`` on ``topic``."""

    @abstractmethod
    def create_timer(self, period_s, callback):
        """A Timer calling ``callback()`` every ``period_s`` seconds of node time."""

    @abstractmethod
    def now_ns(self):
        """Node time [ns]: ROS time (the /clock topic when ``use_sim_time``), else system time."""

    @abstractmethod
    def get_logger(self):
        """The node's Logger."""

    @abstractmethod
    def declare_parameter(self, name, default, description=""):
        """Declare a parameter; returns its override (params file, command line) or ``default``."""

    @abstractmethod
    def add_on_shutdown(self, callback):
        """Call ``callback()`` once when the node shuts down (before its publishers go away)."""

    @abstractmethod
    def create_service(self, srv_type, name, callback):
        """A Service of ``srv_type`` (``pkg/srv/Type``) calling ``callback(request)``.

        The callback returns the response's fields as a dict (e.g. ``{"success": True,
        "message": "saved"}``); fields not given keep their defaults.
        """

    @abstractmethod
    def add_on_set_parameters_callback(self, callback):
        """Validate run-time parameter changes: ``callback(changes) -> None | reason``.

        ``changes`` maps parameter names to their new values (several at once for an atomic
        set); returning a string rejects the whole change with that reason, and the
        parameters keep their values. Applied changes are the callback's to act on.
        """

    @abstractmethod
    def run_in_background(self, work, done, niceness=0):
        """Run ``work()`` off the node's callbacks, then ``done(result, error)`` on them.

        Long computations (an estimator update) must not delay message callbacks. The rclpy
        backend runs ``work`` on a worker thread and ``done`` on the executor; the embedded
        runtime runs both at once (deterministic). ``error`` is the exception ``work``
        raised, else None. The caller keeps data ``work`` uses away from its callbacks.
        ``niceness`` (0-19) lowers the worker thread's CPU priority (Linux), so that control
        loops and drivers on the same cores keep their rate while it computes.
        """

    def set_realtime_priority(self, priority):
        """Run this node's process at real-time priority ``priority`` (1-99, ``SCHED_FIFO``).

        For control loops that must keep their rate on busy cores (runtime/scheduling.py).
        Only where the node has its process to itself (:attr:`owns_process`). Returns None, or
        why it was not done (no permission); the node then runs at normal priority.
        """
        return "not supported by this runtime"

    def now(self):
        """Node time [s] (float; use :meth:`now_ns` for header stamps)."""
        return self.now_ns() / NS_PER_S

    def new_message(self, type_name, **fields):
        """A message of ``type_name`` built by this backend's factory."""
        return self.messages.new(type_name, **fields)
