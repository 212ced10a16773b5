"""rclpy backend: node logic runs as a real ROS 2 node (Humble to Kilted).

The only module of diffsim_ros that imports rclpy, and only inside functions, so it imports
without ROS (the pure helpers are tested anywhere). A node module's entry point::

    def main(args=None):
        return run_node(ControllerNode, "controller", args)

``run_node`` does what ``demo_nodes_py`` nodes do (``rclpy.init``, spin on the EventsExecutor, shutdown) around a
:class:`RclpyNodeHandle`, with an orderly shutdown: on SIGINT/SIGTERM it leaves the spin
loop, runs the node's shutdown callbacks while the context is valid (a ros2_control hold
command, a calibration save), waits for reliable publishers to be acknowledged, then
destroys the node and shuts rclpy down. rclpy's own signal handler would invalidate the
context first, so it is not installed; a second signal is ignored (no traceback).

A start-up error the user can fix (a missing message package, bad parameters, a missing
file) is one fatal log line and exit code 1.

Nodes whose class sets ``managed = True`` run as lifecycle (managed) nodes: ``configure``
constructs the node object, ``activate``/``deactivate`` call its ``on_activate()`` /
``on_deactivate()``, ``cleanup`` destroys it; with the runtime parameter ``autostart``
(default true) the node configures and activates itself at start-up.

Parameters come from ``--ros-args --params-file`` / ``-p``; ``use_sim_time`` and ``/clock``
are rclpy's own. Message types are resolved by name (``sensor_msgs/msg/JointState`` ->
``sensor_msgs.msg``); a missing package (e.g. ``baxter_core_msgs``) raises
:class:`MessagePackageMissingError` naming the package and how to install it.
"""

import array
import importlib
import os
import queue
import re
import signal
import threading

import numpy as np

from diffsim_ros.io.ros_types import MessageTypeError, normalize_type_name
from diffsim_ros.runtime.heap import freeze_heap
from diffsim_ros.runtime.interface import Logger, NodeHandle, Publisher, Service, Subscription, Timer
from diffsim_ros.runtime.scheduling import lower_thread_priority, use_realtime_priority
from diffsim_ros.runtime.qos import KEEP_LAST, RELIABLE, VOLATILE, as_qos_profile

__all__ = [
    "MessagePackageMissingError",
    "RclpyMessages",
    "RclpyNodeHandle",
    "RosNotAvailableError",
    "install_hint",
    "message_class",
    "qos_policy_names",
    "exit_process",
    "node_executor",
    "run_node",
    "service_class",
    "to_rclpy_qos",
]

# How to get message packages that are not part of a ROS 2 desktop install.
_INSTALL_HINTS = {
    "baxter_core_msgs": (
        "build it with `python -m diffsim_ros.runtime.interfaces baxter_core_msgs` (pip route) or the "
        "ROS 2 port in your colcon workspace (https://github.com/CentraleNantesRobotics/baxter_common_ros2: "
        "colcon build --packages-select baxter_core_msgs, source install/setup.bash); or use output ros2_control"
    ),
}
_FLUSH_TIMEOUT_S = 0.5  # [s] wait for reliable messages (the hold command) to be acknowledged at shutdown
# [s] wait for running background work at shutdown. Short: its result is dropped anyway (done()
# runs on the executor, which has stopped), and the nodes' shutdown callbacks read nothing it
# writes (the estimator saves the estimate accepted before the update). At 1.2 s, SIGINT during a
# GIL-holding fit took 1.7-1.8 s to exit at load 9 on 2 cores, against the 2 s bound.
_BACKGROUND_TIMEOUT_S = 0.2
_SPIN_PERIOD_S = 0.1
_BACKGROUND_POLL_S = 0.02  # [s] how often the executor looks whether background work is done  # [s] longest executor wait: how soon a signal is noticed
# array.array type codes of rclpy numeric sequence fields.
_TYPECODES = {
    "double": "d",
    "float": "f",
    "int8": "b",
    "uint8": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
}
_NUMPY_DTYPES = {"double": np.float64, "float": np.float32, "boolean": np.bool_, "octet": np.uint8, "char": np.uint8}
_SEQUENCE = re.compile(r"^sequence<([^,>]+)(?:,\s*\d+)?>$")
_ARRAY = re.compile(r"^(.+)\[(\d+)\]$")
_INTS = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "octet", "char", "byte"}



