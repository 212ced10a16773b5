"""Identification data: static poses, trajectories (rollout windows) and camera observations.

Containers hold plain float64 numpy arrays in model joint order; they are built from bags
by :mod:`diffsim_ros.io` or from a simulated plant, and validated on construction so that
bad data is reported where it enters, naming what is wrong.
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.interpolate import CubicSpline, PPoly

from diffsim_ros.vocabulary import HOLDS

__all__ = [
    "DataError",
    "FILTER_CHUNK",
    "HOLDS",
    "MIN_MOTION_SECONDS",
    "MIN_REST_POSES",
    "data_shortfall",
    "UndeterminedError",
    "StaticPoses",
    "TorqueSignal",
    "Trajectory",
    "CameraObservations",
    "Dataset",
    "static_poses_from_intervals",
]

FILTER_CHUNK = 4096
"""Stamps per evaluation of :meth:`TorqueSignal.filtered` (a 60-minute recording at 100 Hz has 360k)."""


class DataError(ValueError):
    """Identification data is missing, inconsistent or insufficient (the message says which)."""


class UndeterminedError(DataError):
    """The data are valid but determine none of the requested parameters (the message says why)."""


MIN_MOTION_SECONDS = 3.0
"""Motion [s] an estimate needs when there are too few rest poses (offline and online)."""
MIN_REST_POSES = 8
"""Rest poses an estimate needs when there is too little motion (offline and online)."""


def data_shortfall(motion_seconds, rest_poses, min_motion_seconds=MIN_MOTION_SECONDS, min_poses=MIN_REST_POSES):
    """What the data lack for an estimate, or None when there is enough.

    An estimate needs ``min_motion_seconds`` of usable motion or ``min_poses`` rest poses:
    below both, a fit follows the noise and its standard deviations understate its errors.

    Args:
        motion_seconds: Usable motion [s].
        rest_poses: Usable rest poses.
        min_motion_seconds: Motion needed without enough rest poses [s].
        min_poses: Rest poses needed without enough motion.

    Returns:
        None, or a sentence naming what there is and what is needed.
    """
    if motion_seconds >= min_motion_seconds or rest_poses >= min_poses:
        return None
    return (f"{motion_seconds:.1f} s of usable motion and {rest_poses} rest pose(s); an estimate needs at least "
            f"{min_motion_seconds:g} s of motion or {min_poses} rest poses")


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
        times: When each rest was held [s] (its interval's middle, in the recording's time
            base), shape (N,), or None when unknown.
    """

    q: np.ndarray
    effort: np.ndarray
    effort_std: np.ndarray
    times: np.ndarray | None = None

    def __post_init__(self):
        q = _array("static q", self.q, (np.shape(self.q)[-1],))
        n = q.shape[1]
        object.__setattr__(self, "q", q)
        object.__setattr__(self, "effort", _array("static effort", self.effort, (n,), q.shape[0]))
        std = np.broadcast_to(np.asarray(self.effort_std, dtype=np.float64), q.shape).copy()
        if not np.all(std > 0):
            raise DataError("static effort_std must be positive")
        object.__setattr__(self, "effort_std", std)
        if self.times is not None:
            object.__setattr__(self, "times", _array("static times", np.reshape(self.times, (-1, 1)), (1,), q.shape[0])[:, 0])

    def __len__(self):
        return self.q.shape[0]

    def subset(self, index):
        """Poses at ``index`` (array of ints or bool mask)."""
        return StaticPoses(self.q[index], self.effort[index], self.effort_std[index],
                           None if self.times is None else self.times[index])


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
    qs, means, stds, middles = [], [], [], []
    for start, stop in intervals:
        inside = (times >= start) & (times <= stop)
        if inside.sum() < 2:
            continue
        qs.append(q[inside].mean(0))
        means.append(effort[inside].mean(0))
        stds.append(effort[inside].std(0) / np.sqrt(inside.sum()))
        middles.append(0.5 * (start + stop))
    if not qs:
        raise DataError("no rest interval holds two or more samples")
    return StaticPoses(np.array(qs), np.array(means), np.maximum(np.array(stds), std_floor), np.array(middles))


def _shared_cells(grid_ns, edges_ns):
    """``(period, s)`` when the grid (T,) is uniform and the edges (C + 1,) repeat every ``s`` cells
    with its period, else None (see :meth:`TorqueSignal.filtered`)."""
    if len(grid_ns) < 2:
        return None
    period = int(grid_ns[1] - grid_ns[0])
    cells = int(np.searchsorted(edges_ns, edges_ns[0] + period))
    if period <= 0 or not 0 < cells < len(edges_ns) or np.any(np.diff(grid_ns) != period):
        return None
    return (period, cells) if np.all(edges_ns[cells:] - edges_ns[:-cells] == period) else None


