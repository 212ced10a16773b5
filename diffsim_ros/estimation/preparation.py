"""Robot streams -> identification dataset (static poses, trajectories, camera observations).

* Static poses: intervals where every joint rests (filtered velocities, never raw
  differences), averaged; the effort standard deviation of each average comes from the
  samples themselves.
* Trajectories: positions smoothed and differentiated by Savitzky-Golay filtering, on a
  uniform integer-nanosecond grid (resampled when stamps jitter); every gap-free run becomes
  one trajectory. Torques are the commanded torques, each held from its stamp on as the
  robot held it, or the measured efforts, interpolated; a trajectory carries that torque
  signal, so rollouts apply the exact torque of every simulator step, and its per-sample
  torques are filtered by the Peano kernel of the acceleration filter, so that they are
  consistent with the filtered accelerations (torque steps and lags bias neither side).
* Camera observations: joint positions interpolated at the camera stamps (the camera runs
  slower than the joint states); stamps in gaps of the joint stream are dropped.
"""

from dataclasses import dataclass, field, replace

import numpy as np

from diffsim_ros.estimation.data import (
    HOLDS,
    CameraObservations,
    DataError,
    Dataset,
    TorqueSignal,
    Trajectory,
    static_poses_from_intervals,
)
from diffsim_ros.estimation.signals import (
    DEFAULT_GAP_FACTOR,
    acceleration_kernel,
    contiguous_runs,
    detect_static_segments,
    filtered_derivatives,
    interpolate,
    near_limits,
    segments_away_from,
    window_samples,
)
from diffsim_ros.vocabulary import TORQUE_SOURCES

__all__ = ["DatasetOptions", "DatasetSummary", "prepare_dataset", "torque_reading", "consistent_torques", "UNAPPLIED_SIGMAS",
           "UNAPPLIED_FRACTION"]

# A commanded torque the robot did not apply (a drive at its effort limit, a controller that
# chatters faster than the recording samples it, a fault) leaves the measured effort far from
# it. Measured (benchmarks/bench_estimation.py, seed 1: a PD that chatters at the MuJoCo
# plant's 1 kHz while s0 saturates, commands of -56 N·m recorded at 100 Hz while the drive
# applied +50): 142 filtered samples of 11000, off by up to 17x the joint's rms command. They
# made both holds misfit by 2.82 N·m RMS, so zoh was read for a 1 kHz controller's samples
# (cubic: 0.091 against 0.122 N·m where the two agree) and left_s1's damping came out +46 %
# (20 std) in a fit reported ok; left out of the comparison and of the fit, every damping is
# within 0.4 %. make demo's bag, whose commands the plant applied, stays within 0.83x (left_w1).
# A sample's command was applied when it agrees with the effort to within UNAPPLIED_SIGMAS
# robust standard deviations of their difference or UNAPPLIED_FRACTION of the joint's rms
# command, whichever is larger (a real drive's friction and dynamics make them differ steadily).
UNAPPLIED_SIGMAS = 10.0
UNAPPLIED_FRACTION = 1.0


