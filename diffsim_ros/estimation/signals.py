"""Time-series tools for recorded robot data: multi-rate alignment, filtered derivatives, static segments.

Velocities and accelerations come only from Savitzky–Golay filters (local polynomial fits),
never from raw finite differences of noisy positions. Streams are cut at gaps (dropped
samples), and non-uniform sampling is resampled onto a uniform grid before filtering.
Invalid outputs are NaN with ``valid`` masks; nothing is silently extrapolated.
"""

from dataclasses import dataclass

import numpy as np
from scipy.signal import savgol_coeffs, savgol_filter

__all__ = [
    "FilteredSignal",
    "acceleration_kernel",
    "window_samples",
    "Segment",
    "check_increasing",
    "contiguous_runs",
    "detect_static_segments",
    "filtered_derivatives",
    "interpolate",
    "interpolate_quaternions",
    "near_limits",
    "nearest",
    "segments_away_from",
]

# A sampling interval larger than this many median intervals is a gap: filters do not cross it.
DEFAULT_GAP_FACTOR = 2.5
# Relative interval jitter above which a segment is resampled to a uniform grid before filtering.
_UNIFORM_JITTER = 0.05
# Below this angle [rad] slerp falls back to normalized linear interpolation.
_SLERP_SMALL_ANGLE = 1e-6


def check_increasing(times, what="times"):
    """Raise ValueError naming ``what`` and the first offending index unless strictly increasing."""
    times = np.asarray(times, dtype=np.float64)
    if times.ndim != 1:
        raise ValueError(f"{what}: expected shape (N,), got {times.shape}")
    bad = np.flatnonzero(np.diff(times) <= 0)
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"{what}: not strictly increasing at index {i + 1} ({times[i + 1]!r} after {times[i]!r})")


def _brackets(times, query, max_gap):
    """Left indices, weights and validity of linear interpolation at ``query``."""
    times = np.asarray(times, dtype=np.float64)
    query = np.asarray(query, dtype=np.float64)
    check_increasing(times)
    if len(times) < 2:
        raise ValueError(f"interpolation needs at least 2 samples, got {len(times)}")
    left = np.clip(np.searchsorted(times, query, side="right") - 1, 0, len(times) - 2)
    span = times[left + 1] - times[left]
    weight = np.clip((query - times[left]) / span, 0.0, 1.0)
    valid = (query >= times[0]) & (query <= times[-1])
    if max_gap is not None:
        valid &= (span <= max_gap) | (weight == 0.0) | (weight == 1.0)  # a query on a sample is always valid
    return left, weight, valid


def interpolate(times, values, query, *, max_gap=None):
    """Linear interpolation of a sampled signal at query times.

    Args:
        times: Sample times [s], shape (N,), strictly increasing.
        values: Samples, shape (N, ...).
        query: Query times [s], shape (M,).
        max_gap: Queries inside a sampling interval longer than this [s] are invalid.

    Returns:
        (values (M, ...) with NaN where invalid, valid (M,) bool). Queries outside
        [times[0], times[-1]] are invalid (no extrapolation).
    """
    values = np.asarray(values, dtype=np.float64)
    left, weight, valid = _brackets(times, query, max_gap)
    w = weight.reshape((-1,) + (1,) * (values.ndim - 1))
    out = (1.0 - w) * values[left] + w * values[left + 1]
    out[~valid] = np.nan
    return out, valid


def interpolate_quaternions(times, quaternions, query, *, max_gap=None):
    """Spherical linear interpolation of unit quaternions (w, x, y, z) at query times.

    Args:
        times: Sample times [s], shape (N,).
        quaternions: Unit quaternions, shape (N, 4); q and -q are treated as the same rotation.
        query: Query times [s], shape (M,).
        max_gap: As in :func:`interpolate`.

    Returns:
        (quaternions (M, 4), NaN where invalid, valid (M,) bool).
    """
    q = np.asarray(quaternions, dtype=np.float64)
    left, weight, valid = _brackets(times, query, max_gap)
    q0, q1 = q[left], q[left + 1]
    dot = np.sum(q0 * q1, axis=-1)
    q1 = np.where(dot[:, None] < 0.0, -q1, q1)
    dot = np.clip(np.abs(dot), -1.0, 1.0)
    angle = np.arccos(dot)
    small = angle < _SLERP_SMALL_ANGLE
    sin = np.where(small, 1.0, np.sin(angle))
    w0 = np.where(small, 1.0 - weight, np.sin((1.0 - weight) * angle) / sin)
    w1 = np.where(small, weight, np.sin(weight * angle) / sin)
    out = w0[:, None] * q0 + w1[:, None] * q1
    out /= np.linalg.norm(out, axis=-1, keepdims=True)
    out[~valid] = np.nan
    return out, valid