@dataclass(frozen=True)
class TorqueSignal:
    """Joint torques as a function of time: samples and how they act in between.

    Attributes:
        stamps_ns: Sample stamps [ns], shape (C,), strictly increasing (any common clock).
        values: Torques [N·m], shape (C, n).
        hold: One of :data:`HOLDS`. A ``"zoh"`` sample acts from its stamp until the next one
            (and the last one onwards); interpolated signals are defined between the first and
            the last stamp only.
    """

    stamps_ns: np.ndarray
    values: np.ndarray
    hold: str = "zoh"

    def __post_init__(self):
        stamps = np.asarray(self.stamps_ns, dtype=np.int64)
        if stamps.ndim != 1 or stamps.size < 2:
            raise DataError(f"a torque signal needs two or more stamps, got shape {stamps.shape}")
        if np.any(np.diff(stamps) <= 0):
            raise DataError("torque signal stamps must be strictly increasing")
        if self.hold not in HOLDS:
            raise DataError(f"torque hold must be one of {HOLDS}, got {self.hold!r}")
        object.__setattr__(self, "stamps_ns", stamps)
        object.__setattr__(self, "values", _array("torque values", self.values, (np.shape(self.values)[-1],), stamps.size))
        object.__setattr__(self, "_poly", self._polynomial())
        object.__setattr__(self, "_integral", self._poly.antiderivative())

    def _seconds(self, stamps_ns):
        return (np.asarray(stamps_ns, dtype=np.int64) - self.stamps_ns[0]) * 1e-9

    def _polynomial(self):
        x = self._seconds(self.stamps_ns)
        if self.hold == "cubic" and x.size >= 4:
            return CubicSpline(x, self.values, axis=0, extrapolate=False)
        if self.hold == "zoh":
            # Breakpoints at the stamps (right-continuous: a stamp takes its own value) and an
            # open-ended last piece.
            x = np.append(x, x[-1] + 1e9)
            return PPoly(self.values[None, :, :], x, extrapolate=False)
        slopes = np.diff(self.values, axis=0) / np.diff(x)[:, None]
        return PPoly(np.stack([slopes, self.values[:-1]]), x, extrapolate=False)

    @property
    def end_ns(self):
        """Last stamp at which the signal is defined [ns] (the zoh signal holds beyond it)."""
        return self.stamps_ns[-1]

    def at(self, stamps_ns):
        """Torques at instants [N·m], shape (..., n); NaN where the signal is undefined."""
        return self._poly(self._seconds(stamps_ns))

    def means(self, start_ns, stop_ns):
        """Mean torque over each interval ``[start, stop)`` [N·m], shape (..., n) (exact integrals).

        Args:
            start_ns: Interval starts [ns], any shape.
            stop_ns: Interval ends [ns], same shape, each > its start.
        """
        a, b = self._seconds(start_ns), self._seconds(stop_ns)
        return (self._integral(b) - self._integral(a)) / (b - a)[..., None]

    def interval_means(self, edges_ns):
        """Mean torque between consecutive edges [N·m], shape (..., K, n): the same numbers as
        ``means(edges_ns[..., :-1], edges_ns[..., 1:])``, with the integral evaluated once per
        edge instead of twice.

        Args:
            edges_ns: Interval edges [ns], shape (..., K + 1), increasing along the last axis.
        """
        x = self._seconds(edges_ns)
        integral = self._integral(x)
        return (integral[..., 1:, :] - integral[..., :-1, :]) / (x[..., 1:] - x[..., :-1])[..., None]

    def filtered(self, grid_ns, edges_ns, weights):
        """Torques filtered by a kernel of cells, at grid stamps [N·m], shape (T, n): for every stamp
        ``sum_c weights[c] * mean over [grid + edges[c], grid + edges[c + 1])`` (NaN where undefined).

        On a uniform grid whose period the edges repeat with (``edges[c + s] = edges[c] + period``,
        a kernel of ``s`` cells per period), consecutive stamps share all but ``s`` edges: the
        integral is evaluated once per distinct edge, the very numbers of :meth:`interval_means`.

        Args:
            grid_ns: Stamps [ns], shape (T,), increasing.
            edges_ns: Cell edges [ns] relative to a stamp, shape (C + 1,), increasing.
            weights: Cell weights, shape (C,).
        """
        grid_ns, edges_ns = np.asarray(grid_ns, dtype=np.int64), np.asarray(edges_ns, dtype=np.int64)
        share = _shared_cells(grid_ns, edges_ns)
        if share is not None:
            period, cells = share
            later = edges_ns[-cells:][None, :] + period * np.arange(1, len(grid_ns))[:, None]
            union = self.interval_means(grid_ns[0] + np.concatenate([edges_ns, later.ravel()]))  # every distinct cell
        out = np.empty((len(grid_ns), self.values.shape[1]))
        for start in range(0, len(grid_ns), FILTER_CHUNK):  # (chunk, C, n) cell means at a time: bounded memory
            rows = np.arange(start, min(start + FILTER_CHUNK, len(grid_ns)))
            if share is None:
                means = self.interval_means(grid_ns[rows, None] + edges_ns[None, :])
            else:
                means = union[(cells * rows)[:, None] + np.arange(len(weights))[None, :]]
            out[rows] = np.einsum("tcn,c->tn", means, weights)
        return out


