"""ROS 2 message types without a ROS installation: the rosbags typestore plus ``baxter_core_msgs``.

The typestore (``rosbags.typesys``) holds the standard ROS 2 message definitions of one
distribution (Humble by default). ``baxter_core_msgs/msg/JointCommand`` and
``baxter_core_msgs/msg/SEAJointState`` are registered from the ``.msg`` files shipped in
``diffsim_ros/io/msg/`` (BSD-3-Clause, Rethink Robotics), so bags and the embedded runtime
carry them with proper message definitions and RIHS01 type hashes.

:class:`TypestoreMessages` builds messages by type name with ROS defaults for the fields that
are not given (rosbags message classes have no defaults), coercing sequences to the numpy
arrays the rosbags CDR serializer expects. It is the embedded runtime's message factory; the
rclpy backend has its own with the same ``new(type_name, **fields)`` method.
"""

from functools import lru_cache
from pathlib import Path

import numpy as np
from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

__all__ = [
    "BAXTER_MSG_DIR",
    "BAXTER_TYPES",
    "CLOCK",
    "EMPTY",
    "FLOAT64_MULTI_ARRAY",
    "HEADER",
    "JOINT_COMMAND",
    "JOINT_STATE",
    "MessageTypeError",
    "POSE_STAMPED",
    "SEA_JOINT_STATE",
    "TIME",
    "TypestoreMessages",
    "default_typestore",
    "make_typestore",
    "normalize_type_name",
]

JOINT_STATE = "sensor_msgs/msg/JointState"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
FLOAT64_MULTI_ARRAY = "std_msgs/msg/Float64MultiArray"
EMPTY = "std_msgs/msg/Empty"
HEADER = "std_msgs/msg/Header"
TIME = "builtin_interfaces/msg/Time"
CLOCK = "rosgraph_msgs/msg/Clock"
JOINT_COMMAND = "baxter_core_msgs/msg/JointCommand"
SEA_JOINT_STATE = "baxter_core_msgs/msg/SEAJointState"

BAXTER_MSG_DIR = Path(__file__).resolve().parent / "msg"
BAXTER_TYPES = {JOINT_COMMAND: "JointCommand.msg", SEA_JOINT_STATE: "SEAJointState.msg"}

# numpy dtypes of ROS primitive types inside arrays and sequences (as rosbags stores them).
_ARRAY_DTYPES = {"bool": np.bool_, "byte": np.uint8, "char": np.uint8, "octet": np.uint8}
_INT_TYPES = {"byte", "char", "octet", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}
_FLOAT_TYPES = {"float32", "float64", "float128"}


class MessageTypeError(ValueError):
    """An unknown message type, an unknown field, or a field value of the wrong kind."""


def normalize_type_name(type_name):
    """``pkg/Type`` or ``pkg/msg/Type`` -> ``pkg/msg/Type``.

    Raises:
        MessageTypeError: Not of either form.
    """
    parts = str(type_name).split("/")
    if len(parts) == 2 and all(parts):
        return f"{parts[0]}/msg/{parts[1]}"
    if len(parts) == 3 and all(parts):
        return str(type_name)
    raise MessageTypeError(f"invalid message type name {type_name!r}; expected 'package/msg/Type'")


def make_typestore(store=Stores.ROS2_HUMBLE):
    """A new typestore of one ROS 2 distribution with the ``baxter_core_msgs`` types registered.

    Args:
        store: A ``rosbags.typesys.Stores`` member (default ``ROS2_HUMBLE``).

    Returns:
        rosbags ``Typestore``.
    """
    typestore = get_typestore(store)
    for type_name, filename in BAXTER_TYPES.items():
        text = (BAXTER_MSG_DIR / filename).read_text()
        typestore.register(get_types_from_msg(text, type_name))
    return typestore


@lru_cache(maxsize=1)
def default_typestore():
    """The shared Humble typestore with ``baxter_core_msgs`` (built once; do not register into it)."""
    return make_typestore()


