"""Recorded robot streams: joint states, commanded torques and camera poses, in model joint order.

The common input of data preparation (:mod:`diffsim_ros.estimation.preparation`), filled by the
bag reader offline and by the streaming estimator's buffers online. :class:`PoseSeries` is also
the observations of object estimation (:mod:`diffsim_ros.estimation.objects`).
"""

import math
from dataclasses import dataclass, replace

import numpy as np

from diffsim_ros.estimation.data import DataError

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

    def notes(self):
        """One line per sample the reader dropped, reordered or restamped, e.g. ``"2 of 2000
        samples with NaN/inf dropped"`` ([] when none). A stream without any header stamp
        (Float64MultiArray commands) is stamped by its receive times by design: not noted."""
        restamped = 0 if self.stamp_from_receive == self.messages else self.stamp_from_receive
        kinds = ((self.dropped_nan, "with NaN/inf dropped"), (self.out_of_order, "out of order (sorted)"),
                 (self.dropped_duplicate, "with a repeated stamp dropped"),
                 (restamped, "without a header stamp (receive time used)"))
        return [f"{count} of {self.messages} samples {what}" for count, what in kinds if count]


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

    def between(self, start=-math.inf, end=math.inf):
        """The samples stamped in ``[start, end]`` [s] (``stats`` still counts the whole topic)."""
        keep = (self.times >= start) & (self.times <= end)
        return replace(self, stamps_ns=self.stamps_ns[keep], times=self.times[keep], positions=self.positions[keep],
                       velocities=None if self.velocities is None else self.velocities[keep],
                       efforts=None if self.efforts is None else self.efforts[keep])


@dataclass(frozen=True)
class PoseSeries:
    """Stamped poses of one tracked frame: a camera's estimates of a link or of an object.

    Checked and normalized on creation (DataError naming the problem): shapes, finite values,
    strictly increasing times, no zero quaternion. How many poses a use needs is the user's
    check (object estimation: :func:`diffsim_ros.estimation.objects.as_pose_series`).

    Attributes:
        times: Stamps [s], shape (T,), strictly increasing (from ``RobotStreams.t0_ns`` in a
            recording; the world frame's clock for object observations).
        position: Positions [m], shape (T, 3).
        orientation: Unit quaternions (w, x, y, z), shape (T, 4).
        frame_id: Header frame of the poses as read (the camera frame); "" when not read
            from messages (e.g. poses expressed in the base frame).
        stamps_ns: Stamps [ns], shape (T,) int64, or None when not read from messages.
        stats: StreamStats of the reading, or None.
    """

    times: np.ndarray
    position: np.ndarray
    orientation: np.ndarray
    frame_id: str = ""
    stamps_ns: np.ndarray | None = None
    stats: StreamStats | None = None

    def __post_init__(self):
        times = np.asarray(self.times, dtype=np.float64).reshape(-1)
        position = np.asarray(self.position, dtype=np.float64)
        orientation = np.asarray(self.orientation, dtype=np.float64)
        if position.shape != (times.size, 3) or orientation.shape != (times.size, 4):
            raise DataError(
                f"pose series needs times (T,), position (T, 3), orientation (T, 4); got "
                f"{times.shape}, {position.shape}, {orientation.shape}"
            )
        if not (np.isfinite(times).all() and np.isfinite(position).all() and np.isfinite(orientation).all()):
            raise DataError("pose series contains NaN or inf (drop those samples before estimation)")
        if np.any(np.diff(times) <= 0):
            raise DataError("pose stamps must be strictly increasing")
        norm = np.linalg.norm(orientation, axis=1, keepdims=True)
        if np.any(norm < 1e-9):
            raise DataError("pose series contains a zero quaternion")
        object.__setattr__(self, "times", times)
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "orientation", orientation / norm)

    def __len__(self):
        return self.times.size

    def between(self, start=-math.inf, end=math.inf):
        """The poses stamped in ``[start, end]`` [s] (e.g. before a collision, for staged fits)."""
        keep = (self.times >= start) & (self.times <= end)
        stamps_ns = None if self.stamps_ns is None else self.stamps_ns[keep]
        return replace(self, times=self.times[keep], position=self.position[keep], orientation=self.orientation[keep],
                       stamps_ns=stamps_ns)


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

    def between(self, start=-math.inf, end=math.inf):
        """The commands in effect during ``[start, end]`` [s]: those received in it and the last
        one before it (commands are held until the next)."""
        keep = (self.times >= start) & (self.times <= end)
        earlier = np.flatnonzero(self.times < start)
        if earlier.size and keep.any():
            keep[earlier[-1]] = True
        return replace(self, stamps_ns=self.stamps_ns[keep], times=self.times[keep], torques=self.torques[keep])


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

    def between(self, start=-math.inf, end=math.inf):
        """The recording's samples stamped in ``[start, end]`` [s since ``t0_ns``]: one segment
        of a longer recording (e.g. before a payload was changed).

        Raises:
            DataError: The window is empty or reversed, or holds no joint state (names the
                recording's span).
        """
        if not start < end:  # NaN too
            raise DataError(f"{self.source}: the time window needs start < end, got [{start:g}, {end:g}] s")
        joints = self.joint_states.between(start, end)
        if joints.times.size == 0:
            times = self.joint_states.times
            raise DataError(f"{self.source}: no joint state in [{start:g}, {end:g}] s; the recording spans "
                            f"[{times[0]:g}, {times[-1]:g}] s from its first joint state")
        poses = None if self.camera_poses is None else self.camera_poses.between(start, end)
        torques = None if self.commanded_torques is None else self.commanded_torques.between(start, end)
        return replace(self, source=f"{self.source} [{start:g}, {end:g}] s", joint_states=joints,
                       camera_poses=poses if poses is not None and len(poses) else None,
                       commanded_torques=torques if torques is not None and torques.times.size else None)
