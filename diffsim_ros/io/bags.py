"""ROS 2 bags (sqlite3 and mcap) without ROS: typed robot data in, atomic recordings out.

Reading: :func:`read_robot_bag` / :func:`read_bag` return joint states, camera poses and
commanded torques as float64 arrays, joints mapped by name onto the model order, times from
header stamps (falling back to the bag's receive time for messages with a zero stamp).
Bad input raises :class:`BagError` naming the problem: a missing or empty bag, a missing
topic (the topics present are listed), a wrong message type, joint names that do not cover
the model, NaN samples (dropped and counted, or rejected), non-monotonic stamps.

Writing: :class:`BagWriter` (streaming) and :func:`write_bag` write into a temporary
directory next to the target and rename it into place on success, so a failed or aborted
recording leaves nothing behind. Metadata version 8 (QoS profiles as a YAML string) is used
because both Humble and Jazzy ``ros2 bag`` read it; message definitions and RIHS01 type
hashes come from the typestore.
"""

import os
import shutil
import uuid
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import yaml
from rosbags.highlevel import AnyReader
from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2 import StoragePlugin, Writer

from diffsim_ros.estimation.streams import JointStateSeries, PoseSeries, RobotStreams, StreamStats, TorqueSeries
from diffsim_ros.io.ros_messages import (
    TORQUE_MODE,
    JointNameMap,
    MessageConversionError,
    float64_multi_array_to_array,
    joint_command_to_array,
    joint_state_to_sample,
    pose_stamped_to_sample,
)
from diffsim_ros.io.ros_types import (
    FLOAT64_MULTI_ARRAY,
    JOINT_COMMAND,
    JOINT_STATE,
    POSE_STAMPED,
    default_typestore,
    normalize_type_name,
)
from diffsim_ros.model.config import controller_order
from diffsim_ros.model.config_schema import default_value
from diffsim_ros.outputs import check_interrupted
from diffsim_ros.resources import describe_path
from diffsim_ros.vocabulary import STORAGES

__all__ = [
    "BagData",
    "BagError",
    "BagInfo",
    "BagRecord",
    "BagTopics",
    "BagWriter",
    "DEFAULT_QOS",
    "MissingTopicError",
    "STORAGES",
    "bag_info",
    "iter_bag",
    "read_bag",
    "read_pose_topics",
    "read_robot_bag",
    "write_bag",
]

_PLUGINS = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}
# rosbag2 metadata version written: 8 keeps QoS profiles as a YAML string, which Humble parses.
_BAG_VERSION = 8
_NO_DURATION = QosTime(0, 0)  # rmw "unspecified": the middleware default (infinite)

DEFAULT_QOS = Qos(
    QosHistory.KEEP_LAST,
    10,
    QosReliability.RELIABLE,
    QosDurability.VOLATILE,
    _NO_DURATION,
    _NO_DURATION,
    QosLiveliness.AUTOMATIC,
    _NO_DURATION,
    False,
)

_STREAM_TYPES = {
    "joint_states": (JOINT_STATE,),
    "camera_pose": (POSE_STAMPED,),
    "commanded_torques": (JOINT_COMMAND, FLOAT64_MULTI_ARRAY),
}
_NAN_POLICIES = ("drop", "raise")
_ORDER_POLICIES = ("raise", "sort")


class BagError(ValueError):
    """A bag cannot be read or written as asked; the message names the bag and the problem."""


class MissingTopicError(BagError):
    """A topic that was asked for is not in the bag, or has no messages.

    Attributes:
        stream: The stream it was to carry (``"joint_states"``, ``"camera_pose"``, ``"commanded_torques"``).
        topic: The topic name asked for.
    """

    def __init__(self, message, stream, topic):
        super().__init__(message)
        self.stream, self.topic = stream, topic


