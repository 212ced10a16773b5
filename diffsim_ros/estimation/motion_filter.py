"""Joint states filtered as they arrive: the offline motion preparation, with bounded work per sample.

The same signal processing as :func:`~diffsim_ros.estimation.preparation.prepare_dataset`'s
trajectories, done incrementally: positions on a uniform integer-nanosecond grid (linear
interpolation of the stamps, gaps not crossed), a centred Savitzky-Golay fit of
``trajectory_polyorder`` over ``trajectory_filter_window`` for q, qd, qdd, the torques as the
robot applied them (commanded and held, or measured efforts) filtered by the Peano kernel of
the acceleration filter (:func:`~diffsim_ros.estimation.signals.acceleration_kernel`), samples
near a joint limit or without a commanded torque in force left out. A grid sample is emitted
once the samples its window needs have arrived: the filter's latency is half a window (and a
window more when the slowest speed within the window is wanted, for Coulomb friction).

How commanded torques act between their samples (held, or samples of a faster controller) is
read once from the first ``decide_seconds`` of data by the offline rule
(:func:`~diffsim_ros.estimation.preparation.torque_reading`); until then nothing is emitted.
"""

import collections
from dataclasses import dataclass

import numpy as np
from scipy.signal import savgol_coeffs

from diffsim_ros.estimation.data import DataError, TorqueSignal
from diffsim_ros.estimation.preparation import torque_reading
from diffsim_ros.estimation.signals import DEFAULT_GAP_FACTOR, acceleration_kernel, interpolate, near_limits, window_samples
from diffsim_ros.estimation.streams import JointStateSeries, RobotStreams, StreamStats, TorqueSeries

__all__ = ["MotionChunk", "StreamingMotionFilter"]

_MIN_PERIOD_SAMPLES = 10  # joint states that fix the grid's period


@dataclass(frozen=True)
class MotionChunk:
    """Filtered samples, consecutive on the grid (some may be left out).

    Attributes:
        stamps_ns: Grid stamps [ns] (the inputs' clock), shape (K,).
        q, qd, qdd: Filtered positions [rad], velocities [rad/s], accelerations [rad/s²], (K, n).
        tau: Applied torques filtered alike [N·m], (K, n) (measured efforts as measured: their
            bias is the caller's).
        slowest: Smallest |qd| [rad/s] within the filter span of every sample, (K, n).
        measured_efforts: Whether ``tau`` are measured efforts.
        index: Grid index of every sample, (K,) (consecutive samples differ by 1).
        filter_span: Samples on each side a sample's values depend on.
    """

    stamps_ns: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    slowest: np.ndarray
    measured_efforts: bool
    index: np.ndarray
    filter_span: int

    def __len__(self):
        return len(self.stamps_ns)


