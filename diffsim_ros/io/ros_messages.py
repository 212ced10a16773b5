"""Conversions between ROS 2 messages and numpy arrays, shared by bags and nodes.

Readers work on any object with the ROS field names (rosbags typestore messages, rclpy
messages), so the same code serves bags, the embedded runtime and rclpy. Builders take a
message *factory*: any object with ``new(type_name, **fields)`` (``TypestoreMessages`` or
the rclpy backend's factory), so nodes build messages without knowing the backend.

Conventions: time stamps are integer nanoseconds (``stamp_ns``) or float seconds; arrays are
float64 numpy arrays; joints are in the model's joint order, mapped by name; quaternions are
(w, x, y, z) in the library and (x, y, z, w) in ROS messages.
"""

from dataclasses import dataclass

import numpy as np

from diffsim_ros.io.ros_types import CLOCK, FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE, POSE_STAMPED, TIME
from diffsim_ros.model.plausibility import QUATERNION_NORM_TOLERANCE

__all__ = [
    "JointMappingError",
    "JointNameMap",
    "JointStateSample",
    "MessageConversionError",
    "NS_PER_S",
    "POSITION_MODE",
    "PoseSample",
    "RAW_POSITION_MODE",
    "TORQUE_MODE",
    "VELOCITY_MODE",
    "as_float_array",
    "clock_msg",
    "float64_multi_array_msg",
    "float64_multi_array_to_array",
    "header_fields",
    "joint_command_msg",
    "joint_command_to_array",
    "joint_state_msg",
    "joint_state_to_sample",
    "ns_to_seconds",
    "pose_stamped_msg",
    "pose_stamped_to_sample",
    "quaternion_wxyz_to_xyzw",
    "quaternion_xyzw_to_wxyz",
    "seconds_to_ns",
    "time_fields",
    "time_msg",
    "time_to_ns",
    "time_to_seconds",
]

NS_PER_S = 1_000_000_000

# baxter_core_msgs/JointCommand modes (JointCommand.msg constants).
POSITION_MODE = 1
VELOCITY_MODE = 2
TORQUE_MODE = 3
RAW_POSITION_MODE = 4



class MessageConversionError(ValueError):
    """A message cannot be converted (wrong length, bad mode, degenerate quaternion, ...)."""


class JointMappingError(MessageConversionError):
    """Joint names of a message do not cover the model's joints (the message names them)."""


def as_float_array(values, what="values"):
    """float64 numpy copy of an array-like or torch tensor.

    Raises:
        MessageConversionError: Not convertible to float64 (named by ``what``).
    """
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise MessageConversionError(f"{what}: expected numbers, got {values!r}") from None


# --- time -------------------------------------------------------------------------------


def time_to_ns(stamp):
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


def time_to_seconds(stamp):
    """builtin_interfaces/Time -> float seconds."""
    return int(stamp.sec) + int(stamp.nanosec) * 1e-9


def seconds_to_ns(seconds):
    """Float seconds -> integer nanoseconds (rounded)."""
    return int(round(float(seconds) * NS_PER_S))


def ns_to_seconds(ns):
    """Integer nanoseconds -> float seconds."""
    return int(ns) / NS_PER_S


def time_fields(stamp_ns):
    """``{"sec", "nanosec"}`` of a time in nanoseconds (nanosec in [0, 1e9))."""
    sec, nanosec = divmod(int(stamp_ns), NS_PER_S)
    return {"sec": sec, "nanosec": nanosec}


def time_msg(factory, stamp_ns):
    """builtin_interfaces/msg/Time of a time in nanoseconds."""
    return factory.new(TIME, **time_fields(stamp_ns))


def header_fields(stamp_ns, frame_id=""):
    """std_msgs/Header fields as a dict (factories accept dicts for nested messages)."""
    return {"stamp": time_fields(stamp_ns), "frame_id": str(frame_id)}


def clock_msg(factory, stamp_ns):
    """rosgraph_msgs/msg/Clock of a time in nanoseconds (the ``/clock`` topic)."""
    return factory.new(CLOCK, clock=time_fields(stamp_ns))


# --- joint names -----------------------------------------------------------------------


