"""Identification data: static poses, trajectories (rollout windows) and camera observations.

Containers hold plain float64 numpy arrays in model joint order; they are built from bags
by :mod:`diffsim_ros.io` or from a simulated plant, and validated on construction so that
bad data is reported where it enters, naming what is wrong.
"""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["DataError", "StaticPoses", "Trajectory", "CameraObservations", "Dataset", "static_poses_from_intervals"]


class DataError(ValueError):
    """Identification data is missing, inconsistent or insufficient (the message says which)."""


def _array(name, value, shape_tail, rows=None):
    value = np.asarray(value, dtype=np.float64)
    if value.ndim != 1 + len(shape_tail) or value.shape[1:] != tuple(shape_tail):
        raise DataError(f"{name} must have shape (N, {', '.join(map(str, shape_tail))}), got {value.shape}")
    if rows is not None and value.shape[0] != rows:
        raise DataError(f"{name} has {value.shape[0]} rows, expected {rows}")
    if not np.all(np.isfinite(value)):
        raise DataError(f"{name} contains NaN or inf (drop those samples before identification)")
    return value


@dataclass(frozen=True)
class StaticPoses:
    """Poses where the arm is at rest, so the motor efforts balance gravity and springs.

    Attributes:
        q: Joint positions [rad], shape (N, n).
        effort: Measured joint efforts [N·m], shape (N, n).
        effort_std: Standard deviation of each effort [N·m], shape (N, n) (e.g. the sample
            standard deviation over a static segment divided by sqrt(samples)).
    """

    q: np.ndarray
    effort: np.ndarray
    effort_std: np.ndarray

    def __post_init__(self):
        q = _array("static q", self.q, (np.shape(self.q)[-1],))
        n = q.shape[1]
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "effort", _array("static effort", self.effort, (n,), q.shape[0]))
        std = np.broadcast_to(np.asarray(self.effort_std, dtype=np.float64), q.shape).copy()
        if not np.all(std > 0):
            raise DataError("static effort_std must be positive")
        object.__setattr__(self, "effort_std", std)

    def __len__(self):
        return self.q.shape[0]

    def subset(self, index):
        """Poses at ``index`` (array of ints or bool mask)."""
        return StaticPoses(self.q[index], self.effort[index], self.effort_std[index])


def static_poses_from_intervals(times, q, effort, intervals, std_floor=1e-3):
    """Average joint positions and efforts over rest intervals.

    Args:
        times: Sample times [s], shape (T,).
        q: Joint positions [rad], shape (T, n).
        effort: Joint efforts [N·m], shape (T, n).
        intervals: Iterable of ``(t_start, t_stop)`` [s] where the arm rests.
        std_floor: Floor of each average's standard deviation [N·m].

    Returns:
        StaticPoses with one pose per interval holding at least two samples; each effort's
        standard deviation is the sample standard deviation over sqrt(samples).
    """
    times, q, effort = (np.asarray(a, dtype=np.float64) for a in (times, q, effort))
    qs, means, stds = [], [], []
    for start, stop in intervals:
        inside = (times >= start) & (times <= stop)
        if inside.sum() < 2:
            continue
        qs.append(q[inside].mean(0))
        means.append(effort[inside].mean(0))
        stds.append(effort[inside].std(0) / np.sqrt(inside.sum()))
    if not qs:
        raise DataError("no rest interval holds two or more samples")
    return StaticPoses(np.array(qs), np.array(means), np.maximum(np.array(stds), std_floor))