# --- topics -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BagTopics:
    """Topic names of the robot data streams (the ``topics:`` section of a robot config).

    Attributes:
        joint_states: sensor_msgs/msg/JointState topic.
        camera_pose: geometry_msgs/msg/PoseStamped topic (tracked link in the camera frame), or None.
        commanded_torques: baxter_core_msgs/msg/JointCommand or std_msgs/msg/Float64MultiArray
            topic, or None.
    """

    joint_states: str = default_value("topics.joint_states")
    camera_pose: str | None = None
    commanded_torques: str | None = None

    @classmethod
    def from_config(cls, config):
        """From a RobotConfig (its ``raw["topics"]``) or a plain ``topics`` mapping.

        Raises:
            BagError: Unknown keys or non-string topic names.
        """
        raw = config.raw if hasattr(config, "raw") else {"topics": config}
        topics = raw.get("topics") or {}
        if not isinstance(topics, Mapping):
            raise BagError(f"robot config 'topics' must be a mapping, got {topics!r}")
        unknown = set(topics) - set(_STREAM_TYPES)
        if unknown:
            raise BagError(f"robot config 'topics': unknown keys {sorted(unknown)}; allowed {sorted(_STREAM_TYPES)}")
        for key, value in topics.items():
            if value is not None and not isinstance(value, str):
                raise BagError(f"robot config 'topics.{key}' must be a topic name, got {value!r}")
        return cls(**{key: value for key, value in topics.items()})

    def items(self):
        """(stream, topic) pairs of the configured streams."""
        return [(key, getattr(self, key)) for key in _STREAM_TYPES if getattr(self, key)]


# --- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BagData:
    """Robot data read from one bag.

    Attributes:
        path: The bag. storage: "sqlite3" or "mcap".
        t0_ns: Reference time [ns] of every ``times`` array (first joint state stamp).
        topics: All topics of the bag -> message type.
        joint_states: JointStateSeries.
        camera_poses: PoseSeries or None (topic not configured or absent).
        commanded_torques: TorqueSeries or None.
        absent: Configured optional streams that the bag does not have.
    """

    path: Path
    storage: str
    t0_ns: int
    topics: dict
    joint_states: JointStateSeries
    camera_poses: PoseSeries | None = None
    commanded_torques: TorqueSeries | None = None
    absent: tuple = ()

    def streams(self):
        """The robot streams, for :func:`~diffsim_ros.estimation.preparation.prepare_dataset`."""
        return RobotStreams(str(self.path), self.t0_ns, self.joint_states, self.camera_poses, self.commanded_torques)


@dataclass(frozen=True)
class BagInfo:
    """Summary of a bag: storage, receive times of the first and last message [ns], topics
    (name -> (type, count)) and their offered QoS profiles (name -> list of rosbags Qos)."""

    path: Path
    storage: str
    message_count: int
    start_ns: int
    end_ns: int
    topics: dict = field(default_factory=dict)  # topic -> (msgtype, count)
    offered_qos: dict = field(default_factory=dict)  # topic -> list of rosbags Qos

    def describe_topics(self):
        """``"/topic (type, N msgs)"`` list for error messages."""
        return [f"{name} ({msgtype}, {count} msgs)" for name, (msgtype, count) in sorted(self.topics.items())]


@dataclass(frozen=True)
class BagRecord:
    """One message of a bag: topic, type, receive time [ns], CDR bytes and the decoded message."""

    topic: str
    msgtype: str
    timestamp_ns: int
    data: bytes
    msg: object


# --- reading ----------------------------------------------------------------------------


def _storage_of(path):
    if path.is_dir():
        meta = path / "metadata.yaml"
        if not meta.is_file():
            files = sorted(p.name for p in path.iterdir() if p.suffix in (".db3", ".mcap"))
            hint = f"; to read its storage file alone, give the file: {path / files[0]}" if len(files) == 1 else ""
            raise BagError(f"{path}: not a rosbag2 directory (no metadata.yaml){hint}")
        try:
            info = yaml.safe_load(meta.read_text())["rosbag2_bagfile_information"]
            return str(info["storage_identifier"])
        except (yaml.YAMLError, KeyError, TypeError) as err:
            raise BagError(f"{meta}: invalid rosbag2 metadata ({err})") from None
    return {".db3": "sqlite3", ".mcap": "mcap"}.get(path.suffix, path.suffix)