class StreamingMotionFilter:
    """Incremental trajectory preparation (module docstring).

    Args:
        options: :class:`~diffsim_ros.estimation.preparation.DatasetOptions` (as offline).
        joint_names: Model joint names (for the decision's streams).
        limits: ``(lower, upper)`` joint limits (n,) or None.
        slowest: Also compute the slowest speed within each sample's span (Coulomb friction).
        decide_seconds: Joint-state time [s] read before the torques' hold is decided.
    """

    def __init__(self, options, joint_names, limits=None, slowest=False, decide_seconds=3.0):
        self.options, self.joint_names, self.limits = options, tuple(joint_names), limits
        self._slowest, self._decide_ns = bool(slowest), int(decide_seconds * 1e9)
        self._joints = collections.deque()  # (stamp_ns, q, effort or None)
        self._commands = collections.deque()  # (stamp_ns, tau)
        self.period_ns = None
        self.reading = None  # (source, hold) once decided
        self._origin_ns = None
        self._next = None  # next grid index to emit

    def add_joint_state(self, stamp_ns, q, effort=None):
        """A joint-state sample (stamps strictly increasing; the caller drops others)."""
        self._joints.append((int(stamp_ns), np.asarray(q, float), None if effort is None else np.asarray(effort, float)))

    def add_command(self, stamp_ns, tau):
        """A commanded torque [N·m], in force from ``stamp_ns`` on."""
        self._commands.append((int(stamp_ns), np.asarray(tau, float)))

    # ------------------------------------------------------------------ set-up
    def _streams(self):
        joints = list(self._joints)
        stamps = np.array([s[0] for s in joints], dtype=np.int64)
        efforts = np.array([s[2] for s in joints]) if all(s[2] is not None for s in joints) else None
        stats = lambda n, what: StreamStats(what, what, n, n)  # noqa: E731
        js = JointStateSeries(self.joint_names, stamps, (stamps - stamps[0]) * 1e-9, np.array([s[1] for s in joints]),
                              None, efforts, stats(len(joints), "joint_states"))
        torques = None
        if len(self._commands) >= 2:
            c = np.array([s[0] for s in self._commands], dtype=np.int64)
            torques = TorqueSeries(c, (c - stamps[0]) * 1e-9, np.array([s[1] for s in self._commands]),
                                   stats(len(c), "commanded_torques"))
        return RobotStreams("online stream", int(stamps[0]), js, None, torques)

    def _set_up(self):
        """Fix the grid and decide how torques act, once enough joint states arrived; True when set."""
        if self.reading is not None:
            return True
        if len(self._joints) < _MIN_PERIOD_SAMPLES or self._joints[-1][0] - self._joints[0][0] < self._decide_ns:
            return False
        stamps = np.array([s[0] for s in self._joints], dtype=np.int64)
        diffs = np.diff(stamps)
        median = np.median(diffs)
        self.period_ns = int(np.round(diffs[diffs < 1.5 * median].mean()))
        self.reading = torque_reading(self._streams(), self.options)  # DataError: no torques at all
        self._origin_ns = int(stamps[0])
        self._next = self._span() + self._reach()
        self._filters = self._coefficients()
        return True

    def _coefficients(self):
        """Savitzky-Golay coefficients of q, qd, qdd (3, L) and the torque kernel (edges [ns], weights), as offline."""
        length, dt, order = 2 * self._span() + 1, self.period_ns * 1e-9, self.options.trajectory_polyorder
        coefficients = np.stack([savgol_coeffs(length, order, deriv=d, delta=dt, use="dot") for d in range(3)])
        edges, weights = acceleration_kernel(length, order, dt)
        return coefficients, np.round(edges * 1e9).astype(np.int64), weights

    def _span(self):
        return window_samples(self.options.trajectory_filter_window, self.period_ns * 1e-9,
                              self.options.trajectory_polyorder) // 2

    def span_ns(self):
        """Time [ns] on each side a filtered sample depends on (0 before the grid is fixed)."""
        return 0 if self.period_ns is None else self._span() * self.period_ns

    def _reach(self):
        """Grid samples on each side a sample needs: its filter span, twice for the slowest speed."""
        return self._span() * (2 if self._slowest else 1)

    # ------------------------------------------------------------------ output
    def emit(self):
        """Every grid sample whose window has arrived since the last call, as a MotionChunk, or None.

        Raises:
            DataError: No torques of the configured source in the first ``decide_seconds``.
        """
        if not self._joints or not self._set_up():
            return None
        reach = self._reach()
        latest = (self._joints[-1][0] - self._origin_ns) // self.period_ns
        last = int(latest) - reach - 1  # a margin sample for the interpolation and the kernel's edge
        if last < self._next:
            return None
        chunk = self._filter(np.arange(self._next, last + 1))
        self._next = last + 1
        self._trim()
        return chunk

    def _grid_ns(self, index):
        return self._origin_ns + self.period_ns * np.asarray(index, dtype=np.int64)

    def _filter(self, index):
        """The chunk of grid samples ``index`` (consecutive), or None when none is valid."""
        span, reach = self._span(), self._reach()
        wide = np.arange(index[0] - reach, index[-1] + reach + 1)
        stamps = np.array([s[0] for s in self._joints], dtype=np.int64)
        raw_q = np.array([s[1] for s in self._joints])
        grid = self._grid_ns(wide)
        qg, ok = interpolate((stamps - self._origin_ns) * 1e-9, raw_q, (grid - self._origin_ns) * 1e-9,
                             max_gap=DEFAULT_GAP_FACTOR * self.period_ns * 1e-9)
        length = 2 * span + 1
        views = np.lib.stride_tricks.sliding_window_view(np.nan_to_num(qg), length, axis=0)  # (W - L + 1, n, L)
        complete = np.lib.stride_tricks.sliding_window_view(ok, length).all(-1)
        q, qd, qdd = (views @ c for c in self._filters[0])
        centre = wide[span : len(wide) - span]  # grid index of every filtered row
        slowest = np.abs(qd)
        if self._slowest:
            slowest = np.lib.stride_tricks.sliding_window_view(np.abs(qd), length, axis=0).min(-1)
            ok_slow = np.lib.stride_tricks.sliding_window_view(complete, length).all(-1)
            rows = slice(span, len(centre) - span)
            q, qd, qdd, complete, centre = q[rows], qd[rows], qdd[rows], ok_slow, centre[rows]
        tau, valid = self._torques(self._grid_ns(centre))
        valid &= complete
        if self.limits is not None:
            valid &= ~near_limits(q, *self.limits, self.options.limit_margin)
        if not valid.any():
            return None
        keep = np.flatnonzero(valid)
        return MotionChunk(self._grid_ns(centre[keep]), q[keep], qd[keep], qdd[keep], tau[keep], slowest[keep],
                           self.reading[0] == "effort", centre[keep], reach)

    def _torques(self, grid_ns):
        """Filtered applied torques at grid stamps (K, n) and which are valid (K,)."""
        source, hold = self.reading
        half_ns = self._span() * self.period_ns
        if source == "effort":
            samples = [(s[0], s[2]) for s in self._joints if s[2] is not None]
        else:
            samples = list(self._commands)
        stamps = np.array([s[0] for s in samples], dtype=np.int64)
        first = max(0, int(np.searchsorted(stamps, grid_ns[0] - half_ns, side="right")) - 2)
        stop = int(np.searchsorted(stamps, grid_ns[-1] + half_ns, side="right")) + 2
        stamps, values = stamps[first:stop], np.array([s[1] for s in samples[first:stop]]).reshape(-1, len(self.joint_names))
        if len(stamps) < 2:
            return np.zeros((len(grid_ns), len(self.joint_names))), np.zeros(len(grid_ns), bool)
        try:
            signal = TorqueSignal(stamps - self._origin_ns, values, hold if len(stamps) >= 4 or hold == "zoh" else "linear")
        except DataError:
            return np.zeros((len(grid_ns), len(self.joint_names))), np.zeros(len(grid_ns), bool)
        _, edges_ns, weights = self._filters
        with np.errstate(invalid="ignore"):  # as preparation.consistent_torques, with the kernel computed once
            tau = signal.filtered(grid_ns - self._origin_ns, edges_ns, weights)
        valid = np.all(np.isfinite(tau), axis=1)
        if source == "commanded":
            valid &= self._commands_fresh(stamps, grid_ns, half_ns)
        return np.nan_to_num(tau), valid

    def _commands_fresh(self, stamps, grid_ns, half_ns):
        """Samples whose window always had a commanded torque at most ``command_timeout`` old, (K,)."""
        timeout = round(self.options.command_timeout * 1e9)
        starts = np.searchsorted(stamps, grid_ns - half_ns, side="right") - 1
        ends = np.searchsorted(stamps, grid_ns + half_ns, side="right") - 1
        gaps = np.diff(np.append(stamps, np.iinfo(np.int64).max // 2))
        fresh = np.ones(len(grid_ns), bool)
        for i, (a, b) in enumerate(zip(starts, ends)):
            if a < 0:
                fresh[i] = False
                continue
            inner = gaps[a:b]
            tail = grid_ns[i] + half_ns - stamps[b]
            fresh[i] = (inner.size == 0 or inner.max() <= timeout) and tail <= timeout
        return fresh

    def _trim(self):
        """Drop the samples no later window needs."""
        keep_ns = int(self._grid_ns(self._next - 2 * self._reach() - 4))
        while len(self._joints) > 2 and self._joints[1][0] < keep_ns:
            self._joints.popleft()
        while len(self._commands) > 2 and self._commands[1][0] < keep_ns - self.period_ns:
            self._commands.popleft()