class RosNotAvailableError(ImportError):
    """rclpy cannot be imported (no sourced ROS 2 installation)."""


class MessagePackageMissingError(ImportError):
    """A message package is not installed; the message names it and how to install it."""

    def __init__(self, package, type_name):
        self.package = package
        super().__init__(
            f"message package '{package}' is not installed (needed for {type_name}); {install_hint(package)}",
            name=package,
        )


def install_hint(package):
    """How to install a ROS 2 message package."""
    return _INSTALL_HINTS.get(package) or f"install it with: sudo apt install ros-$ROS_DISTRO-{package.replace('_', '-')}"


def _rclpy():
    try:
        import rclpy
    except ImportError:
        raise RosNotAvailableError(
            "rclpy is not available: source a ROS 2 installation (source /opt/ros/<distro>/setup.bash) "
            "or run the nodes on the embedded runtime (diffsim_ros.runtime.embedded)"
        ) from None
    return rclpy


def message_class(type_name, importer=importlib.import_module):
    """The rclpy message class of ``pkg/msg/Type``.

    Raises:
        MessagePackageMissingError: The package's Python module is not importable.
        MessageTypeError: The package has no such message.
    """
    return _interface_class(normalize_type_name(type_name), "message", importer)


def service_class(type_name, importer=importlib.import_module):
    """The rclpy service class of ``pkg/srv/Type`` (errors as :func:`message_class`)."""
    parts = str(type_name).split("/")
    if len(parts) != 3 or parts[1] != "srv" or not all(parts):
        raise MessageTypeError(f"invalid service type name {type_name!r}; expected 'package/srv/Type'")
    return _interface_class(str(type_name), "service", importer)


def _interface_class(type_name, what, importer):
    package, kind, name = type_name.split("/")
    try:
        module = importer(f"{package}.{kind}")
    except ModuleNotFoundError as err:
        if err.name in (package, f"{package}.{kind}"):
            raise MessagePackageMissingError(package, type_name) from None
        raise
    cls = getattr(module, name, None)
    if cls is None:
        raise MessageTypeError(f"package '{package}' has no {what} '{name}' (looking for {type_name})")
    return cls


def qos_policy_names(qos):
    """rclpy policy enum member names of a QosProfile or depth: history, depth, reliability, durability."""
    qos = as_qos_profile(qos)
    return {
        "history": "KEEP_LAST" if qos.history == KEEP_LAST else "KEEP_ALL",
        "depth": qos.depth,
        "reliability": "RELIABLE" if qos.reliability == RELIABLE else "BEST_EFFORT",
        "durability": "VOLATILE" if qos.durability == VOLATILE else "TRANSIENT_LOCAL",
    }