@dataclass(frozen=True)
class DatasetOptions:
    """How recorded streams become identification data."""

    static_velocity_tolerance: float = 0.01
    """[rad/s] max filtered speed of every joint at rest."""
    static_min_duration: float = 0.3
    """[s] shortest static segment used."""
    effort_std_floor: float = 1e-3
    """[N·m] floor of an averaged effort's standard deviation (quantization, drift)."""
    filter_window: float = 0.1
    """[s] Savitzky-Golay window of the rest detection."""
    trajectory_filter_window: float = 0.3
    """[s] Savitzky-Golay window of the motion's positions, velocities and accelerations
    (at least polyorder + 2 samples)."""
    trajectory_polyorder: int = 5
    """Savitzky-Golay order of the motion. Measured on sinusoids at 100 Hz with 2e-4 rad
    noise: a quintic over 0.3 s biases accelerations by 1.6 % at 2 Hz with noise 0.035
    rad/s², a cubic over 0.1 s by 3.2 % with noise 0.14, a cubic over 0.2 s by 12 %."""
    torque_source: str = "auto"
    """``"commanded"``, ``"effort"`` or ``"auto"`` (commanded when recorded)."""
    torque_hold: str = "auto"
    """How torques act between samples: ``"auto"`` (efforts: cubic interpolation; commanded:
    held from each stamp as the robot holds them, or cubic when the measured efforts show
    that the recorded commands are samples of a faster controller), or one of
    ``"zoh"``, ``"linear"``, ``"cubic"``."""
    min_trajectory_samples: int = 20
    """Shorter runs of valid samples are not used as trajectories."""
    camera_max_gap: float = 0.05
    """[s] camera stamps inside longer joint-state gaps are dropped."""
    camera_samples: int = 400
    """At most this many camera observations, evenly spread."""
    camera_position_std: float = 1e-3
    """[m]"""
    camera_rotation_std: float = float(np.radians(0.2))
    """[rad]"""
    q_std: float = 1e-4
    """[rad] joint-angle noise (rollout residual weights)."""
    qd_std: float = 5e-3
    """[rad/s] filtered-velocity noise."""
    command_timeout: float = 0.25
    """[s] a commanded torque older than this is not taken as in force (the robot left torque
    mode, as Baxter does after 0.2 s, or the controller stopped): motion then is not used."""
    limit_margin: float = 0.02
    """[rad] rests and motion samples with a joint closer than this to a position limit are
    not used: the limit's torque is in no message (with ``limits`` given)."""


@dataclass(frozen=True)
class DatasetSummary:
    """What was extracted, for progress output and reports.

    Attributes:
        static_poses: Rest poses found.
        trajectory_seconds: Total duration of the trajectories [s].
        camera_observations: Camera poses used.
        torque_source: ``"commanded"``, ``"effort"`` or ``"none"``.
        notes: Human-readable notes: everything dropped or unused, with counts.
        streams: Stream key -> :class:`~diffsim_ros.estimation.streams.StreamStats`.
        trajectories: Number of trajectories (gap-free runs).
        sample_rate: Joint-state rate [Hz] (0 without trajectories).
    """

    static_poses: int
    trajectory_seconds: float
    camera_observations: int
    torque_source: str
    notes: tuple
    streams: dict = field(default_factory=dict)
    trajectories: int = 0
    sample_rate: float = 0.0


def _static_poses(times, q, efforts, options, at_limit):
    segments = detect_static_segments(
        times, q, velocity_tolerance=options.static_velocity_tolerance,
        min_duration=options.static_min_duration, window=options.filter_window,
    )
    segments = segments_away_from(segments, times, at_limit)
    if not segments or efforts is None:
        return None
    intervals = [(seg.t_start, seg.t_stop) for seg in segments]
    return static_poses_from_intervals(times, q, efforts, intervals, options.effort_std_floor)


