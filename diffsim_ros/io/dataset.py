"""Bag streams -> identification dataset (static poses, trajectories, camera observations).

* Static poses: intervals where every joint rests (filtered velocities, never raw
  differences), averaged; the effort standard deviation of each average comes from the
  samples themselves.
* Trajectories: positions resampled on a uniform grid when stamps jitter, smoothed and
  differentiated by Savitzky-Golay filtering; torques are the commanded torques (zero-order
  hold of the last command) or the measured efforts at the sample times.
* Camera observations: joint positions interpolated at the camera stamps (the camera runs
  slower than the joint states); stamps in gaps of the joint stream are dropped.
"""

from dataclasses import dataclass

import numpy as np

from diffsim_ros.estimation.data import CameraObservations, DataError, Dataset, Trajectory, static_poses_from_intervals
from diffsim_ros.io.signals import detect_static_segments, filtered_derivatives, interpolate

__all__ = ["DatasetOptions", "DatasetSummary", "dataset_from_bag"]


@dataclass(frozen=True)
class DatasetOptions:
    """How bag streams become identification data."""

    static_velocity_tolerance: float = 0.01
    """[rad/s] max filtered speed of every joint at rest."""
    static_min_duration: float = 0.3
    """[s] shortest static segment used."""
    effort_std_floor: float = 1e-3
    """[N·m] floor of an averaged effort's standard deviation (quantization, drift)."""
    filter_window: float = 0.1
    """[s] Savitzky-Golay window."""
    torque_source: str = "auto"
    """``"commanded"``, ``"effort"`` or ``"auto"`` (commanded when the bag has it)."""
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


@dataclass(frozen=True)
class DatasetSummary:
    """What was extracted, for progress output and reports."""

    static_poses: int
    trajectory_seconds: float
    camera_observations: int
    torque_source: str
    notes: tuple


def _static_poses(times, q, efforts, options):
    segments = detect_static_segments(
        times, q, velocity_tolerance=options.static_velocity_tolerance,
        min_duration=options.static_min_duration, window=options.filter_window,
    )
    if not segments or efforts is None:
        return None
    intervals = [(seg.t_start, seg.t_stop) for seg in segments]
    return static_poses_from_intervals(times, q, efforts, intervals, options.effort_std_floor)


def _uniform(times, values):
    """Resample on a uniform grid at the median period when stamps jitter by > 5 %."""
    dt = float(np.median(np.diff(times)))
    if np.max(np.abs(np.diff(times) - dt)) <= 0.05 * dt:
        return times, values, dt
    grid = np.arange(times[0], times[-1], dt)
    resampled, _ = interpolate(times, values, grid)
    return grid, resampled, dt


def _torques(bag, times, efforts, options):
    """Per-sample torques on ``times`` and which source they came from."""
    commanded = bag.commanded_torques
    source = options.torque_source
    if source == "auto":
        source = "commanded" if commanded is not None else "effort"
    if source == "commanded":
        if commanded is None:
            raise DataError(f"{bag.path}: torque_source 'commanded' but the bag has no commanded torques")
        # Zero-order hold: the last command sent before each sample time.
        index = np.searchsorted(commanded.times, times, side="right") - 1
        valid = index >= 0
        torques = np.where(valid[:, None], commanded.torques[np.clip(index, 0, None)], np.nan)
        return torques, "commanded"
    if efforts is None:
        raise DataError(f"{bag.path}: joint states carry no efforts and no commanded torques are recorded")
    return efforts, "effort"


def _trajectory(bag, options, notes):
    js = bag.joint_states
    if len(js.times) < 10:
        notes.append("trajectory: too few joint states")
        return None, "none"
    efforts_raw = js.efforts
    times, q, dt = _uniform(js.times, js.positions)
    efforts = None if efforts_raw is None else interpolate(js.times, efforts_raw, times)[0]
    signal = filtered_derivatives(times, q, window=options.filter_window)
    torques, source = _torques(bag, times, efforts, options)
    valid = signal.valid & np.all(np.isfinite(torques), axis=1)
    index = np.flatnonzero(valid)
    if index.size < 10:
        notes.append("trajectory: no valid filtered samples")
        return None, source
    # The longest contiguous valid run becomes the trajectory.
    breaks = np.flatnonzero(np.diff(index) > 1)
    runs = np.split(index, breaks + 1)
    run = max(runs, key=len)
    return (
        Trajectory(
            dt=dt,
            q=signal.positions[run],
            qd=signal.velocities[run],
            tau=torques[run],
            qdd=signal.accelerations[run],
            q_std=options.q_std,
            qd_std=options.qd_std,
        ),
        source,
    )


def _camera(bag, frame, options, notes):
    poses = bag.camera_poses
    if poses is None or frame is None:
        return None
    js = bag.joint_states
    q, valid = interpolate(js.times, js.positions, poses.times, max_gap=options.camera_max_gap)
    dropped = int((~valid).sum())
    if dropped:
        notes.append(f"camera: {dropped} poses outside the joint-state stream dropped")
    if not valid.any():
        return None
    obs = CameraObservations(
        frame, q[valid], poses.positions[valid], poses.quaternions[valid],
        options.camera_position_std, options.camera_rotation_std,
    )
    return obs.subsample(options.camera_samples)


def dataset_from_bag(bag, camera_frame=None, options=DatasetOptions()):
    """Identification data from a :class:`~diffsim_ros.io.bags.BagData`.

    Args:
        bag: Streams read by :func:`~diffsim_ros.io.bags.read_bag`.
        camera_frame: Link whose pose the camera topic reports (None: ignore the camera).
        options: DatasetOptions.

    Returns:
        ``(Dataset, DatasetSummary)``.
    """
    if options.torque_source not in ("auto", "commanded", "effort"):
        raise ValueError(f"torque_source must be auto, commanded or effort, got {options.torque_source!r}")
    notes = []
    js = bag.joint_states
    static = _static_poses(js.times, js.positions, js.efforts, options)
    if static is None:
        notes.append("no static poses (no rest intervals or no efforts)")
    trajectory, source = _trajectory(bag, options, notes)
    camera = _camera(bag, camera_frame, options, notes)
    dataset = Dataset(static=static, trajectories=(trajectory,) if trajectory is not None else (), camera=camera)
    summary = DatasetSummary(
        static_poses=0 if static is None else len(static),
        trajectory_seconds=0.0 if trajectory is None else len(trajectory) * trajectory.dt,
        camera_observations=0 if camera is None else len(camera),
        torque_source=source,
        notes=tuple(notes),
    )
    return dataset, summary