@contextmanager
def _open(path, typestore=None):
    """AnyReader over a rosbag2 directory or a .db3/.mcap file, with errors as BagError."""
    path = Path(path)
    if not path.exists():
        raise BagError(f"bag not found: {describe_path(path)}")
    storage = _storage_of(path)
    try:
        reader = AnyReader([path], default_typestore=typestore or default_typestore())
        reader.open()
    except BagError:
        raise
    except Exception as err:  # rosbags raises several error types for unreadable bags
        raise BagError(f"{path}: cannot open bag: {err}") from None
    try:
        yield reader, storage
    finally:
        reader.close()


def _info(reader, path, storage):
    topics, qos = {}, {}
    for connection in reader.connections:
        msgtype, count = topics.get(connection.topic, (connection.msgtype, 0))
        topics[connection.topic] = (msgtype, count + connection.msgcount)
        qos.setdefault(connection.topic, list(getattr(connection.ext, "offered_qos_profiles", [])))
    count = sum(count for _, count in topics.values())
    # AnyReader's end_time is exclusive (last stamp + 1 ns).
    start, end = (reader.start_time, reader.end_time - 1) if count else (0, 0)
    return BagInfo(path, storage, count, start, end, topics, qos)


def bag_info(path):
    """Topics, types, counts and time range of a bag.

    Raises:
        BagError: Not found or unreadable.
    """
    with _open(path) as (reader, storage):
        return _info(reader, Path(path), storage)


def iter_bag(path, topics=None, typestore=None, start_ns=None, stop_ns=None):
    """Messages of a bag in receive-time order.

    Args:
        path: rosbag2 directory or .db3/.mcap file.
        topics: Topic names to read (default: all).
        typestore: Types for bags without embedded definitions (default: Humble + baxter).
        start_ns: Only messages received at or after this time [ns] (default: from the first).
        stop_ns: Only messages received before this time [ns] (default: to the last).

    Yields:
        BagRecord.

    Raises:
        BagError: Not found, unreadable, or a requested topic is absent.
    """
    with _open(path, typestore) as (reader, storage):
        connections = reader.connections
        if topics is not None:
            info = _info(reader, Path(path), storage)
            missing = sorted(set(topics) - set(info.topics))
            if missing:
                raise BagError(f"{path}: topic(s) {missing} not in the bag; it has {info.describe_topics()}")
            connections = [c for c in connections if c.topic in set(topics)]
        for connection, timestamp, data in reader.messages(connections=connections, start=start_ns, stop=stop_ns):
            msg = _deserialize(reader, data, connection, path)
            yield BagRecord(connection.topic, connection.msgtype, int(timestamp), bytes(data), msg)


def _deserialize(reader, data, connection, path):
    try:
        return reader.deserialize(data, connection.msgtype)
    except Exception as err:
        raise BagError(f"{path}: cannot decode a {connection.msgtype} message on {connection.topic}: {err}") from None


class _Stream:
    """Collects one stream's samples; subclasses convert messages."""

    def __init__(self, topic, msgtype, where):
        self.topic, self.msgtype, self.where = topic, msgtype, where
        self.stamps, self.receive, self.rows, self.finite = [], [], [], []
        self.messages = self.skipped = self.from_receive = 0

    def add(self, msg, receive_ns, index):
        self.messages += 1
        converted = self.convert(msg, f"{self.where} message {index} (received at {receive_ns} ns)")
        if converted is None:
            self.skipped += 1
            return
        stamp_ns, row, finite = converted
        if stamp_ns == 0:
            stamp_ns = receive_ns
            self.from_receive += 1
        self.stamps.append(stamp_ns)
        self.receive.append(receive_ns)
        self.rows.append(row)
        self.finite.append(finite)


class _JointStates(_Stream):
    def __init__(self, topic, msgtype, where, joint_map):
        super().__init__(topic, msgtype, where)
        self.joint_map = joint_map

    def convert(self, msg, where):
        if not self.joint_map.overlaps(msg.name):
            return None  # another publisher's joints (head, grippers) on the same topic
        sample = joint_state_to_sample(msg, self.joint_map, where)
        return sample.stamp_ns, sample, sample.is_finite()


class _Poses(_Stream):
    def convert(self, msg, where):
        sample = pose_stamped_to_sample(msg, where)
        return sample.stamp_ns, sample, sample.is_finite()


