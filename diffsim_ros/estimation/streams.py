"""Recorded robot streams: joint states, commanded torques and camera poses, in model joint order.

The common input of data preparation (:mod:`diffsim_ros.estimation.preparation`), filled by the
bag reader offline and by the streaming estimator's buffers online.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["JointStateSeries", "PoseSeries", "RobotStreams", "StreamStats", "TorqueSeries"]


@dataclass(frozen=True)
class StreamStats:
    """What happened to one topic's messages while reading.

    Attributes:
        topic: Topic name.
        msgtype: Message type in the bag.
        messages: Messages on the topic.
        kept: Samples returned.
        dropped_nan: Samples dropped for NaN/inf values (mapped joints only).
        dropped_duplicate: Samples dropped for a repeated stamp (``order_policy="sort"``).
        out_of_order: Samples received after a later-stamped one (put in order by
            ``order_policy="sort"``).
        skipped: Messages that do not belong to the stream (no model joint; non-torque mode).
        stamp_from_receive: Samples whose zero header stamp was replaced by the receive time.
        sorted: Whether stamps had to be sorted.
    """

    topic: str
    msgtype: str
    messages: int
    kept: int
    dropped_nan: int = 0
    dropped_duplicate: int = 0
    out_of_order: int = 0
    skipped: int = 0
    stamp_from_receive: int = 0
    sorted: bool = False


@dataclass(frozen=True)
class JointStateSeries:
    """Joint states in model joint order.

    Attributes:
        joint_names: Model joint names, shape (n,).
        stamps_ns: Stamps [ns], shape (N,) int64, strictly increasing.
        times: Seconds since the bag's reference time ``RobotStreams.t0_ns``, shape (N,).
        positions: [rad or m], shape (N, n).
        velocities: [rad/s], shape (N, n), or None when not in every sample.
        efforts: [N·m], shape (N, n), or None when not in every sample.
        stats: StreamStats.
    """

    joint_names: tuple
    stamps_ns: np.ndarray
    times: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray | None
    efforts: np.ndarray | None
    stats: StreamStats


@dataclass(frozen=True)
class PoseSeries:
    """Stamped poses.

    Attributes:
        frame_id: Header frame of the poses (the camera frame).
        stamps_ns: [ns], shape (M,). times: [s] since ``RobotStreams.t0_ns``, shape (M,).
        positions: [m], shape (M, 3).
        quaternions: Unit quaternions (w, x, y, z), shape (M, 4).
        stats: StreamStats.
    """

    frame_id: str
    stamps_ns: np.ndarray
    times: np.ndarray
    positions: np.ndarray
    quaternions: np.ndarray
    stats: StreamStats


@dataclass(frozen=True)
class TorqueSeries:
    """Commanded torques in model joint order (receive times: the messages have no header).

    Attributes:
        stamps_ns: [ns], shape (K,). times: [s] since ``RobotStreams.t0_ns``, shape (K,).
        torques: [N·m], shape (K, n).
        stats: StreamStats.
    """

    stamps_ns: np.ndarray
    times: np.ndarray
    torques: np.ndarray
    stats: StreamStats


@dataclass(frozen=True)
class RobotStreams:
    """The streams of one recording (or of one online window).

    Attributes:
        source: What the streams come from, for messages (a bag path, "online window").
        t0_ns: Reference time [ns] of every ``times`` array.
        joint_states: JointStateSeries.
        camera_poses: PoseSeries or None.
        commanded_torques: TorqueSeries or None.
    """

    source: str
    t0_ns: int
    joint_states: JointStateSeries
    camera_poses: PoseSeries | None = None
    commanded_torques: TorqueSeries | None = None
