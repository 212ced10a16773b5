"""What camera poses of objects say before any model is fitted: noise, rest, contact events.

* :func:`pose_noise`: the camera's position and orientation noise, estimated from the data
  alone (local quadratic fits over five consecutive poses: exact for free flight and for
  Coulomb sliding, so their residuals are noise except at the few samples around an
  event, which a median ignores). It is the yardstick of a fit: a fit whose residuals are
  far above it did not explain the data.
* :func:`at_rest_at_start`: objects lying still when the recording starts (a target waiting
  to be hit).
* :func:`contact_events`: when each pair of objects first comes into contact, from the
  distance between their observed shapes (and the moment a resting one starts to move).
  Stages of an estimation are cut there, and a pair that never touches has no say in the
  data.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.dynamics.spatial import quat_conjugate, quat_exp, quat_log, quat_multiply, quat_normalize
from diffsim_ros.estimation.signals import interpolate, interpolate_quaternions
from diffsim_ros.estimation.streams import PoseSeries

__all__ = ["PoseNoise", "ContactEvent", "pose_noise", "noisy_poses", "at_rest_at_start", "contact_events", "interpolate_poses",
           "move_time"]

WINDOW = 5  # poses per local quadratic fit
# Median of a chi-square variable with 3 (WINDOW - 3) = 6 degrees of freedom: the pooled
# residual energy of three axes over one window has median sigma² times this.
CHI2_6_MEDIAN = 5.348120627447122
# An object is at rest at the start when its first REST_POSES poses stay within REST_SIGMAS
# noise standard deviations (per axis) of their mean.
REST_POSES = 5
REST_SIGMAS = 4.0
# Two shapes are in contact when their observed distance is below CONTACT_SIGMAS position
# noise standard deviations (the distance of two noisy poses is noisy too), plus a floor.
CONTACT_SIGMAS = 4.0
CONTACT_FLOOR = 1e-3  # [m]
# A resting object has started to move when it leaves its rest pose by this many sigmas.
MOVE_SIGMAS = 5.0
DETECTION_RANGE = 1.0  # [m]: every slot closer than this reports its distance


@dataclass(frozen=True)
class PoseNoise:
    """Camera noise of one object's poses, estimated from the data.

    Attributes:
        position: Standard deviation per axis [m].
        orientation: Standard deviation per rotation axis [rad].
        windows: Number of local fits it was computed from.
    """

    position: float
    orientation: float
    windows: int


@dataclass(frozen=True)
class ContactEvent:
    """First contact of two objects seen in the data.

    Attributes:
        pair: ``(a, b)`` object names.
        time: First observation time [s] at which they touch (or a resting one has moved).
        last_apart: The last observation time before it at which they were seen apart [s]
            (the contact began in between).
        distance: Their smallest observed distance [m].
    """

    pair: tuple
    time: float
    last_apart: float
    distance: float


def _window_energy(times, values):
    """Residual energy of quadratic fits over every WINDOW consecutive samples, (W,).

    Args:
        times: (T,) [s]. values: (T, 3).
    """
    count = times.size - WINDOW + 1
    energies = np.empty(count)
    for i in range(count):
        t = times[i : i + WINDOW] - times[i + WINDOW // 2]
        basis = np.stack([np.ones_like(t), t, t * t], 1)
        coef, *_ = np.linalg.lstsq(basis, values[i : i + WINDOW], rcond=None)
        energies[i] = float(((values[i : i + WINDOW] - basis @ coef) ** 2).sum())
    return energies


def _relative_rotations(orientation):
    """Rotation vectors of every pose relative to its predecessor, accumulated (T, 3) [rad]:
    a smooth curve in R³ for the quadratic fits (exact for rotations about a fixed axis)."""
    q = torch.as_tensor(orientation)
    steps = quat_log(quat_multiply(q[1:], quat_conjugate(q[:-1]))).numpy()
    return np.concatenate([np.zeros((1, 3)), np.cumsum(steps, 0)])


def pose_noise(series):
    """Camera noise from poses alone, pooled over one or more objects seen by the same camera.

    Args:
        series: A PoseSeries (estimation.streams) or a sequence of them.

    Raises:
        ValueError: No series with at least WINDOW poses.
    """
    series = [series] if hasattr(series, "times") else list(series)
    usable = [s for s in series if len(s) >= WINDOW]
    if not usable:
        raise ValueError(f"noise estimation needs a pose series with at least {WINDOW} poses")
    position = np.concatenate([_window_energy(s.times, s.position) for s in usable])
    orientation = np.concatenate([_window_energy(s.times, _relative_rotations(s.orientation)) for s in usable])
    return PoseNoise(
        position=math.sqrt(float(np.median(position)) / CHI2_6_MEDIAN),
        orientation=math.sqrt(float(np.median(orientation)) / CHI2_6_MEDIAN),
        windows=position.size,
    )


def noisy_poses(series, noise, rng):
    """A camera's view of ``series``: independent Gaussian noise on every pose, as :func:`pose_noise` models it.

    Args:
        series: PoseSeries (the poses without noise, e.g. a fitted model's).
        noise: PoseNoise (``position`` [m] per axis, ``orientation`` [rad] per rotation axis).
        rng: numpy Generator.

    Returns:
        PoseSeries at the same stamps: positions plus noise, orientations turned by a random
        world-frame rotation vector.
    """
    position = series.position + rng.normal(0.0, noise.position, series.position.shape)
    turn = torch.as_tensor(rng.normal(0.0, noise.orientation, series.position.shape))
    orientation = quat_normalize(quat_multiply(quat_exp(turn), torch.as_tensor(series.orientation, dtype=turn.dtype)))
    return PoseSeries(series.times.copy(), position, orientation.numpy())


def at_rest_at_start(series, noise):
    """Whether an object lies still over its first REST_POSES poses (PoseSeries, PoseNoise)."""
    count = min(REST_POSES, len(series))
    spread = np.abs(series.position[:count] - series.position[:count].mean(0)).max()
    return bool(spread < REST_SIGMAS * max(noise.position, 1e-6))


def interpolate_poses(series, times):
    """Poses of a series at ``times``: ``(position (N, 3) [m], orientation (N, 4) (w, x, y, z))``.

    The signals module's interpolation (linear positions, slerp quaternions) on ``times``
    clamped to the series' span: outside it an object stands at its first or last pose seen
    (the pair distances are wanted at every stamp of every object, and the streams of two
    objects need not start and end together), where :func:`~.signals.interpolate` gives NaN.
    """
    query = np.clip(np.asarray(times, dtype=np.float64), series.times[0], series.times[-1])
    position, _ = interpolate(series.times, series.position, query)
    orientation, _ = interpolate_quaternions(series.times, series.orientation, query)
    return position, orientation


def _pair_distances(world, observations, times):
    """Observed distance of every object-object pair at ``times``: {(a, b): (N,)} [m]."""
    names = world.object_names
    poses = [interpolate_poses(observations[name], times) for name in names]
    # Detection reads poses only: the (unbatched) zero velocities are never used.
    state = world.initial_state(position=np.stack([p for p, _ in poses], 1), orientation=np.stack([q for _, q in poses], 1))
    with torch.no_grad():
        contacts = world.detect(state, margin=DETECTION_RANGE)
    out = {}
    for pair in world.pairs:
        if pair.a.kind == "object" and pair.b.kind == "object" and pair.count:
            gap = contacts.gap[..., pair.start : pair.start + pair.count]
            out[(pair.a.name, pair.b.name)] = gap.amin(-1).numpy()
    return out


def contact_events(world, observations, noise, at_rest=()):
    """First contact of every pair of objects that touch in the data.

    Args:
        world: ContactWorld of the objects (shapes; no robot).
        observations: Object name -> PoseSeries (world frame).
        noise: PoseNoise of the camera.
        at_rest: Objects at rest at the start: the moment one leaves its rest pose also
            counts as a contact with the nearest object (a hit seen before the shapes are).

    Returns:
        List of ContactEvent sorted by time (pairs that never touch are absent).
    """
    times = np.unique(np.concatenate([observations[name].times for name in world.object_names]))
    distances = _pair_distances(world, observations, times)
    moved = {name: move_time(observations[name], noise) for name in at_rest}
    events = []
    for (a, b), distance in distances.items():
        threshold = CONTACT_FLOOR + CONTACT_SIGMAS * math.sqrt(2.0) * noise.position
        touching = distance < threshold
        candidates = [times[np.argmax(touching)]] if touching.any() else []
        candidates += [moved[n] for n in (a, b) if moved.get(n) is not None and _nearest(distances, n, moved[n], times) == {a, b}]
        if not candidates:
            continue
        time = float(min(candidates))
        before = times[times < time]
        events.append(ContactEvent((a, b), time, float(before[-1]) if before.size else float(times[0]), float(distance.min())))
    return sorted(events, key=lambda event: event.time)


def move_time(series, noise):
    """First time a resting object is MOVE_SIGMAS noise sigmas away from its rest pose, or None."""
    count = min(REST_POSES, len(series))
    rest = series.position[:count].mean(0)
    moved = np.linalg.norm(series.position - rest, axis=1) > MOVE_SIGMAS * max(noise.position, 1e-6) * math.sqrt(3)
    return float(series.times[np.argmax(moved)]) if moved.any() else None


def _nearest(distances, name, time, times):
    """The object pair (as a set) involving ``name`` with the smallest distance at ``time``."""
    index = int(np.searchsorted(times, time))
    best = min(((d[min(index, d.size - 1)], pair) for pair, d in distances.items() if name in pair), default=None)
    return set(best[1]) if best else set()