class _Torques(_Stream):
    """Commanded torques: a JointCommand maps by name, a Float64MultiArray by ``command_joints``' order."""

    def __init__(self, topic, msgtype, where, joint_map, command_joints):
        super().__init__(topic, msgtype, where)
        self.joint_map = joint_map
        self.command_joints = list(command_joints)
        self.order = controller_order(joint_map.joint_names, self.command_joints)  # model index of each entry

    def convert(self, msg, where):
        if self.msgtype == JOINT_COMMAND:
            if int(msg.mode) != TORQUE_MODE:
                return None
            torques = joint_command_to_array(msg, self.joint_map, TORQUE_MODE, where)
        else:
            data = float64_multi_array_to_array(
                msg, len(self.joint_map), f"{where} (a Float64MultiArray of one torque per joint {self.command_joints})")
            torques = np.empty_like(data)
            torques[self.order] = data
        return 0, torques, bool(np.isfinite(torques).all())  # no header: always the receive time


def _select(stream, nan_policy, order_policy):
    """Indices of the samples kept, in stamp order, and the stats; raises per the policies."""
    finite = np.array(stream.finite, dtype=bool)
    stamps = np.array(stream.stamps, dtype=np.int64)
    if nan_policy == "raise" and not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise BagError(f"{stream.where}: sample {i} (stamp {stamps[i]} ns) has NaN/inf values")
    keep = np.flatnonzero(finite)
    order, duplicates, was_sorted = keep, 0, False
    late = int(np.sum(stamps[keep][1:] < np.maximum.accumulate(stamps[keep])[:-1])) if len(keep) > 1 else 0
    if len(keep) > 1 and np.any(np.diff(stamps[keep]) <= 0):
        if order_policy == "raise":
            i = int(np.flatnonzero(np.diff(stamps[keep]) <= 0)[0])
            raise BagError(
                f"{stream.where}: non-monotonic header stamps: sample {keep[i + 1]} at {stamps[keep[i + 1]]} ns "
                f"is not after sample {keep[i]} at {stamps[keep[i]]} ns (to sort them and drop repeated stamps: "
                "the command's --order-policy sort, or order_policy='sort' in Python)"
            )
        order = keep[np.argsort(stamps[keep], kind="stable")]
        unique = np.concatenate([[True], np.diff(stamps[order]) > 0])
        duplicates, order, was_sorted = int((~unique).sum()), order[unique], True
    stats = StreamStats(
        stream.topic,
        stream.msgtype,
        stream.messages,
        len(order),
        dropped_nan=int((~finite).sum()),
        dropped_duplicate=duplicates,
        out_of_order=late,
        skipped=stream.skipped,
        stamp_from_receive=stream.from_receive,
        sorted=was_sorted,
    )
    return order, stats


def _stacked_optional(samples, field_name):
    values = [getattr(sample, field_name) for sample in samples]
    if not values or any(v is None for v in values):
        return None
    return np.stack(values)


def _joint_series(stream, order, stats, t0_ns):
    samples = [stream.rows[i] for i in order]
    stamps = np.array(stream.stamps, dtype=np.int64)[order]
    return JointStateSeries(
        joint_names=stream.joint_map.joint_names,
        stamps_ns=stamps,
        times=(stamps - t0_ns) * 1e-9,
        positions=np.stack([sample.positions for sample in samples]),
        velocities=_stacked_optional(samples, "velocities"),
        efforts=_stacked_optional(samples, "efforts"),
        stats=stats,
    )


def _pose_series(stream, order, stats, t0_ns):
    samples = [stream.rows[i] for i in order]
    stamps = np.array(stream.stamps, dtype=np.int64)[order]
    frames = sorted({sample.frame_id for sample in samples})
    if len(frames) > 1:
        raise BagError(f"{stream.where}: poses in several frames {frames}; expected one camera frame")
    return PoseSeries(
        times=(stamps - t0_ns) * 1e-9,
        position=np.stack([sample.position for sample in samples]).reshape(-1, 3),
        orientation=np.stack([sample.quaternion for sample in samples]).reshape(-1, 4),
        frame_id=frames[0] if frames else "",
        stamps_ns=stamps,
        stats=stats,
    )