def to_rclpy_qos(qos):
    """rclpy ``QoSProfile`` of a QosProfile or depth."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    names = qos_policy_names(qos)
    return QoSProfile(
        history=HistoryPolicy[names["history"]],
        depth=names["depth"],
        reliability=ReliabilityPolicy[names["reliability"]],
        durability=DurabilityPolicy[names["durability"]],
    )


def _as_list(value):
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value).tolist() if isinstance(value, np.ndarray) else list(value)


class RclpyMessages:
    """Message factory for rclpy classes with the same ``new(type_name, **fields)`` as the embedded one.

    Converts values to what rclpy's generated setters accept: ``array.array`` for numeric
    sequences (they reject numpy arrays), numpy arrays for fixed-size arrays, Python scalars,
    and nested messages from dicts.

    Args:
        resolver: ``resolver(type_name) -> class`` (default :func:`message_class`).
    """

    def __init__(self, resolver=message_class):
        self.resolver = resolver
        self._classes = {}  # type name as given -> (class, field name -> field type)
        self._converters = {}  # field type -> converter

    def _entry(self, type_name):
        entry = self._classes.get(type_name)
        if entry is None:  # the control loop builds a message per cycle: resolve each type once
            cls = self.resolver(normalize_type_name(type_name))
            entry = self._classes[type_name] = (cls, dict(cls.get_fields_and_field_types()))
        return entry

    def message_class(self, type_name):
        """The (cached) class of a type name."""
        return self._entry(type_name)[0]

    def new(self, type_name, **values):
        """A message of ``type_name`` with the given fields (ROS defaults for the others)."""
        cls, field_types = self._entry(type_name)
        try:
            return cls(**{name: self.convert(field_types[name], value, f"{type_name}.{name}")
                          for name, value in values.items()})
        except KeyError:
            unknown = sorted(set(values) - set(field_types))
            raise MessageTypeError(f"{type_name} has no field(s) {unknown}; its fields are {list(field_types)}") from None

    @staticmethod
    def float64_sequence(values):
        """A float64 sequence field value (``array.array('d')``) of an array-like, shape (k,)."""
        return _typed_array("d", values)

    def convert(self, field_type, value, where="field"):
        """``value`` in the form rclpy accepts for a field of IDL-ish type ``field_type``."""
        converter = self._converters.get(field_type)
        if converter is None:
            converter = self._converters[field_type] = self._converter(field_type)
        return converter(value, where)

    def _converter(self, field_type):
        """``f(value, where)`` for one field type (parsed once: a message is built every control cycle)."""
        sequence = _SEQUENCE.match(field_type)
        fixed = _ARRAY.match(field_type)
        if sequence or fixed:
            element = (sequence or fixed).group(1)
            if "/" in element:
                return lambda value, where: [self.convert(element, item, f"{where}[{i}]") for i, item in enumerate(value)]
            if fixed and element in (*_TYPECODES, *_NUMPY_DTYPES):
                dtype = _NUMPY_DTYPES.get(element, np.dtype(element) if element not in _TYPECODES else None)
                dtype = dtype or np.dtype(_TYPECODES[element])
                return lambda value, where: np.asarray(_as_list(value), dtype=dtype)
            if sequence and element in _TYPECODES:
                typecode = _TYPECODES[element]
                return lambda value, where: _typed_array(typecode, value)
            return lambda value, where: [self.convert(element, item, where) for item in _as_list(value)]
        if "/" in field_type:
            return lambda value, where: self.new(field_type, **value) if isinstance(value, dict) else value
        return lambda value, where: _scalar(field_type, value, where)


def _typed_array(typecode, value):
    """``array.array`` of a numeric sequence (one copy through numpy, not one conversion per element)."""
    if isinstance(value, array.array) and value.typecode == typecode:
        return value
    out = array.array(typecode)
    out.frombytes(np.ascontiguousarray(np.asarray(_as_list(value) if hasattr(value, "detach") else value,
                                                  dtype=np.dtype(typecode))).tobytes())
    return out


def _scalar(field_type, value, where):
    if hasattr(value, "item"):
        value = value.item()
    if field_type in ("double", "float"):
        return float(value)
    if field_type == "boolean":
        return bool(value)
    if field_type == "octet" and not isinstance(value, bytes):
        return bytes([int(value)])  # rclpy's byte fields take one byte, not an int
    if field_type in _INTS:
        return int(value)
    if field_type.startswith("string") or field_type.startswith("wstring"):
        if not isinstance(value, str):
            raise MessageTypeError(f"{where}: expected a str, got {type(value).__name__}")
        return value
    return value


class _RclpyPublisher(Publisher):
    def __init__(self, publisher, msg_type, qos):
        self.publisher, self.msg_type, self.qos = publisher, msg_type, qos
        self.topic = publisher.topic_name

    def publish(self, msg):
        self.publisher.publish(msg)

    def get_subscription_count(self):
        return self.publisher.get_subscription_count()

    def wait_for_all_acked(self, timeout_s):
        """Whether every reliable subscription acknowledged what was published, within ``timeout_s``."""
        from rclpy.duration import Duration

        return self.publisher.wait_for_all_acked(Duration(nanoseconds=int(timeout_s * 1e9)))


class _RclpySubscription(Subscription):
    def __init__(self, subscription, msg_type, qos):
        self.subscription, self.msg_type, self.qos = subscription, msg_type, qos
        self.topic = subscription.topic_name


class _RclpyService(Service):
    def __init__(self, service, srv_type):
        self.service, self.srv_type = service, srv_type
        self.name = service.srv_name


class _RclpyTimer(Timer):
    def __init__(self, timer):
        self.timer = timer

    def cancel(self):
        self.timer.cancel()

    @property
    def is_canceled(self):
        return self.timer.is_canceled()


class _RclpyLogger(Logger):
    """Forwards to the rclpy node logger (throttling done by the Logger base on node time).

    rclpy fixes the severity of each call site (file, line) at its first call and raises
    "Logger severity cannot be changed between calls" for another: one call site per level.
    """

    def __init__(self, rclpy_logger, clock_ns):
        super().__init__()
        self.rclpy_logger, self._clock_ns = rclpy_logger, clock_ns

    def _now_ns(self):
        return self._clock_ns()

    def _emit(self, level, message):
        logger = self.rclpy_logger
        if level == "debug":
            logger.debug(message)
        elif level == "info":
            logger.info(message)
        elif level == "warning":
            logger.warning(message)
        elif level == "error":
            logger.error(message)
        else:
            logger.fatal(message)


class _Worker:
    """A long-lived thread of a node running its background work, one job at a time.

    One thread for all the jobs, not a thread per job: glibc serves each thread's allocations
    from an arena of its own and keeps what a job freed there for later, so a new thread every
    estimator update (2 s) kept raising the process's resident memory, arena by arena
    (estimator_node: 531 -> 627 MiB over a 10-minute run; the same updates on one thread: flat).
    The thread is niced once, when it starts (``niceness``, relative to the node's priority then).
    """

    def __init__(self, name, niceness):
        self._jobs = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._serve, args=(niceness,), name=name, daemon=True)
        self._thread.start()

    def _serve(self, niceness):
        lower_thread_priority(niceness)  # also leaves a real-time node's SCHED_FIFO
        while True:
            job = self._jobs.get()
            try:
                job()
            finally:  # a BaseException ends the thread, as it ended a thread of its own before
                self._idle.set()

    @property
    def alive(self):
        return self._thread.is_alive()

    @property
    def busy(self):
        """Whether a job is queued or running."""
        return not self._idle.is_set()

    def submit(self, job):
        self._idle.clear()
        self._jobs.put(job)

    def wait(self, timeout):
        """Wait up to ``timeout`` [s] for the job to end; whether it did."""
        return self._idle.wait(timeout)


class RclpyNodeHandle(NodeHandle):
    """NodeHandle over an ``rclpy.node.Node`` (or LifecycleNode).

    Args:
        node: The rclpy node (owned by the caller).
        messages: Message factory (default RclpyMessages()).
    """

    def __init__(self, node, messages=None):
        self.node = node
        self.name = node.get_name()
        self.namespace = node.get_namespace()
        self._messages = messages or RclpyMessages()
        self._logger = _RclpyLogger(node.get_logger(), self.now_ns)
        self._shutdown_callbacks = []
        self._entities = []  # (destroy function, rclpy entity): destroyed on lifecycle cleanup
        self._publishers = []
        self._parameter_callbacks = []
        self._background = None  # the _Worker of the running background work
        self._workers = {}  # niceness -> _Worker
        self.realtime_priority = 0  # SCHED_FIFO priority the node asked for and got (0: none)

    @property
    def messages(self):
        return self._messages

    def _track(self, destroy, entity):
        self._entities.append((destroy, entity))
        return entity

    def create_publisher(self, msg_type, topic, qos=10):
        qos = as_qos_profile(qos)
        cls = self._messages.message_class(msg_type)
        rclpy_publisher = self._track(self.node.destroy_publisher,
                                      self.node.create_publisher(cls, topic, to_rclpy_qos(qos)))
        publisher = _RclpyPublisher(rclpy_publisher, normalize_type_name(msg_type), qos)
        self._publishers.append(publisher)
        return publisher

    def create_subscription(self, msg_type, topic, callback, qos=10):
        qos = as_qos_profile(qos)
        cls = self._messages.message_class(msg_type)
        subscription = self._track(self.node.destroy_subscription,
                                   self.node.create_subscription(cls, topic, callback, to_rclpy_qos(qos)))
        return _RclpySubscription(subscription, normalize_type_name(msg_type), qos)

    def create_timer(self, period_s, callback):
        return _RclpyTimer(self._track(self.node.destroy_timer, self.node.create_timer(float(period_s), callback)))

    def create_service(self, srv_type, name, callback):
        cls = service_class(srv_type)

        def serve(request, response):
            for field, value in (callback(request) or {}).items():
                setattr(response, field, value)
            return response

        return _RclpyService(self._track(self.node.destroy_service, self.node.create_service(cls, name, serve)),
                             srv_type)

    def now_ns(self):
        return self.node.get_clock().now().nanoseconds

    def get_logger(self):
        return self._logger

    def declare_parameter(self, name, default, description=""):
        from rcl_interfaces.msg import ParameterDescriptor

        if self.node.has_parameter(name):  # a lifecycle node configured again after cleanup
            return self.node.get_parameter(name).value
        # dynamic_typing: an integer in a params file for a float parameter (8000 for 8000.0)
        # and empty-list defaults would otherwise be rejected; declare_config checks types.
        descriptor = ParameterDescriptor(description=description, dynamic_typing=True)
        return self.node.declare_parameter(name, default, descriptor).value

    def add_on_shutdown(self, callback):
        self._shutdown_callbacks.append(callback)

    def add_on_set_parameters_callback(self, callback):
        from rcl_interfaces.msg import SetParametersResult

        def check(parameters):
            reason = callback({p.name: p.value for p in parameters})
            return SetParametersResult(successful=reason is None, reason=reason or "")

        self._parameter_callbacks.append(check)
        self.node.add_on_set_parameters_callback(check)

    def set_realtime_priority(self, priority):
        why_not = use_realtime_priority(priority)
        self.realtime_priority = 0 if why_not else int(priority)
        return why_not

    def run_in_background(self, work, done, niceness=0):
        from rclpy.clock import Clock, ClockType

        if self._background is not None:
            raise RuntimeError("background work is already running on this node")
        outcome = {}

        def run():
            try:
                outcome["result"] = work()
            except Exception as err:  # handed to done() on the executor
                outcome["error"] = err

        def poll():
            # A steady-clock timer, not a guard condition: the EventsExecutor has none, and a
            # sim-time timer would stall with /clock.
            if worker.busy:
                return
            self.node.destroy_timer(timer)
            self._background = None
            done(outcome.get("result"), outcome.get("error"))

        worker = self._workers.get(niceness)
        if worker is None or not worker.alive:
            worker = self._workers[niceness] = _Worker(f"{self.name}-background", niceness)
        self._background = worker
        timer = self.node.create_timer(_BACKGROUND_POLL_S, poll, clock=Clock(clock_type=ClockType.STEADY_TIME))
        worker.submit(run)

    def run_shutdown_callbacks(self):
        """Call the shutdown callbacks once each (errors are logged, not raised), then wait
        (bounded) until reliable subscribers acknowledged what the node published."""
        if self._background is not None:  # the callbacks (a calibration save) read what the work writes
            if not self._background.wait(timeout=_BACKGROUND_TIMEOUT_S):
                self._logger.warning("background work still running at shutdown; shutting down without it")
        callbacks, self._shutdown_callbacks = self._shutdown_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception as err:  # every callback must run; the node is going down anyway
                self._logger.error(f"shutdown callback failed: {type(err).__name__}: {err}")
        for publisher in self._publishers:
            if publisher.qos.reliability == RELIABLE and publisher.get_subscription_count():
                publisher.wait_for_all_acked(_FLUSH_TIMEOUT_S)

    def destroy_entities(self):
        """Destroy every publisher, subscription, timer and service the node object created (lifecycle cleanup)."""
        for check in self._parameter_callbacks:
            self.node.remove_on_set_parameters_callback(check)
        for destroy, entity in reversed(self._entities):
            destroy(entity)
        self._entities, self._publishers, self._parameter_callbacks = [], [], []


# Errors a user fixes by configuration: one fatal line, exit code 1 (anything else is a bug
# and keeps its traceback).
_STARTUP_ERRORS = (ValueError, ImportError, OSError)


class _Stop:
    """SIGINT/SIGTERM: the first asks the spin loop to stop, later ones are ignored (no traceback)."""

    def __init__(self):
        self.requested = False

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:
            return  # a second Ctrl-C while shutting down: keep going, quietly
        self.requested = True

    def __exit__(self, *exc):
        return False  # the handler stays: a signal while the process exits must not raise either


class _Managed:
    """Lifecycle transitions of a managed node object (see the module docstring)."""

    def __init__(self, node, handle, node_class, kwargs):
        self.node, self.handle, self.node_class, self.kwargs = node, handle, node_class, kwargs
        self.obj = None
        from rclpy.lifecycle import TransitionCallbackReturn

        self.ok, self.failure = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE
        node.transitions = self

    def transition(self, name, state):
        """Run transition ``name``; an exception is logged and fails the transition (rclpy would hide it)."""
        try:
            return getattr(self, f"_on_{name}")(state)
        except Exception as err:  # rclpy turns it into a silent ERROR transition
            self.handle.get_logger().error(f"{name} failed: {type(err).__name__}: {err}")
            return self.failure

    def _on_configure(self, state):
        try:
            self.obj = self.node_class(self.handle, **self.kwargs)
        except _STARTUP_ERRORS as err:
            self.handle.get_logger().fatal(str(err))
            self.handle.destroy_entities()
            return self.failure
        return self.ok

    def _on_activate(self, state):
        self.obj.on_activate()
        return self.ok

    def _on_deactivate(self, state):
        self.obj.on_deactivate()
        return self.ok

    def _on_cleanup(self, state):
        self.handle.run_shutdown_callbacks()
        self.handle.destroy_entities()
        self.obj = None
        return self.ok

    def _on_shutdown(self, state):
        if self.obj is not None:
            self.obj.on_deactivate()
        return self.ok


def run_node(node_class, node_name, args=None, *, namespace=None, **kwargs):
    """Run ``node_class(handle, **kwargs)`` as an rclpy node until SIGINT/SIGTERM or ROS shutdown.

    Args:
        node_class: Node logic class taking a NodeHandle (``managed = True``: a lifecycle node).
        node_name: Default node name (remappable with ``--ros-args -r __node:=...``).
        args: Command line arguments (``main(args=None)`` passes them through).
        namespace: Default namespace.

    Returns:
        Exit code: 0 after a requested shutdown, 1 after a start-up error (logged on one line).

    Raises:
        RosNotAvailableError: rclpy is not importable.
    """
    rclpy = _rclpy()
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    managed = getattr(node_class, "managed", False)
    node = _create_node(rclpy, node_name, namespace, managed)
    handle = RclpyNodeHandle(node)
    handle.owns_process = True  # one node per process: process-wide settings are this node's
    executor = node_executor()
    code = 0
    with _Stop() as stop:
        try:
            if managed and not _start_managed(node, handle, node_class, kwargs):
                stop.requested, code = True, 1
            elif not managed:
                node_class(handle, **kwargs)
            freeze_heap()  # no full collection may stall the callbacks (runtime/heap.py)
            executor.add_node(node)
            executor.spin_once(timeout_sec=0.0)
            if handle.realtime_priority:  # the executor's own threads (EventsExecutor timers) start spinning
                use_realtime_priority(handle.realtime_priority)
            while not stop.requested:
                executor.spin_once(timeout_sec=_SPIN_PERIOD_S)
        except _STARTUP_ERRORS as err:
            handle.get_logger().fatal(str(err))
            code = 1
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        finally:
            _shut_down(rclpy, executor, node, handle, managed)
    return code


def node_executor(context=None):
    """The executor the nodes spin on (see :func:`_executor`)."""
    from rclpy.executors import SingleThreadedExecutor

    return _executor(SingleThreadedExecutor, context)


def _executor(fallback, context=None):
    """rclpy's EventsExecutor (C++ event queue) where it exists, else ``fallback()``.

    The Python SingleThreadedExecutor rebuilds its wait set on every wake-up: measured on the
    2-core machine, joint-state receipt -> command publish p99 7.3 ms with it against 0.67 ms
    with the EventsExecutor, which also kept up with 500 Hz joint states (benchmarks/RESULTS.md).
    ``DIFFSIM_ROS_EXECUTOR=single`` selects the Python one.
    """
    import os

    if os.environ.get("DIFFSIM_ROS_EXECUTOR", "events") != "single":
        try:
            from rclpy.experimental.events_executor import EventsExecutor
        except ImportError:  # rclpy before Kilted
            pass
        else:
            return EventsExecutor(context=context)
    return fallback(context=context)


def exit_process(code):
    """End a node's process with ``code`` once ROS is shut down, skipping interpreter teardown.

    Tearing down torch, numba and MuJoCo takes 1-2 s on a busy 2-core machine, longer than a
    node may take to exit after Ctrl-C; everything that matters (hold command, calibration
    file, DDS) is done by then. Node ``main`` functions end with it.
    """
    import logging
    import os
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to say anyway
            pass
    os._exit(code)


def _create_node(rclpy, node_name, namespace, managed):
    kwargs = {"namespace": namespace} if namespace else {}
    if managed:
        from rclpy.lifecycle import LifecycleNode

        class ManagedNode(LifecycleNode):
            """Delegates the transitions to ``self.transitions`` (a _Managed), set after construction."""

            def on_configure(self, state):
                return self.transitions.transition("configure", state)

            def on_activate(self, state):
                return self.transitions.transition("activate", state)

            def on_deactivate(self, state):
                return self.transitions.transition("deactivate", state)

            def on_cleanup(self, state):
                return self.transitions.transition("cleanup", state)

            def on_shutdown(self, state):
                return self.transitions.transition("shutdown", state)

        return ManagedNode(node_name, **kwargs)
    return rclpy.create_node(node_name, **kwargs)


def _start_managed(node, handle, node_class, kwargs):
    """Wire the lifecycle transitions; with ``autostart`` configure and activate now.

    Returns:
        False when autostart's configure failed (logged): the node exits with code 1.
    """
    from rclpy.lifecycle import TransitionCallbackReturn

    _Managed(node, handle, node_class, kwargs)
    autostart = handle.declare_parameter("autostart", True, "configure and activate at start-up (lifecycle node)")
    if not autostart:
        return True
    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
        return False
    node.trigger_activate()
    return True


def _shut_down(rclpy, executor, node, handle, managed):
    """Shutdown callbacks while the context is valid, then the node, then rclpy."""
    if rclpy.ok():
        if managed:
            node.trigger_shutdown()
        handle.run_shutdown_callbacks()
    executor.shutdown(timeout_sec=_FLUSH_TIMEOUT_S)
    node.destroy_node()
    rclpy.try_shutdown(uninstall_handlers=False)  # uninstalling would restore SIG_DFL: a 2nd Ctrl-C kills