def _as_numpy(value):
    """numpy view of array-likes, including torch tensors (detached, moved to the CPU)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


class TypestoreMessages:
    """Message factory and (de)serializer over a rosbags typestore.

    Args:
        typestore: rosbags ``Typestore``; default :func:`default_typestore`.
    """

    def __init__(self, typestore=None):
        self.typestore = typestore if typestore is not None else default_typestore()

    def has_type(self, type_name):
        """Whether the typestore knows ``type_name`` (``pkg/msg/Type``)."""
        return normalize_type_name(type_name) in self.typestore.fielddefs

    def fields(self, type_name):
        """Field names and rosbags field descriptors of a type, in definition order."""
        type_name = normalize_type_name(type_name)
        if type_name not in self.typestore.fielddefs:
            raise MessageTypeError(
                f"unknown message type {type_name!r}: not in the rosbags typestore "
                "(standard ROS 2 types and baxter_core_msgs are available)"
            )
        return list(self.typestore.fielddefs[type_name][1])

    def new(self, type_name, **values):
        """A message of ``type_name`` with the given field values and ROS defaults for the rest.

        Nested messages may be given as dicts of their fields; numeric sequences as lists,
        numpy arrays or torch tensors.

        Raises:
            MessageTypeError: Unknown type or field, or a value of the wrong kind (named).
        """
        type_name = normalize_type_name(type_name)
        fields = self.fields(type_name)
        names = [name for name, _ in fields]
        unknown = set(values) - set(names)
        if unknown:
            raise MessageTypeError(f"{type_name} has no field(s) {sorted(unknown)}; its fields are {names}")
        kwargs = {}
        for name, desc in fields:
            where = f"{type_name}.{name}"
            kwargs[name] = self._coerce(desc, values[name], where) if name in values else self._default(desc)
        return self.typestore.types[type_name](**kwargs)

    def type_name(self, msg):
        """The ``pkg/msg/Type`` name of a typestore message object."""
        try:
            return msg.__msgtype__
        except AttributeError:
            raise MessageTypeError(f"{type(msg).__name__} is not a ROS message of the typestore") from None

    def serialize(self, msg, type_name=None):
        """CDR (little endian) bytes of ``msg``.

        Raises:
            MessageTypeError: The message does not serialize as ``type_name`` (wrong field kinds).
        """
        type_name = normalize_type_name(type_name or self.type_name(msg))
        try:
            return bytes(self.typestore.serialize_cdr(msg, type_name))
        except Exception as err:  # the generated serializer raises assorted errors on bad fields
            raise MessageTypeError(f"cannot serialize a {type_name}: {type(err).__name__}: {err}") from None

    def deserialize(self, data, type_name):
        """Message object from CDR bytes."""
        return self.typestore.deserialize_cdr(data, normalize_type_name(type_name))

    def _default(self, desc):
        kind, detail = desc
        if kind == Nodetype.BASE:
            return _base_default(detail[0])
        if kind == Nodetype.NAME:
            return self.new(detail)
        sub, length = detail
        if sub[0] == Nodetype.BASE and sub[1][0] not in ("string", "wstring"):
            return np.zeros(length if kind == Nodetype.ARRAY else 0, dtype=_array_dtype(sub[1][0]))
        if kind == Nodetype.ARRAY:
            return [self._default(sub) for _ in range(length)]
        return []

    def _coerce(self, desc, value, where):
        kind, detail = desc
        if kind == Nodetype.BASE:
            return _coerce_base(detail[0], value, where)
        if kind == Nodetype.NAME:
            return self._coerce_nested(detail, value, where)
        sub, length = detail
        if sub[0] == Nodetype.BASE and sub[1][0] not in ("string", "wstring"):
            array = _as_numpy(value)
            if array.ndim != 1:
                raise MessageTypeError(f"{where}: expected a 1-D sequence, got shape {array.shape}")
            try:
                out = array.astype(_array_dtype(sub[1][0]), copy=True)
            except (TypeError, ValueError):
                raise MessageTypeError(f"{where}: expected numbers of type {sub[1][0]}, got {array.dtype}") from None
        else:
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise MessageTypeError(f"{where}: expected a sequence, got {type(value).__name__}")
            out = [self._coerce(sub, item, f"{where}[{i}]") for i, item in enumerate(value)]
        if kind == Nodetype.ARRAY and len(out) != length:
            raise MessageTypeError(f"{where}: expected exactly {length} elements, got {len(out)}")
        return out

    def _coerce_nested(self, type_name, value, where):
        if isinstance(value, dict):
            return self.new(type_name, **value)
        if getattr(value, "__msgtype__", None) != type_name:
            raise MessageTypeError(f"{where}: expected a {type_name} (or a dict of its fields), got {type(value).__name__}")
        return value


def _array_dtype(base):
    return _ARRAY_DTYPES.get(base, np.dtype(base) if base != "float128" else np.longdouble)


def _base_default(base):
    if base in ("string", "wstring"):
        return ""
    if base == "bool":
        return False
    return 0.0 if base in _FLOAT_TYPES else 0


def _coerce_base(base, value, where):
    if base in ("string", "wstring"):
        if not isinstance(value, str):
            raise MessageTypeError(f"{where}: expected a str, got {type(value).__name__}")
        return value
    try:
        if hasattr(value, "item"):
            value = value.item()
        if base == "bool":
            return bool(value)
        if base in _INT_TYPES:
            if isinstance(value, float) and not value.is_integer():
                raise TypeError("not an integer")
            return int(value)
        return float(value)
    except (TypeError, ValueError):
        raise MessageTypeError(f"{where}: expected a {base}, got {value!r}") from None