def _torque_series(stream, order, stats, t0_ns):
    stamps = np.array(stream.stamps, dtype=np.int64)[order]
    torques = np.stack([stream.rows[i] for i in order]) if len(order) else np.zeros((0, len(stream.joint_map)))
    return TorqueSeries(stamps_ns=stamps, times=(stamps - t0_ns) * 1e-9, torques=torques, stats=stats)


def _check_arguments(nan_policy, order_policy, required):
    unknown = set(required) - set(_STREAM_TYPES)
    if unknown:
        raise ValueError(f"required: unknown stream(s) {sorted(unknown)}; streams are {sorted(_STREAM_TYPES)}")
    if nan_policy not in _NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {_NAN_POLICIES}, got {nan_policy!r}")
    if order_policy not in _ORDER_POLICIES:
        raise ValueError(f"order_policy must be one of {_ORDER_POLICIES}, got {order_policy!r}")


def _has_messages(info, topic):
    return topic in info.topics and info.topics[topic][1] > 0


def _check_topic(info, topic, stream, allowed, path):
    """The topic's normalized message type; BagError if it is absent, empty or of another type.

    Args:
        stream: What the topic carries (named in errors), e.g. "joint_states".
    """
    if not _has_messages(info, topic):
        state = "has no messages" if topic in info.topics else "is not in the bag"
        raise MissingTopicError(f"{path}: topic {topic} ({stream}) {state}; topics present: {info.describe_topics()}",
                                stream, topic)
    msgtype = normalize_type_name(info.topics[topic][0])
    if msgtype not in allowed:
        raise BagError(f"{path} [{topic}]: message type {msgtype}; {stream} must be one of {list(allowed)}")
    return msgtype


def _make_streams(info, topics, required, joint_map, path, command_joints):
    """One collector per configured stream present in the bag; errors for required/mistyped ones."""
    streams, absent = {}, []
    for key, topic in topics.items():
        where = f"{path} [{topic}]"
        if not _has_messages(info, topic):
            if key in required:
                _check_topic(info, topic, key, _STREAM_TYPES[key], path)
            absent.append(key)
            continue
        msgtype = _check_topic(info, topic, key, _STREAM_TYPES[key], path)
        if key == "joint_states":
            streams[key] = _JointStates(topic, msgtype, where, joint_map)
        elif key == "camera_pose":
            streams[key] = _Poses(topic, msgtype, where)
        else:
            streams[key] = _Torques(topic, msgtype, where, joint_map, command_joints)
    return streams, tuple(absent)


def _collect(reader, streams, path):
    by_topic = {stream.topic: stream for stream in streams.values()}
    connections = [c for c in reader.connections if c.topic in by_topic]
    counts = dict.fromkeys(by_topic, 0)
    for connection, timestamp, data in reader.messages(connections=connections):
        stream = by_topic[connection.topic]
        msg = _deserialize(reader, data, connection, path)
        try:
            stream.add(msg, int(timestamp), counts[connection.topic])
        except MessageConversionError as err:
            raise BagError(str(err)) from None
        counts[connection.topic] += 1


def read_bag(
    path,
    joint_names,
    *,
    topics=None,
    required=("joint_states",),
    nan_policy="drop",
    order_policy="raise",
    typestore=None,
    command_joints=None,
):
    """Read robot data streams from a bag into arrays in model joint order.

    Args:
        path: rosbag2 directory (sqlite3 or mcap) or a .db3/.mcap file.
        joint_names: Model joint names, shape (n,); JointState/JointCommand map by name.
        topics: BagTopics (default ``BagTopics()``: ``/joint_states`` only).
        command_joints: The joints of a Float64MultiArray command's entries, in its order (a
            ros2_control controller's ``joints``), shape (n,): a permutation of ``joint_names``
            (default: ``joint_names``' order).
        required: Stream keys that must be present ("joint_states", "camera_pose",
            "commanded_torques"); other configured streams may be absent (see ``BagData.absent``).
        nan_policy: "drop" (count in ``stats.dropped_nan``) or "raise".
        order_policy: "raise" on non-monotonic stamps, or "sort" (dropping repeated stamps).
        typestore: Types for bags without embedded definitions (Humble sqlite3 bags).

    Returns:
        BagData.

    Raises:
        BagError: Missing/empty bag, missing topic (:class:`MissingTopicError`), wrong type,
            unmatched joint names, NaN samples (``nan_policy="raise"``), non-monotonic stamps
            (``order_policy="raise"``), or a stream left with no valid sample.
        RobotModelError: ``command_joints`` not a permutation of ``joint_names``.
    """
    _check_arguments(nan_policy, order_policy, required)
    topics = topics or BagTopics()
    path = Path(path)
    joint_map = JointNameMap(joint_names)
    command_joints = joint_map.joint_names if command_joints is None or not len(command_joints) else command_joints
    with _open(path, typestore) as (reader, storage):
        info = _info(reader, path, storage)
        if info.message_count == 0:
            raise BagError(f"{path}: the bag is empty (no messages)")
        streams, absent = _make_streams(info, dict(topics.items()), set(required), joint_map, path, command_joints)
        if "joint_states" not in streams:
            raise BagError(f"{path}: joint_states topic is required; topics present: {info.describe_topics()}")
        _collect(reader, streams, path)
    return _assemble(path, storage, info, streams, absent, nan_policy, order_policy, required)


