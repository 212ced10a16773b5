"""rclpy backend: node logic runs as a real ROS 2 node (Humble, Jazzy).

The only module of diffsim_ros that imports rclpy, and only inside functions, so it imports
without ROS (the pure helpers are tested anywhere). A node module's entry point::

    def main(args=None):
        run_node(ControllerNode, "controller", args)

``run_node`` does what ``demo_nodes_py`` nodes do (``rclpy.init``, spin, clean shutdown on
Ctrl-C or external shutdown) around a :class:`RclpyNodeHandle`. Parameters come from
``--ros-args --params-file`` / ``-p``; ``use_sim_time`` and ``/clock`` are rclpy's own.
Message types are resolved by name (``sensor_msgs/msg/JointState`` -> ``sensor_msgs.msg``);
a missing package (e.g. ``baxter_core_msgs``) raises :class:`MessagePackageMissingError`
naming the package and how to install it.
"""

import array
import importlib
import re

import numpy as np

from diffsim_ros.io.ros_types import MessageTypeError, normalize_type_name
from diffsim_ros.runtime.interface import Logger, NodeHandle, Publisher, Subscription, Timer
from diffsim_ros.runtime.qos import KEEP_LAST, RELIABLE, VOLATILE, as_qos_profile

__all__ = [
    "MessagePackageMissingError",
    "RclpyMessages",
    "RclpyNodeHandle",
    "RosNotAvailableError",
    "install_hint",
    "message_class",
    "qos_policy_names",
    "run_node",
    "to_rclpy_qos",
]

# How to get message packages that are not part of a ROS 2 desktop install.
_INSTALL_HINTS = {
    "baxter_core_msgs": (
        "build the ROS 2 port of baxter_core_msgs in your colcon workspace (e.g. from "
        "https://github.com/CentraleNantesRobotics/baxter_common_ros2: git clone into src/, "
        "colcon build --packages-select baxter_core_msgs, source install/setup.bash)"
    ),
}
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
    type_name = normalize_type_name(type_name)
    package, kind, name = type_name.split("/")
    try:
        module = importer(f"{package}.{kind}")
    except ModuleNotFoundError as err:
        if err.name in (package, f"{package}.{kind}"):
            raise MessagePackageMissingError(package, type_name) from None
        raise
    cls = getattr(module, name, None)
    if cls is None:
        raise MessageTypeError(f"package '{package}' has no message '{name}' (looking for {type_name})")
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
        self._classes = {}

    def message_class(self, type_name):
        """The (cached) class of a type name."""
        type_name = normalize_type_name(type_name)
        if type_name not in self._classes:
            self._classes[type_name] = self.resolver(type_name)
        return self._classes[type_name]

    def new(self, type_name, **values):
        """A message of ``type_name`` with the given fields (ROS defaults for the others)."""
        cls = self.message_class(type_name)
        field_types = cls.get_fields_and_field_types()
        unknown = set(values) - set(field_types)
        if unknown:
            raise MessageTypeError(f"{type_name} has no field(s) {sorted(unknown)}; its fields are {list(field_types)}")
        return cls(**{name: self.convert(field_types[name], value, f"{type_name}.{name}") for name, value in values.items()})

    def convert(self, field_type, value, where="field"):
        """``value`` in the form rclpy accepts for a field of IDL-ish type ``field_type``."""
        sequence = _SEQUENCE.match(field_type)
        fixed = _ARRAY.match(field_type)
        if sequence or fixed:
            element = (sequence or fixed).group(1)
            if "/" in element:
                return [self.convert(element, item, f"{where}[{i}]") for i, item in enumerate(value)]
            if fixed and element in (*_TYPECODES, *_NUMPY_DTYPES):
                return np.asarray(_as_list(value), dtype=_NUMPY_DTYPES.get(element, np.dtype(element)))
            if sequence and element in _TYPECODES:
                return array.array(_TYPECODES[element], [self.convert(element, v, where) for v in _as_list(value)])
            return [self.convert(element, item, where) for item in _as_list(value)]
        if "/" in field_type:
            return self.new(field_type, **value) if isinstance(value, dict) else value
        return _scalar(field_type, value, where)