@dataclass(frozen=True)
class Trajectory:
    """A uniformly sampled motion with the torques that produced it.

    Attributes:
        dt: Sample period [s].
        q: Joint positions [rad], shape (T, n) (filtered if measured).
        qd: Joint velocities [rad/s], shape (T, n) (filtered derivative, never raw differences).
        tau: Motor torques at the sample times [N·m], shape (T, n); rollouts hold the
            trapezoidal mean of consecutive samples over each sample period.
        qdd: Joint accelerations [rad/s²], shape (T, n), or None (needed only by the
            inverse-dynamics loss).
        q_std: Position noise [rad] (scalar) used to weight rollout residuals.
        qd_std: Velocity noise [rad/s] (scalar).
    """

    dt: float
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    qdd: np.ndarray | None = None
    q_std: float = 1e-4
    qd_std: float = 1e-2

    def __post_init__(self):
        if not self.dt > 0:
            raise DataError(f"trajectory dt must be positive, got {self.dt}")
        q = _array("trajectory q", self.q, (np.shape(self.q)[-1],))
        n, steps = q.shape[1], q.shape[0]
        if steps < 2:
            raise DataError("a trajectory needs at least two samples")
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "qd", _array("trajectory qd", self.qd, (n,), steps))
        object.__setattr__(self, "tau", _array("trajectory tau", self.tau, (n,), steps))
        if self.qdd is not None:
            object.__setattr__(self, "qdd", _array("trajectory qdd", self.qdd, (n,), steps))

    def __len__(self):
        return self.q.shape[0]

    def windows(self, horizon, stride=None):
        """Rollout windows: start states, torques and the measured states that follow.

        Args:
            horizon: Steps per window K (1 = one-step loss, >1 = multi-step recurrent loss).
            stride: Samples between window starts (default ``horizon``).

        Returns:
            Dict with ``q0``, ``qd0`` (W, n), ``tau`` (W, K, n) (mean torque of each period),
            ``q`` and ``qd`` (W, K, n).
        """
        horizon = int(horizon)
        stride = horizon if stride is None else int(stride)
        starts = np.arange(0, len(self) - horizon, stride)
        if starts.size == 0:
            raise DataError(f"trajectory of {len(self)} samples is too short for horizon {horizon}")
        steps = starts[:, None] + np.arange(horizon)[None, :]
        return {
            "q0": self.q[starts],
            "qd0": self.qd[starts],
            "tau": 0.5 * (self.tau[steps] + self.tau[steps + 1]),
            "q": self.q[steps + 1],
            "qd": self.qd[steps + 1],
        }


@dataclass(frozen=True)
class CameraObservations:
    """Poses of a tracked link measured by a camera whose own pose is unknown.

    Attributes:
        frame: Tracked URDF link.
        q: Joint positions at the camera stamps [rad], shape (N, n).
        position: Link position in the camera frame [m], shape (N, 3).
        quaternion: Link orientation in the camera frame, (w, x, y, z), shape (N, 4).
        position_std: Position noise [m].
        rotation_std: Rotation noise [rad].
    """

    frame: str
    q: np.ndarray
    position: np.ndarray
    quaternion: np.ndarray
    position_std: float = 1e-3
    rotation_std: float = np.radians(0.2)

    def __post_init__(self):
        q = _array("camera q", self.q, (np.shape(self.q)[-1],))
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "position", _array("camera position", self.position, (3,), q.shape[0]))
        quat = _array("camera quaternion", self.quaternion, (4,), q.shape[0])
        norms = np.linalg.norm(quat, axis=1)
        if np.any(np.abs(norms - 1.0) > 1e-3):
            raise DataError("camera quaternions must be unit quaternions")
        object.__setattr__(self, "quaternion", quat / norms[:, None])

    def __len__(self):
        return self.q.shape[0]

    def subsample(self, count):
        """At most ``count`` observations, evenly spread over the recording."""
        if len(self) <= count:
            return self
        index = np.unique(np.linspace(0, len(self) - 1, int(count)).round().astype(int))
        return CameraObservations(
            self.frame, self.q[index], self.position[index], self.quaternion[index], self.position_std, self.rotation_std
        )


@dataclass(frozen=True)
class Dataset:
    """Everything one identification run uses; any part may be absent."""

    static: StaticPoses | None = None
    trajectories: tuple = field(default_factory=tuple)
    camera: CameraObservations | None = None

    def check_joints(self, n):
        """Raise DataError unless every part has n joints."""
        parts = [("static poses", self.static), ("camera observations", self.camera)]
        parts += [(f"trajectory {i}", t) for i, t in enumerate(self.trajectories)]
        for name, part in parts:
            if part is not None and part.q.shape[1] != n:
                raise DataError(f"{name} have {part.q.shape[1]} joints but the model has {n}")