def _grid(stamps_ns):
    """Uniform integer-nanosecond grid over the stamps and its period [ns].

    Exactly uniform stamps are the grid; jittered ones get a grid at the median period from
    the first stamp (integers: a float grid lands a rounding error before the stamps, and a
    zero-order hold then takes the previous command).
    """
    diffs = np.diff(stamps_ns)
    median = np.median(diffs)
    if np.all(diffs == median):
        return stamps_ns, int(median)
    # Jitter telescopes in the mean of the regular intervals (gaps excluded): the clock's period.
    period = int(np.round(diffs[diffs < 1.5 * median].mean()))
    count = int((stamps_ns[-1] - stamps_ns[0]) // period) + 1
    return stamps_ns[0] + period * np.arange(count, dtype=np.int64), period


def _torque_signal(streams, options):
    """The torques as the robot applied them, their source name, a note, the grid samples
    whose command the robot did not apply (see :func:`_unapplied`; None when not known) and
    the torques filtered on the joint-state grid when the comparison computed them (else None).

    Measured efforts are samples of a continuous torque and are interpolated. Commanded
    torques act from their receive stamps on; whether the robot held each recorded command
    until the next one (``"zoh"``), or its controller ran faster than the recording and the
    commands are samples of a smooth torque (``"cubic"``), is read from the data when the
    joint states carry efforts: the hold whose filtered torques agree better with the
    filtered efforts is used. Without efforts, the robot is taken to hold its commands.
    """
    commanded, js = streams.commanded_torques, streams.joint_states
    source = options.torque_source
    if source == "auto":
        source = "commanded" if commanded is not None else "effort"
    if source == "effort":
        if js.efforts is None:
            raise DataError(f"{streams.source}: joint states carry no efforts and no commanded torques are recorded")
        hold = "cubic" if options.torque_hold == "auto" else options.torque_hold
        return _signal(streams, js.stamps_ns, js.efforts, hold), source, None, None, None
    if commanded is None:
        raise DataError(f"{streams.source}: torque_source 'commanded' but no commanded torques are recorded")
    holds = ("zoh", "cubic") if options.torque_hold == "auto" else (options.torque_hold,)
    candidates = {hold: _signal(streams, commanded.stamps_ns, commanded.torques, hold) for hold in holds}
    if js.efforts is None or len(js.stamps_ns) < 10:
        return candidates[holds[0]], source, None, None, None
    measured = _signal(streams, js.stamps_ns, js.efforts, "cubic")
    grid, period = _grid(js.stamps_ns - streams.t0_ns)
    reference = _consistent_torques(measured, grid, period, options)
    filtered = {hold: _consistent_torques(sig, grid, period, options) for hold, sig in candidates.items()}
    differences = {hold: tau - reference for hold, tau in filtered.items()}
    if not all(np.isfinite(d).any() for d in differences.values()):  # too short to compare
        return candidates[holds[0]], source, None, None, None
    unapplied = {hold: _unapplied(filtered[hold], d) for hold, d in differences.items()}
    # Holds are compared where the robot applied its commands under either reading: a few
    # commands it did not apply (saturation, chatter) would otherwise make the choice (seed 1
    # of bench_estimation: 2.82 N·m RMS for both, zoh taken for a 1 kHz controller's samples,
    # left_s1's damping +46 %).
    half = window_samples(options.trajectory_filter_window, period * 1e-9, options.trajectory_polyorder) // 2
    agree = ~_dilated(np.logical_or.reduce(list(unapplied.values())), half)
    if not np.any(agree & np.all(np.isfinite(reference), axis=1)):  # all contradicted: compare them all
        agree[:] = True
    misfit = {hold: np.sqrt(np.nanmean(d[agree] ** 2)) for hold, d in differences.items()}
    hold = min(misfit, key=misfit.get)
    note = None
    if len(holds) > 1:
        note = (f"commanded torques read as {'held' if hold == 'zoh' else 'samples of a smooth torque'} ({hold}): "
                f"filtered, they differ from the measured efforts by {misfit[hold]:.3g} N·m RMS "
                f"({'cubic' if hold == 'zoh' else 'zoh'}: {max(misfit.values()):.3g})")
    return candidates[hold], source, note, unapplied[hold], filtered[hold]


def _unapplied(commanded, difference):
    """Grid samples (T,) whose filtered command the robot did not apply: its filtered measured
    effort differs from it by more than UNAPPLIED_SIGMAS robust std (about the median
    difference: an effort sensor's bias) and UNAPPLIED_FRACTION of the joint's rms command."""
    with np.errstate(invalid="ignore"):
        centre = np.nanmedian(difference, axis=0)
        spread = 1.4826 * np.nanmedian(np.abs(difference - centre), axis=0)
        scale = np.sqrt(np.nanmean(commanded**2, axis=0))
        off = np.abs(difference - centre) > np.maximum(UNAPPLIED_SIGMAS * spread, UNAPPLIED_FRACTION * scale)
    return np.any(off, axis=1)


def _signal(streams, stamps_ns, values, hold):
    if len(stamps_ns) < 2:
        raise DataError(f"{streams.source}: {len(stamps_ns)} torque sample(s); need two or more")
    return TorqueSignal(stamps_ns - streams.t0_ns, values, hold)


def _consistent_torques(signal, grid, period, options):
    """Torques at the grid filtered like the accelerations (see :func:`acceleration_kernel`).

    NaN within half a filter window of either end of the torque signal.
    """
    dt = period * 1e-9
    length = window_samples(options.trajectory_filter_window, dt, options.trajectory_polyorder)
    edges, weights = acceleration_kernel(length, options.trajectory_polyorder, dt)
    return signal.filtered(grid, np.round(edges * 1e9).astype(np.int64), weights)


def consistent_torques(signal, grid_ns, period_ns, options):
    """Torques (T, n) [N·m] of a :class:`~diffsim_ros.estimation.data.TorqueSignal` at grid stamps (T,)
    [ns, the signal's clock] filtered like the accelerations of period ``period_ns`` (as offline)."""
    return _consistent_torques(signal, grid_ns, period_ns, options)


def torque_reading(streams, options):
    """``(source, hold)``: which torques ``prepare_dataset`` reads from ``streams`` and how they act
    between their samples (``options.torque_hold`` "auto" decided from the data, as offline).

    Raises:
        DataError: No torques of the requested source.
    """
    signal, source, _, _, _ = _torque_signal(streams, options)
    return source, signal.hold


def _torque_rate(tau, period):
    """Time derivative [N·m/s] of filtered torques on the grid (T, n): central differences, one-sided
    at the ends of each finite run, so that the rate costs no sample."""
    rate = np.full_like(tau, np.nan)
    for a, b in contiguous_runs(np.all(np.isfinite(tau), axis=1)):
        if b - a >= 2:
            rate[a:b] = np.gradient(tau[a:b], period * 1e-9, axis=0)
    return rate


def _runs(valid, min_samples):
    """(start, stop) index runs of valid samples at least ``min_samples`` long."""
    return [(a, b) for a, b in contiguous_runs(valid) if b - a >= min_samples]


def _commands_stale(streams, grid, timeout):
    """Grid samples (relative stamps [ns]) whose newest commanded torque is older than ``timeout`` [s]."""
    commands = streams.commanded_torques.stamps_ns - streams.t0_ns
    newest = np.searchsorted(commands, grid, side="right") - 1
    age = grid - commands[np.clip(newest, 0, None)]
    return (newest < 0) | (age > round(timeout * 1e9))


def _dilated(mask, half):
    """``mask`` widened by ``half`` samples each side (what a centred filter window sees)."""
    if half <= 0 or not np.any(mask):
        return mask
    # The centred slice of the full convolution: mode="same" returns max(len(mask), window)
    # samples, not len(mask), when the window is the longer (a short online window).
    return np.convolve(mask.astype(float), np.ones(2 * half + 1), mode="full")[half : half + len(mask)] > 0


def _trajectory_runs(streams, options, notes, limits):
    """Trajectories: every long enough gap-free run of filtered samples with torques."""
    js = streams.joint_states
    if len(js.times) < 10:
        notes.append(f"trajectory: {len(js.times)} joint states are too few")
        return (), "none"
    signal, source, note, unapplied, tau = _torque_signal(streams, options)
    if note:
        notes.append(note)
    stamps = js.stamps_ns - streams.t0_ns
    filtered = filtered_derivatives(js.times, js.positions, window=options.trajectory_filter_window,
                                    polyorder=options.trajectory_polyorder)
    grid, period = _grid(stamps)
    seconds = grid * 1e-9
    values = [interpolate(js.times, v, seconds, max_gap=DEFAULT_GAP_FACTOR * period * 1e-9)[0]
              for v in (filtered.positions, filtered.velocities, filtered.accelerations)]
    if tau is None:  # not filtered yet (no efforts to compare with)
        tau = _consistent_torques(signal, grid, period, options)
    # Measured efforts may lag the joint states: their rate, filtered alike, lets a delay be fitted.
    rate = _torque_rate(tau, period) if source == "effort" else None
    half = window_samples(options.trajectory_filter_window, period * 1e-9, options.trajectory_polyorder) // 2
    centred = np.zeros(len(grid), dtype=bool)  # edge samples of a run have one-sided filters
    for a, b in contiguous_runs(np.all(np.isfinite(np.concatenate(values, axis=1)), axis=1)):
        centred[a + half : b - half] = True
    valid = centred & np.all(np.isfinite(np.concatenate(values + [tau] + ([] if rate is None else [rate]), axis=1)), axis=1)
    if source == "commanded":
        stale = _dilated(_commands_stale(streams, grid, options.command_timeout), half)
        if np.any(valid & stale):
            notes.append(f"trajectory: {int(np.sum(valid & stale))} samples unused: no commanded torque within "
                         f"{options.command_timeout:g} s (the robot was not in torque mode)")
        valid &= ~stale
    if unapplied is not None:
        unapplied = _dilated(unapplied, half)  # the filter spreads a sample's torque over its window
        if np.any(valid & unapplied):
            notes.append(f"trajectory: {int(np.sum(valid & unapplied))} samples unused: the commanded torques and the "
                         "measured efforts disagree there by more than the joint's rms command (a command the robot did "
                         "not apply: a drive at its effort limit, a controller faster than the recording, a fault)")
        valid &= ~unapplied
    if limits is not None:
        at_limit = near_limits(values[0], *limits, options.limit_margin)
        if np.any(valid & at_limit):
            notes.append(f"trajectory: {int(np.sum(valid & at_limit))} samples within {options.limit_margin:g} rad "
                         "of a joint limit unused (the limit's torque is not measured)")
        valid &= ~at_limit
    runs = _runs(valid, options.min_trajectory_samples)
    lost = len(grid) - sum(b - a for a, b in runs)
    if lost:
        notes.append(f"trajectory: {lost} of {len(grid)} samples unused (filter edges, gaps, outside the "
                     f"{source} torques, or runs shorter than {options.min_trajectory_samples} samples)")
    trajectories = tuple(
        Trajectory(dt=period * 1e-9, q=values[0][a:b], qd=values[1][a:b], tau=tau[a:b], qdd=values[2][a:b],
                   q_std=options.q_std, qd_std=options.qd_std, start_ns=int(grid[a]), torque=signal, filter_span=half,
                   measured_efforts=source == "effort", tau_rate=None if rate is None else rate[a:b])
        for a, b in runs
    )
    if not trajectories:
        notes.append("trajectory: no run of valid filtered samples")
    return trajectories, source


def _camera(streams, frame, options, notes):
    poses = streams.camera_poses
    if poses is None or frame is None:
        return None
    js = streams.joint_states
    q, valid = interpolate(js.times, js.positions, poses.times, max_gap=options.camera_max_gap)
    dropped = int((~valid).sum())
    if dropped:
        notes.append(f"camera: {dropped} poses outside the joint-state stream dropped")
    if not valid.any():
        return None
    obs = CameraObservations(
        frame, q[valid], poses.position[valid], poses.orientation[valid],
        options.camera_position_std, options.camera_rotation_std,
    )
    return obs.subsample(options.camera_samples)


def _stream_notes(streams):
    """Notes on every sample the reader dropped, reordered or skipped (StreamStats.notes)."""
    series = {"joint states": streams.joint_states, "camera poses": streams.camera_poses, "commanded torques": streams.commanded_torques}
    return [f"{name} ({stream.stats.topic}): {line}" for name, stream in series.items() if stream is not None
            for line in stream.stats.notes()]


def _informative_efforts(streams, options, notes):
    """The streams, with efforts that are exactly 0 on every joint and sample taken as none.

    Such efforts carry no torque information (a moving arm under gravity never measures 0
    everywhere; a driver that does not measure efforts may fill them with zeros). They are
    refused when they would be the torques of the fit, and otherwise noted and ignored.
    """
    js = streams.joint_states
    if js.efforts is None or len(js.efforts) == 0 or np.any(js.efforts != 0.0):
        return streams
    what = (f"{streams.source}: the joint states' efforts are exactly 0 on every joint and all {len(js.efforts)} "
            f"samples; they carry no torque information")
    if streams.commanded_torques is None:
        raise DataError(f"{what}, and no commanded torques are recorded")
    if options.torque_source == "effort":
        raise DataError(f"{what} (torque_source 'effort')")
    notes.append(f"{what}: ignored (the commanded torques are used)")
    return replace(streams, joint_states=replace(js, efforts=None))


def _outside_limits_note(positions, limits):
    """A note when joint-state samples lie outside the joint limits ([] when none do).

    Args:
        positions: Joint positions [rad or m], shape (N, n).
        limits: ``(lower, upper)``, (n,) each.
    """
    outside = int(np.sum(np.any((positions < limits[0]) | (positions > limits[1]), axis=-1)))
    if not outside:
        return []
    share = f"all {outside}" if outside == len(positions) else f"{outside} of {len(positions)}"
    return [f"joint states: {share} samples lie outside the joint limits (positions in degrees, or another robot's?)"]


def prepare_dataset(streams, camera_frame=None, options=DatasetOptions(), limits=None):
    """Identification data from recorded robot streams (offline: a bag; online: a window).

    Args:
        streams: :class:`~diffsim_ros.estimation.streams.RobotStreams` (``BagData.streams()``).
        camera_frame: Link whose pose the camera topic reports (None: ignore the camera).
        options: DatasetOptions.
        limits: ``(lower, upper)`` joint position limits, (n,) each, or None: rests and motion
            within ``options.limit_margin`` of a limit are then not used.

    Returns:
        ``(Dataset, DatasetSummary)``.
    """
    if options.torque_source not in TORQUE_SOURCES:
        raise ValueError(f"torque_source must be auto, commanded or effort, got {options.torque_source!r}")
    if options.torque_hold not in ("auto",) + HOLDS:
        raise ValueError(f"torque_hold must be auto or one of {HOLDS}, got {options.torque_hold!r}")
    notes = _stream_notes(streams)
    streams = _informative_efforts(streams, options, notes)
    js = streams.joint_states
    at_limit = np.zeros(len(js.times), dtype=bool) if limits is None else \
        near_limits(js.positions, *limits, options.limit_margin)
    if limits is not None:
        notes.extend(_outside_limits_note(js.positions, limits))
    static = _static_poses(js.times, js.positions, js.efforts, options, at_limit)
    if static is None:
        notes.append("no static poses (no rest intervals away from the joint limits, or no efforts)")
    trajectories, source = _trajectory_runs(streams, options, notes, limits)
    camera = _camera(streams, camera_frame, options, notes)
    dataset = Dataset(static=static, trajectories=trajectories, camera=camera)
    stats = {key: getattr(streams, attr).stats for key, attr in
             (("joint_states", "joint_states"), ("camera_pose", "camera_poses"), ("commanded_torques", "commanded_torques"))
             if getattr(streams, attr) is not None}
    summary = DatasetSummary(
        static_poses=0 if static is None else len(static),
        trajectory_seconds=sum(len(t) * t.dt for t in trajectories),
        camera_observations=0 if camera is None else len(camera),
        torque_source=source,
        notes=tuple(notes),
        streams=stats,
        trajectories=len(trajectories),
        sample_rate=1.0 / trajectories[0].dt if trajectories else 0.0,
    )
    return dataset, summary