def _assemble(path, storage, info, streams, absent, nan_policy, order_policy, required):
    selected = {key: _select(stream, nan_policy, order_policy) for key, stream in streams.items()}
    for key, (order, stats) in selected.items():
        if len(order) == 0 and (key in required or key == "joint_states"):
            stream = streams[key]
            reason = (
                f"none of its {stats.messages} messages name the model joints {list(stream.joint_map.joint_names)}"
                if stats.skipped == stats.messages and key == "joint_states"
                else f"no valid sample among {stats.messages} messages ({stats.dropped_nan} with NaN/inf, "
                f"{stats.skipped} skipped)"
            )
            raise BagError(f"{stream.where}: {reason}")
    order, stats = selected["joint_states"]
    t0_ns = int(np.array(streams["joint_states"].stamps, dtype=np.int64)[order][0])
    builders = {"joint_states": _joint_series, "camera_pose": _pose_series, "commanded_torques": _torque_series}
    series = {key: builders[key](streams[key], *selected[key], t0_ns) for key in streams}
    empty = tuple(key for key in series if key != "joint_states" and len(selected[key][0]) == 0)
    return BagData(
        path=path,
        storage=storage,
        t0_ns=t0_ns,
        topics={name: msgtype for name, (msgtype, _) in info.topics.items()},
        joint_states=series["joint_states"],
        camera_poses=series.get("camera_pose") if "camera_pose" not in empty else None,
        commanded_torques=series.get("commanded_torques") if "commanded_torques" not in empty else None,
        absent=absent + empty,
    )


def read_pose_topics(path, topics, *, nan_policy="drop", order_policy="raise", typestore=None):
    """Read geometry_msgs/msg/PoseStamped topics (e.g. a camera's object pose estimates).

    Args:
        path: rosbag2 directory (sqlite3 or mcap) or a .db3/.mcap file.
        topics: PoseStamped topic names, shape (k,); each must be in the bag with messages.
        nan_policy: "drop" or "raise" (see :func:`read_bag`).
        order_policy: "raise" or "sort" (see :func:`read_bag`).
        typestore: Types for bags without embedded definitions.

    Returns:
        ``(t0_ns, {topic: PoseSeries})``: every ``times`` array counts from ``t0_ns``, the
        earliest kept stamp over all topics.

    Raises:
        BagError: Missing bag or topic, wrong message type, NaN samples (``"raise"``),
            non-monotonic stamps (``"raise"``), a topic with no valid sample, poses in
            several frames on one topic or across topics, or topics that do not overlap in time.
    """
    topics = list(topics)
    if not topics or len(set(topics)) != len(topics):
        raise ValueError(f"topics must be distinct PoseStamped topic names, got {topics}")
    _check_arguments(nan_policy, order_policy, ())
    path = Path(path)
    with _open(path, typestore) as (reader, storage):
        info = _info(reader, path, storage)
        streams = {}
        for topic in topics:
            msgtype = _check_topic(info, topic, "object pose", (POSE_STAMPED,), path)
            streams[topic] = _Poses(topic, msgtype, f"{path} [{topic}]")
        _collect(reader, streams, path)
    selected = {topic: _select(stream, nan_policy, order_policy) for topic, stream in streams.items()}
    for topic, (order, stats) in selected.items():
        if len(order) == 0:
            raise BagError(f"{streams[topic].where}: no valid sample among {stats.messages} messages")
    t0_ns = min(int(np.array(streams[topic].stamps, dtype=np.int64)[order].min()) for topic, (order, _) in selected.items())
    series = {topic: _pose_series(streams[topic], *selected[topic], t0_ns) for topic in topics}
    _check_together(series, path)
    return t0_ns, series