class JointNameMap:
    """Maps named per-joint arrays (any order, extra joints) onto the model's joint order.

    Index lookups are cached per tuple of message names: publishers send the same names in
    every message, so the mapping is computed once per publisher layout.

    Args:
        joint_names: Model joint names, in model order; shape (n,).
    """

    def __init__(self, joint_names):
        self.joint_names = tuple(str(name) for name in joint_names)
        if len(set(self.joint_names)) != len(self.joint_names):
            raise JointMappingError(f"duplicate model joint names: {list(self.joint_names)}")
        self._cache = {}

    def __len__(self):
        return len(self.joint_names)

    def overlaps(self, names):
        """Whether any model joint appears in ``names``."""
        return not set(self.joint_names).isdisjoint(names)

    def indices(self, names, where="message"):
        """Positions in ``names`` of the model joints, shape (n,) int.

        Raises:
            JointMappingError: Missing model joints or duplicate names (all named).
        """
        key = tuple(names)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        position = {}
        for i, name in enumerate(key):
            if name in position:
                raise JointMappingError(f"{where}: joint name {name!r} appears twice in {list(key)}")
            position[name] = i
        missing = [name for name in self.joint_names if name not in position]
        if missing:
            raise JointMappingError(
                f"{where}: missing joint(s) {missing} of the model; the message has {list(key)}"
            )
        out = np.array([position[name] for name in self.joint_names], dtype=np.int64)
        out.setflags(write=False)
        self._cache[key] = out
        return out

    def take(self, values, names, field="values", where="message"):
        """``values`` (one per name) in model order, float64 shape (n,).

        Raises:
            JointMappingError: Missing joints, or ``len(values) != len(names)``.
        """
        values = as_float_array(values, f"{where}.{field}").reshape(-1)
        if len(values) != len(names):
            raise JointMappingError(f"{where}: {len(names)} names but {len(values)} {field}")
        return values[self.indices(names, where)]


# --- sensor_msgs/JointState ------------------------------------------------------------


@dataclass(frozen=True)
class JointStateSample:
    """One joint state in model joint order.

    Attributes:
        stamp_ns: Header stamp [ns] (0 when the publisher left it unset).
        positions: Joint positions [rad or m], shape (n,).
        velocities: Joint velocities [rad/s or m/s], shape (n,), or None when not published.
        efforts: Joint efforts [N·m or N], shape (n,), or None when not published.
    """

    stamp_ns: int
    positions: np.ndarray
    velocities: np.ndarray | None = None
    efforts: np.ndarray | None = None

    @property
    def stamp(self):
        """Header stamp [s]."""
        return ns_to_seconds(self.stamp_ns)

    def nonfinite_joints(self, joint_names):
        """Names of joints with a NaN/inf in any published field (empty when all finite)."""
        bad = ~np.isfinite(self.positions)
        for values in (self.velocities, self.efforts):
            if values is not None:
                bad |= ~np.isfinite(values)
        return [name for name, flag in zip(joint_names, bad) if flag]

    def is_finite(self):
        """Whether every published value is finite."""
        return all(v is None or bool(np.isfinite(v).all()) for v in (self.positions, self.velocities, self.efforts))


def joint_state_to_sample(msg, joint_map, where="JointState"):
    """sensor_msgs/JointState -> :class:`JointStateSample` in model order (by name).

    Empty ``velocity``/``effort`` arrays (allowed by ROS) give None.

    Raises:
        JointMappingError: Missing model joints, duplicates, or array lengths that do not match
            ``name``.
    """
    names = list(msg.name)
    positions = joint_map.take(msg.position, names, "positions", where)
    optional = {}
    for field in ("velocity", "effort"):
        values = getattr(msg, field)
        optional[field] = joint_map.take(values, names, field, where) if len(values) else None
    return JointStateSample(time_to_ns(msg.header.stamp), positions, optional["velocity"], optional["effort"])


def joint_state_msg(factory, stamp_ns, names, positions, velocities=None, efforts=None, frame_id=""):
    """sensor_msgs/msg/JointState.

    Args:
        factory: Message factory (``new(type_name, **fields)``).
        stamp_ns: Header stamp [ns].
        names: Joint names, shape (n,).
        positions: [rad or m], shape (n,); velocities [rad/s], efforts [N·m]: shape (n,) or None.
        frame_id: Header frame id.

    Raises:
        MessageConversionError: Array lengths differ from ``len(names)``.
    """
    names = [str(name) for name in names]
    fields = {"header": header_fields(stamp_ns, frame_id), "name": names}
    for field, values in (("position", positions), ("velocity", velocities), ("effort", efforts)):
        if values is None:
            continue
        array = as_float_array(values, f"JointState.{field}").reshape(-1)
        if len(array) != len(names):
            raise MessageConversionError(f"JointState.{field}: {len(array)} values for {len(names)} joint names")
        fields[field] = array
    return factory.new(JOINT_STATE, **fields)


# --- geometry_msgs/PoseStamped ---------------------------------------------------------


def quaternion_xyzw_to_wxyz(quaternion):
    """ROS (x, y, z, w) -> library (w, x, y, z), shape (..., 4)."""
    q = as_float_array(quaternion, "quaternion")
    return np.concatenate([q[..., 3:4], q[..., 0:3]], axis=-1)