def nearest(times, query, *, tolerance):
    """Index of the nearest sample to each query time.

    Args:
        times: Sample times [s], shape (N,), strictly increasing.
        query: Query times [s], shape (M,).
        tolerance: Matches farther than this [s] are invalid.

    Returns:
        (indices (M,) int, valid (M,) bool).
    """
    times = np.asarray(times, dtype=np.float64)
    query = np.asarray(query, dtype=np.float64)
    check_increasing(times)
    right = np.clip(np.searchsorted(times, query), 0, len(times) - 1)
    left = np.clip(right - 1, 0, len(times) - 1)
    pick_left = np.abs(query - times[left]) <= np.abs(times[right] - query)
    index = np.where(pick_left, left, right)
    return index, np.abs(times[index] - query) <= tolerance


def contiguous_runs(mask):
    """(start, stop) index pairs (stop exclusive) of the runs of True in a 1-D bool mask."""
    mask = np.asarray(mask, dtype=bool)
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


@dataclass(frozen=True)
class FilteredSignal:
    """Savitzky–Golay smoothed positions and derivatives at the original sample times.

    Attributes:
        positions: Smoothed positions, shape (N, n).
        velocities: First derivative [unit/s], shape (N, n).
        accelerations: Second derivative [unit/s²], shape (N, n).
        valid: Samples in segments long enough for the filter window, shape (N,) bool; the
            other rows are NaN.
    """

    positions: np.ndarray
    velocities: np.ndarray
    accelerations: np.ndarray
    valid: np.ndarray


def window_samples(window, dt, polyorder):
    """Odd Savitzky-Golay window length [samples] for a window [s] at period dt [s]."""
    samples = max(int(round(window / dt)), polyorder + 2)
    return samples if samples % 2 else samples + 1


def acceleration_kernel(length, polyorder, dt, subdivisions=10):
    """The Peano kernel of the Savitzky-Golay acceleration: ``qdd_sg(t) = int K(s) qdd(t + s) ds``.

    The centred filter's second derivative is exact on polynomials up to ``polyorder``, so
    (Peano) it is a weighted mean of the true acceleration over the window, with weights
    ``K(s) = sum_j c_j (j dt - s)_+``. Filtering torques with the same K makes them
    consistent with the filtered accelerations ("parallel filtering"): torque steps, lags and
    fast components the positions cannot resolve then bias neither side.

    Args:
        length: Window length [samples] (odd).
        polyorder: Polynomial order.
        dt: Sample period [s].
        subdivisions: Kernel cells per sample period.

    Returns:
        ``(edges (C + 1,) [s] relative to the centre, weights (C,))``, weights summing to 1.
    """
    half = length // 2
    coeffs = savgol_coeffs(length, polyorder, deriv=2, delta=dt, use="dot")
    offsets = np.arange(-half, half + 1) * dt
    edges = np.linspace(-half * dt, half * dt, 2 * half * subdivisions + 1)
    middle = 0.5 * (edges[:-1] + edges[1:])
    kernel = np.maximum(offsets[None, :] - middle[:, None], 0.0) @ coeffs
    weights = kernel * np.diff(edges)
    return edges, weights / weights.sum()


def _filter_segment(t, q, window, polyorder):
    """Smoothed q, dq/dt, d²q/dt² of one gap-free segment, or None when it is too short."""
    dt = float(np.median(np.diff(t)))
    length = window_samples(window, dt, polyorder)
    uniform = np.max(np.abs(np.diff(t) - dt)) <= _UNIFORM_JITTER * dt
    if uniform:
        grid, samples, step = t, q, (t[-1] - t[0]) / (len(t) - 1)
    else:
        count = int(round((t[-1] - t[0]) / dt)) + 1
        grid = np.linspace(t[0], t[-1], count)
        samples, step = interpolate(t, q, grid)[0], grid[1] - grid[0]
    if len(grid) < length:
        return None
    out = [savgol_filter(samples, length, polyorder, deriv=d, delta=step, axis=0, mode="interp") for d in range(3)]
    if not uniform:
        out = [interpolate(grid, values, t)[0] for values in out]
    return out