def _check_together(series, path):
    """BagError unless the pose topics share one frame and overlap in time (one camera's view)."""
    frames = {topic: s.frame_id for topic, s in series.items() if s.frame_id}
    if len(set(frames.values())) > 1:
        listed = ", ".join(f"{topic} in '{frame}'" for topic, frame in frames.items())
        raise BagError(f"{path}: the pose topics are in different frames ({listed}); one camera pose cannot place them all")
    if max(s.times[0] for s in series.values()) > min(s.times[-1] for s in series.values()):
        spans = ", ".join(f"{topic} {s.times[0]:.3f}..{s.times[-1]:.3f} s" for topic, s in series.items())
        raise BagError(f"{path}: the pose topics do not overlap in time ({spans} from the earliest stamp): their clocks "
                       "disagree or they were recorded apart")


def read_robot_bag(path, config, *, without=(), **kwargs):
    """:func:`read_bag` with joints, topics and the command's joint order from a robot config.

    Args:
        path: The bag.
        config: RobotConfig (``load_robot_config``): ``joints``, ``controller_joints`` (the
            order of a Float64MultiArray command) and the ``topics:`` section.
        without: Configured streams not to read (e.g. ``("camera_pose",)``).
        **kwargs: ``required``, ``nan_policy``, ``order_policy``, ``typestore``.
    """
    if not config.joints:
        raise BagError(f"{config.path or 'robot config'}: robot.joints is empty; the bag reader maps joints by name")
    topics = replace(BagTopics.from_config(config), **{key: None for key in without})
    return read_bag(path, config.joints, topics=topics, command_joints=config.controller_joints, **kwargs)


# --- writing ----------------------------------------------------------------------------


def _check_storage(storage):
    if storage not in STORAGES:
        raise BagError(f"storage must be one of {STORAGES}, got {storage!r}")
    return storage