def quaternion_wxyz_to_xyzw(quaternion):
    """Library (w, x, y, z) -> ROS (x, y, z, w), shape (..., 4)."""
    q = as_float_array(quaternion, "quaternion")
    return np.concatenate([q[..., 1:4], q[..., 0:1]], axis=-1)


@dataclass(frozen=True)
class PoseSample:
    """One stamped pose.

    Attributes:
        stamp_ns: Header stamp [ns].
        frame_id: Frame the pose is expressed in.
        position: [m], shape (3,).
        quaternion: Unit quaternion (w, x, y, z), shape (4,); NaN when the message had NaNs.
    """

    stamp_ns: int
    frame_id: str
    position: np.ndarray
    quaternion: np.ndarray

    def is_finite(self):
        """Whether position and orientation are finite."""
        return bool(np.isfinite(self.position).all() and np.isfinite(self.quaternion).all())


def pose_stamped_to_sample(msg, where="PoseStamped"):
    """geometry_msgs/PoseStamped -> :class:`PoseSample` with a normalized (w, x, y, z) quaternion.

    Raises:
        MessageConversionError: A finite quaternion far from unit norm (e.g. all zeros).
    """
    p, o = msg.pose.position, msg.pose.orientation
    position = np.array([p.x, p.y, p.z], dtype=np.float64)
    quaternion = np.array([o.w, o.x, o.y, o.z], dtype=np.float64)
    norm = float(np.linalg.norm(quaternion))
    if np.isfinite(norm):
        if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
            raise MessageConversionError(f"{where}: orientation quaternion has norm {norm:.3g}, expected 1")
        quaternion = quaternion / norm
    return PoseSample(time_to_ns(msg.header.stamp), str(msg.header.frame_id), position, quaternion)


def pose_stamped_msg(factory, stamp_ns, frame_id, position, quaternion_wxyz):
    """geometry_msgs/msg/PoseStamped from position [m] (3,) and quaternion (w, x, y, z) (4,)."""
    position = as_float_array(position, "position").reshape(3)
    x, y, z, w = quaternion_wxyz_to_xyzw(as_float_array(quaternion_wxyz, "quaternion").reshape(4))
    pose = {
        "position": {"x": position[0], "y": position[1], "z": position[2]},
        "orientation": {"x": x, "y": y, "z": z, "w": w},
    }
    return factory.new(POSE_STAMPED, header=header_fields(stamp_ns, frame_id), pose=pose)


# --- std_msgs/Float64MultiArray and baxter_core_msgs/JointCommand -----------------------


def float64_multi_array_msg(factory, values, label=""):
    """std_msgs/msg/Float64MultiArray with a one-dimensional layout, values shape (k,)."""
    data = as_float_array(values, "Float64MultiArray.data").reshape(-1)
    dim = {"label": str(label), "size": len(data), "stride": len(data)}
    return factory.new(FLOAT64_MULTI_ARRAY, layout={"dim": [dim], "data_offset": 0}, data=data)


def float64_multi_array_to_array(msg, expected_length=None, where="Float64MultiArray"):
    """Float64MultiArray data as float64 shape (k,).

    Raises:
        MessageConversionError: ``expected_length`` given and the length differs.
    """
    data = as_float_array(msg.data, where).reshape(-1)
    if expected_length is not None and len(data) != expected_length:
        raise MessageConversionError(f"{where}: expected {expected_length} values, got {len(data)}")
    return data


def joint_command_msg(factory, names, command, mode=TORQUE_MODE):
    """baxter_core_msgs/msg/JointCommand (default TORQUE_MODE = 3), command shape (n,) [N·m].

    Raises:
        MessageConversionError: ``len(command) != len(names)`` or an unknown mode.
    """
    names = [str(name) for name in names]
    command = as_float_array(command, "JointCommand.command").reshape(-1)
    if len(command) != len(names):
        raise MessageConversionError(f"JointCommand: {len(command)} commands for {len(names)} names")
    if mode not in (POSITION_MODE, VELOCITY_MODE, TORQUE_MODE, RAW_POSITION_MODE):
        raise MessageConversionError(f"JointCommand: unknown mode {mode}")
    return factory.new(JOINT_COMMAND, mode=int(mode), command=command, names=names)


def joint_command_to_array(msg, joint_map, require_mode=TORQUE_MODE, where="JointCommand"):
    """JointCommand -> command in model joint order, float64 shape (n,).

    Raises:
        MessageConversionError: Mode differs from ``require_mode`` (None accepts any).
        JointMappingError: Missing joints or mismatched lengths.
    """
    if require_mode is not None and int(msg.mode) != require_mode:
        raise MessageConversionError(f"{where}: mode {int(msg.mode)}, expected {require_mode}")
    return joint_map.take(msg.command, list(msg.names), "command", where)