def filtered_derivatives(times, positions, *, window=0.1, polyorder=3, gap_factor=DEFAULT_GAP_FACTOR):
    """Smoothed positions, velocities and accelerations by Savitzky–Golay filtering.

    Args:
        times: Sample times [s], shape (N,), strictly increasing.
        positions: Samples, shape (N, n) (or (N,)).
        window: Filter window [s]; rounded to an odd number of samples ≥ polyorder + 2.
        polyorder: Local polynomial order (≥ 2 so that accelerations are meaningful).
        gap_factor: Intervals longer than this many median intervals split the signal.

    Returns:
        FilteredSignal; segments shorter than the window are NaN and invalid.

    Raises:
        ValueError: Times not strictly increasing, shapes inconsistent, polyorder < 2.
    """
    times = np.asarray(times, dtype=np.float64)
    q = np.asarray(positions, dtype=np.float64)
    squeeze = q.ndim == 1
    q = q.reshape(len(q), -1)
    check_increasing(times)
    if len(times) != len(q):
        raise ValueError(f"times has {len(times)} samples, positions {len(q)}")
    if polyorder < 2:
        raise ValueError(f"polyorder must be >= 2 for accelerations, got {polyorder}")
    out = [np.full_like(q, np.nan) for _ in range(3)]
    valid = np.zeros(len(times), dtype=bool)
    if len(times) >= 2:
        dt = np.diff(times)
        cuts = np.flatnonzero(dt > gap_factor * np.median(dt)) + 1
        for start, stop in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(times)]])):
            if stop - start < polyorder + 2:
                continue
            result = _filter_segment(times[start:stop], q[start:stop], window, polyorder)
            if result is not None:
                for target, values in zip(out, result):
                    target[start:stop] = values
                valid[start:stop] = True
    if squeeze:
        out = [values[:, 0] for values in out]
    return FilteredSignal(out[0], out[1], out[2], valid)


@dataclass(frozen=True)
class Segment:
    """A time interval of a sampled signal.

    Attributes:
        start: First sample index.
        stop: One past the last sample index.
        t_start: Time of the first sample [s].
        t_stop: Time of the last sample [s].
    """

    start: int
    stop: int
    t_start: float
    t_stop: float

    @property
    def duration(self):
        """t_stop - t_start [s]."""
        return self.t_stop - self.t_start

    def mean(self, values):
        """Mean of ``values[start:stop]`` over samples, shape values.shape[1:]."""
        return np.mean(np.asarray(values)[self.start : self.stop], axis=0)


def detect_static_segments(times, positions, *, velocity_tolerance=0.01, min_duration=0.5, window=0.1, polyorder=3):
    """Intervals where every joint is at rest, from filtered velocities.

    Segment edges are trimmed by half the filter window, where the filter still sees motion.

    Args:
        times: Sample times [s], shape (N,).
        positions: Joint positions, shape (N, n).
        velocity_tolerance: Max |filtered velocity| of every joint at rest [unit/s].
        min_duration: Shortest segment kept [s] (after trimming).
        window: Savitzky–Golay window [s].
        polyorder: Savitzky–Golay order.

    Returns:
        list[Segment] in time order.
    """
    times = np.asarray(times, dtype=np.float64)
    signal = filtered_derivatives(times, positions, window=window, polyorder=polyorder)
    velocities = signal.velocities.reshape(len(times), -1)
    at_rest = signal.valid & np.all(np.abs(velocities) < velocity_tolerance, axis=1)
    segments = []
    for start, stop in contiguous_runs(at_rest):
        inner = np.flatnonzero(
            (times[start:stop] >= times[start] + window / 2) & (times[start:stop] <= times[stop - 1] - window / 2)
        )
        if not len(inner):
            continue
        first, last = start + int(inner[0]), start + int(inner[-1])
        if times[last] - times[first] >= min_duration:
            segments.append(Segment(first, last + 1, float(times[first]), float(times[last])))
    return segments


def near_limits(positions, lower, upper, margin):
    """Samples with any joint within ``margin`` of a position limit, mask (N,).

    A robot (or MuJoCo) at a limit feels the limit's torque, which no joint-state or effort
    message reports: such samples do not follow the joint-space model.

    Args:
        positions: Joint positions [rad or m], shape (N, n).
        lower, upper: Position limits, shape (n,) (infinite: none).
        margin: Distance from a limit that counts as at it [rad or m].
    """
    q = np.asarray(positions, dtype=float)
    return np.any((q <= np.asarray(lower) + margin) | (q >= np.asarray(upper) - margin), axis=-1)


def segments_away_from(segments, times, mask):
    """The segments that contain no sample flagged by ``mask`` (N,) at ``times`` (N,) [s]."""
    flagged = np.asarray(times)[np.asarray(mask, dtype=bool)]
    return [s for s in segments if not np.any((flagged >= s.t_start) & (flagged <= s.t_stop))]