class BagWriter:
    """Streaming, atomic rosbag2 writer.

    Messages go to ``<parent>/.<name>.tmp-<id>/<name>``; :meth:`close` renames that bag to
    ``path``. :meth:`abort` (or an exception inside ``with``) deletes it.

    Args:
        path: Target bag directory (must not exist unless ``overwrite``).
        storage: "sqlite3" or "mcap".
        typestore: Message definitions and hashes (default: Humble + baxter_core_msgs).
        overwrite: Replace an existing bag at ``path`` on close.

    Raises:
        BagError: Unknown storage, or ``path`` exists and ``overwrite`` is false.
    """

    def __init__(self, path, storage="sqlite3", *, typestore=None, overwrite=False):
        self.path = Path(path)
        self.storage = _check_storage(storage)
        self.typestore = typestore or default_typestore()
        self.overwrite = overwrite
        if self.path.exists() and not overwrite:
            raise BagError(f"{self.path} already exists (pass overwrite=True to replace it)")
        self._tmp = self.path.parent / f".{self.path.name}.tmp-{uuid.uuid4().hex[:8]}"
        self._writer = None
        self._connections = {}
        self.message_count = 0

    @property
    def is_open(self):
        """Whether messages can be written."""
        return self._writer is not None

    def has_topic(self, topic):
        """Whether ``topic`` is declared."""
        return topic in self._connections

    def open(self):
        """Create the temporary bag (KeyboardInterrupt after a recorded Ctrl-C: nothing is created)."""
        check_interrupted()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir()
        self._writer = Writer(self._tmp / self.path.name, version=_BAG_VERSION, storage_plugin=_PLUGINS[self.storage])
        self._writer.open()
        return self

    def add_topic(self, topic, msgtype, qos=None, *, msgdef=None, rihs01=None):
        """Declare a topic (done implicitly by :meth:`write` for typestore messages).

        Args:
            topic: Topic name.
            msgtype: ``pkg/msg/Type``.
            qos: rosbags ``Qos`` or a list of them (offered profiles; default :data:`DEFAULT_QOS`).
            msgdef, rihs01: Definition and hash of a type the typestore does not know.
        """
        if topic in self._connections:
            known = self._connections[topic].msgtype
            if known != normalize_type_name(msgtype):
                raise BagError(f"{self.path}: topic {topic} already has type {known}, not {msgtype}")
            return
        if not self.is_open:
            raise BagError(f"{self.path}: writer is not open")
        profiles = [qos] if isinstance(qos, Qos) else list(qos or [DEFAULT_QOS])
        msgtype = normalize_type_name(msgtype)
        kwargs = {"msgdef": msgdef, "rihs01": rihs01} if msgdef is not None else {"typestore": self.typestore}
        try:
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, offered_qos_profiles=profiles, **kwargs
            )
        except KeyError:
            raise BagError(f"{self.path}: unknown message type {msgtype} for topic {topic}") from None

    def write(self, topic, msg, timestamp_ns, msgtype=None):
        """Write one message (a typestore message object, or CDR bytes of a declared topic).

        Args:
            topic: Topic name.
            msg: Message object or serialized CDR bytes.
            timestamp_ns: Receive time [ns].
            msgtype: Type name (default: the message's ``__msgtype__``).
        """
        if isinstance(msg, (bytes, bytearray, memoryview)):
            if topic not in self._connections:
                raise BagError(f"{self.path}: add_topic({topic!r}, ...) before writing serialized data")
            data = bytes(msg)
        else:
            msgtype = normalize_type_name(msgtype or msg.__msgtype__)
            self.add_topic(topic, msgtype)
            try:
                data = self.typestore.serialize_cdr(msg, msgtype)
            except Exception as err:  # generated serializers raise assorted errors on bad fields
                raise BagError(f"{self.path}: cannot serialize a {msgtype} for {topic}: {err}") from None
        self._writer.write(self._connections[topic], int(timestamp_ns), data)
        self.message_count += 1

    def close(self):
        """Finish the bag and move it to ``path``.

        Returns:
            The bag path.

        Raises:
            KeyboardInterrupt: Ctrl-C was recorded (:func:`diffsim_ros.outputs.check_interrupted`),
                even one a library swallowed: the recording is discarded.
        """
        if self._writer is None:
            raise BagError(f"{self.path}: writer is not open")
        writer, self._writer = self._writer, None
        try:
            writer.close()
            check_interrupted()
            self._install()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return self.path

    def _install(self):
        old = None
        if self.path.exists():
            if not self.overwrite:
                raise BagError(f"{self.path} appeared while recording; the recording is discarded")
            old = self._tmp.with_name(self._tmp.name + "-old")
            os.rename(self.path, old)
        os.rename(self._tmp / self.path.name, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self):
        """Discard everything written."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.abort()
            except Exception:  # the temporary directory is deleted below regardless
                pass
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self.open()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False


def write_bag(path, messages, *, storage="sqlite3", typestore=None, qos=None, overwrite=False):
    """Write messages to a new bag atomically.

    Args:
        path: Target bag directory.
        messages: Iterable of ``(topic, msg, timestamp_ns)``; ``msg`` a typestore message.
        storage: "sqlite3" or "mcap".
        typestore: Default Humble + baxter_core_msgs.
        qos: Optional mapping topic -> rosbags ``Qos`` (default reliable, volatile, depth 10).
        overwrite: Replace an existing bag.

    Returns:
        The bag path.

    Raises:
        BagError: ``path`` exists (without ``overwrite``), unknown storage or types. Nothing is
            left at ``path`` on error.
    """
    qos = dict(qos or {})
    with BagWriter(path, storage, typestore=typestore, overwrite=overwrite) as writer:
        for topic, msg, timestamp_ns in messages:
            if topic in qos and not writer.has_topic(topic):
                writer.add_topic(topic, msg.__msgtype__, qos[topic])
            writer.write(topic, msg, timestamp_ns)
    return writer.path