def _scalar(field_type, value, where):
    if hasattr(value, "item"):
        value = value.item()
    if field_type in ("double", "float"):
        return float(value)
    if field_type == "boolean":
        return bool(value)
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


class _RclpySubscription(Subscription):
    def __init__(self, subscription, msg_type, qos):
        self.subscription, self.msg_type, self.qos = subscription, msg_type, qos
        self.topic = subscription.topic_name


class _RclpyTimer(Timer):
    def __init__(self, timer):
        self.timer = timer

    def cancel(self):
        self.timer.cancel()

    @property
    def is_canceled(self):
        return self.timer.is_canceled()


class _RclpyLogger(Logger):
    """Forwards to the rclpy node logger (throttling done by the Logger base on node time)."""

    def __init__(self, rclpy_logger, clock_ns):
        super().__init__()
        self.rclpy_logger, self._clock_ns = rclpy_logger, clock_ns

    def _now_ns(self):
        return self._clock_ns()

    def _emit(self, level, message):
        getattr(self.rclpy_logger, level)(message)


class RclpyNodeHandle(NodeHandle):
    """NodeHandle over an ``rclpy.node.Node``.

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

    @property
    def messages(self):
        return self._messages

    def create_publisher(self, msg_type, topic, qos=10):
        qos = as_qos_profile(qos)
        cls = self._messages.message_class(msg_type)
        return _RclpyPublisher(self.node.create_publisher(cls, topic, to_rclpy_qos(qos)), normalize_type_name(msg_type), qos)

    def create_subscription(self, msg_type, topic, callback, qos=10):
        qos = as_qos_profile(qos)
        cls = self._messages.message_class(msg_type)
        subscription = self.node.create_subscription(cls, topic, callback, to_rclpy_qos(qos))
        return _RclpySubscription(subscription, normalize_type_name(msg_type), qos)

    def create_timer(self, period_s, callback):
        return _RclpyTimer(self.node.create_timer(float(period_s), callback))

    def now_ns(self):
        return self.node.get_clock().now().nanoseconds

    def get_logger(self):
        return self._logger

    def declare_parameter(self, name, default, description=""):
        from rcl_interfaces.msg import ParameterDescriptor

        # dynamic_typing: an integer in a params file for a float parameter (8000 for 8000.0)
        # and empty-list defaults would otherwise be rejected; declare_config checks types.
        descriptor = ParameterDescriptor(description=description, dynamic_typing=True)
        return self.node.declare_parameter(name, default, descriptor).value

    def add_on_shutdown(self, callback):
        self._shutdown_callbacks.append(callback)

    def run_shutdown_callbacks(self):
        """Call the shutdown callbacks once each (errors are logged, not raised)."""
        callbacks, self._shutdown_callbacks = self._shutdown_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception as err:  # every callback must run; the node is going down anyway
                self._logger.error(f"shutdown callback failed: {type(err).__name__}: {err}")


def run_node(node_class, node_name, args=None, *, namespace=None, **kwargs):
    """Run ``node_class(handle, **kwargs)`` as an rclpy node until Ctrl-C or ROS shutdown.

    Args:
        node_class: Node logic class taking a NodeHandle.
        node_name: Default node name (remappable with ``--ros-args -r __node:=...``).
        args: Command line arguments (``main(args=None)`` passes them through).
        namespace: Default namespace.

    Raises:
        RosNotAvailableError: rclpy is not importable.
        MessagePackageMissingError: A message package the node uses is not installed.
    """
    rclpy = _rclpy()
    from rclpy.executors import ExternalShutdownException

    rclpy.init(args=args)
    node = rclpy.create_node(node_name, namespace=namespace) if namespace else rclpy.create_node(node_name)
    handle = RclpyNodeHandle(node)
    try:
        node_class(handle, **kwargs)
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        handle.run_shutdown_callbacks()
        node.destroy_node()
        rclpy.try_shutdown()