@dataclass(frozen=True)
class Trajectory:
    """A uniformly sampled motion with the torques that produced it.

    Attributes:
        dt: Sample period [s].
        q: Joint positions [rad], shape (T, n) (filtered if measured).
        qd: Joint velocities [rad/s], shape (T, n) (filtered derivative, never raw differences).
        tau: Motor torques at the samples [N·m], shape (T, n), as the instantaneous losses
            (inverse dynamics, simulator dynamics) use them: from bags, filtered by the same
            kernel as the accelerations.
        qdd: Joint accelerations [rad/s²], shape (T, n), or None (needed only by the
            inverse-dynamics loss).
        q_std: Position noise [rad] (scalar) used to weight rollout residuals.
        qd_std: Velocity noise [rad/s] (scalar).
        start_ns: Stamp of sample 0 [ns] on the clock of ``torque``.
        torque: :class:`TorqueSignal` of the torques between the samples (rollouts average it
            over every simulator step), or None: ``tau`` interpolated linearly.
        filter_span: Samples on each side that a sample's filtered ``qdd`` and ``tau`` depend
            on (0: instantaneous values).
        measured_efforts: Whether ``tau`` are measured efforts (offset from the joint torques by
            the model's ``effort_bias``, late by its ``effort_delay``) rather than commanded torques.
        tau_rate: Time derivative of ``tau`` [N·m/s], shape (T, n), filtered like it, or None
            (then no effort delay can be estimated from this trajectory).
    """

    dt: float
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    qdd: np.ndarray | None = None
    q_std: float = 1e-4
    qd_std: float = 1e-2
    start_ns: int = 0
    torque: TorqueSignal | None = None
    filter_span: int = 0
    measured_efforts: bool = False
    tau_rate: np.ndarray | None = None

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
        if self.tau_rate is not None:
            object.__setattr__(self, "tau_rate", _array("trajectory tau_rate", self.tau_rate, (n,), steps))
        if self.torque is None:
            object.__setattr__(self, "torque", TorqueSignal(self.stamps_ns, self.tau, "linear"))
        elif self.torque.values.shape[1] != n:
            raise DataError(f"torque signal has {self.torque.values.shape[1]} joints, the trajectory {n}")
        elif self.torque.stamps_ns[0] > self.start_ns or (self.torque.hold != "zoh" and self.torque.end_ns < self.stamps_ns[-1]):
            raise DataError("the torque signal does not cover the trajectory")

    def __len__(self):
        return self.q.shape[0]

    def slowest_speed(self):
        """Per sample and joint, the smallest |qd| [rad/s] within ``filter_span`` samples, (T, n)."""
        speed = np.abs(self.qd)
        span = int(self.filter_span)
        if span == 0:
            return speed
        padded = np.pad(speed, ((span, span), (0, 0)), mode="edge")
        return np.lib.stride_tricks.sliding_window_view(padded, 2 * span + 1, axis=0).min(-1)

    @property
    def period_ns(self):
        """Sample period [ns]."""
        return int(round(self.dt * 1e9))

    @property
    def stamps_ns(self):
        """Sample stamps [ns], shape (T,)."""
        return int(self.start_ns) + self.period_ns * np.arange(len(self), dtype=np.int64)

    def windows(self, horizon, stride=None, steps_per_sample=1):
        """Rollout windows: start states, torques and the measured states that follow.

        Args:
            horizon: Samples per window K (1 = one-step loss, >1 = multi-step recurrent loss).
            stride: Samples between window starts (default ``horizon``).
            steps_per_sample: Simulator steps m per sample period: the simulator runs at
                ``dt / m`` and each of its steps applies the mean torque over that step.

        Returns:
            Dict with ``q0``, ``qd0`` (W, n), ``tau`` (W, K * m, n), ``q`` and ``qd``
            (W, K, n), and ``start`` (W,) sample index of each window.
        """
        horizon, m = int(horizon), int(steps_per_sample)
        stride = horizon if stride is None else int(stride)
        if m < 1:
            raise DataError(f"steps_per_sample must be >= 1, got {steps_per_sample}")
        starts = np.arange(0, len(self) - horizon, stride)
        if starts.size == 0:
            raise DataError(f"trajectory of {len(self)} samples is too short for horizon {horizon}")
        steps = starts[:, None] + np.arange(horizon)[None, :]
        edges = self.stamps_ns[steps][..., None] + (self.period_ns * np.arange(m + 1)) // m  # (W, K, m + 1)
        tau = self.torque.interval_means(edges).reshape(len(starts), horizon * m, -1)
        return {
            "q0": self.q[starts],
            "qd0": self.qd[starts],
            "tau": tau,
            "q": self.q[steps + 1],
            "qd": self.qd[steps + 1],
            "start": starts,
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
