"""Online estimator: keeps the model current while the robot works.

Joint states stream in (any rate); whenever the arm rests long enough, the rest interval is
averaged into a static pose; a sliding window keeps the most recent poses. Every update
period the estimator re-identifies the requested groups, warm-started from its current
estimate with a bounded number of residual evaluations, on all but the most recent poses,
and accepts the candidate only if it predicts the held-back recent poses at least as well as
the current model and every parameter stays inside its physical (and configured) bounds.
Camera poses, when configured, are kept in their own window.
"""

import collections
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from diffsim_ros.dynamics.passive import passive_torques
from diffsim_ros.dynamics.rnea import rnea
from diffsim_ros.estimation.data import CameraObservations, DataError, Dataset, StaticPoses
from diffsim_ros.estimation.identification import camera_initial_guess, identify
from diffsim_ros.estimation.residuals import StaticTorqueResidual

__all__ = ["OnlineEstimatorConfig", "OnlineUpdate", "OnlineEstimator"]


@dataclass(frozen=True)
class OnlineEstimatorConfig:
    """Tuning of the online estimator.

    Attributes:
        groups: Parameter groups to keep current (static groups and ``camera``).
        window_poses: Static poses kept (oldest dropped first).
        window_seconds: Poses older than this are dropped [s].
        rest_velocity: Max |velocity| of every joint at rest [rad/s].
        rest_duration: Minimum rest duration averaged into one pose [s].
        max_rest_duration: A longer rest is cut into several poses [s].
        min_poses: Poses needed before the first update.
        holdout: Most recent poses held back to validate a candidate (>= 1).
        update_period: Seconds between updates.
        max_iterations: Residual evaluations per update (bounded work).
        acceptance_margin: A candidate may be this much worse (relative) on the held-back poses.
        bounds: Extra plausibility bounds ``name -> (low, high)`` on scalar parameters.
        effort_std_floor: Floor of an averaged effort's standard deviation [N·m].
        camera_window: Camera observations kept.
        torque_window: Samples used for the causal torque estimate.
    """

    groups: tuple = ("payload", "spring")
    window_poses: int = 40
    window_seconds: float = 600.0
    rest_velocity: float = 0.01
    rest_duration: float = 0.3
    max_rest_duration: float = 2.0
    min_poses: int = 8
    holdout: int = 3
    update_period: float = 2.0
    max_iterations: int = 12
    acceptance_margin: float = 0.02
    bounds: dict = field(default_factory=dict)
    effort_std_floor: float = 2e-3
    camera_window: int = 300
    torque_window: int = 21

    def __post_init__(self):
        if self.holdout < 1 or self.min_poses < self.holdout + 2:
            raise ValueError("need holdout >= 1 and min_poses >= holdout + 2")
        for name, bound in self.bounds.items():
            if len(bound) != 2 or not bound[0] < bound[1]:
                raise ValueError(f"bounds[{name!r}] must be (low, high) with low < high")


@dataclass(frozen=True)
class OnlineUpdate:
    """Outcome of one update attempt.

    Attributes:
        time: When it ran [s].
        accepted: Whether the candidate replaced the estimate.
        reason: Why (accepted, worse on held-back poses, out of bounds, not identifiable...).
        holdout_rms_before: Held-back static-torque RMS of the current model [N·m].
        holdout_rms_after: Same for the candidate [N·m] (nan when there was no candidate).
        poses: Static poses in the window.
    """

    time: float
    accepted: bool
    reason: str
    holdout_rms_before: float
    holdout_rms_after: float
    poses: int


class _RestDetector:
    """Turns a stream of joint states into averaged rest intervals."""

    def __init__(self, config):
        self.config = config
        self.samples = []  # (t, q, effort) of the current rest run

    def add(self, t, q, qd, effort):
        """Feed one sample; returns a finished (q_mean, effort_mean, effort_std, t) or None."""
        at_rest = effort is not None and np.all(np.abs(qd) < self.config.rest_velocity)
        finished = None
        if at_rest:
            self.samples.append((t, q, effort))
            if self.samples[-1][0] - self.samples[0][0] >= self.config.max_rest_duration:
                finished = self._close()
        elif self.samples:
            finished = self._close()
        return finished

    def _close(self):
        samples, self.samples = self.samples, []
        times = np.array([s[0] for s in samples])
        if len(samples) < 3 or times[-1] - times[0] < self.config.rest_duration:
            return None
        q = np.array([s[1] for s in samples])
        effort = np.array([s[2] for s in samples])
        std = np.maximum(effort.std(0) / math.sqrt(len(samples)), self.config.effort_std_floor)
        return q.mean(0), effort.mean(0), std, times[-1]


class OnlineEstimator:
    """Sliding-window, warm-started, validated parameter estimation.

    Args:
        model: Nominal (or previously calibrated) RobotModel, float64 recommended.
        config: OnlineEstimatorConfig.
        camera_frame: Tracked link of the camera stream (needed for the ``camera`` group).
        camera_pose: Initial camera pose (4, 4); default: closed form once data arrive.
    """

    def __init__(self, model, config=OnlineEstimatorConfig(), camera_frame=None, camera_pose=None):
        if "camera" in config.groups and camera_frame is None:
            raise ValueError("group 'camera' needs camera_frame")
        unsupported = [g for g in config.groups if g in ("damping", "friction")]
        if unsupported:
            raise ValueError(f"online groups {unsupported} need trajectory data; use diffsim-ros calibrate offline")
        self.nominal = model
        self.model = model
        self.config = config
        self.camera_frame = camera_frame
        self.camera_pose = None if camera_pose is None else np.asarray(camera_pose, float)
        self.values, self.stddev = {}, {}
        self.updates = []
        self._poses = collections.deque(maxlen=config.window_poses)
        self._camera = collections.deque(maxlen=config.camera_window)
        self._recent = collections.deque(maxlen=max(3, config.torque_window))
        self._detector = _RestDetector(config)
        self._last_update = -math.inf
        self._poses_at_last_update = 0
        self._added = 0

    # ------------------------------------------------------------------ inputs
    def add_joint_state(self, t, q, qd=None, effort=None):
        """One joint-state sample in model order: t [s], q [rad], qd [rad/s], effort [N·m].

        Non-finite samples are ignored (the caller counts them). Velocities, when not
        measured, are estimated from the recent positions.
        """
        q = np.asarray(q, float)
        if not np.all(np.isfinite(q)) or (effort is not None and not np.all(np.isfinite(effort))):
            return
        self._recent.append((float(t), q))
        if qd is None or not np.all(np.isfinite(qd)):
            qd = self._velocity_estimate()
        pose = self._detector.add(float(t), q, np.asarray(qd, float), None if effort is None else np.asarray(effort, float))
        if pose is not None:
            self._poses.append(pose)
            self._added += 1

    def add_camera_pose(self, t, position, quaternion_wxyz):
        """A camera measurement of the tracked frame: position [m], quaternion (w, x, y, z)."""
        if not self._recent or not np.all(np.isfinite(position)) or not np.all(np.isfinite(quaternion_wxyz)):
            return
        times = np.array([s[0] for s in self._recent])
        if not times[0] <= t <= times[-1] + 0.05:
            return
        q = np.array([np.interp(t, times, [s[1][j] for s in self._recent]) for j in range(len(self._recent[0][1]))])
        self._camera.append((q, np.asarray(position, float), np.asarray(quaternion_wxyz, float)))

    def _velocity_estimate(self):
        if len(self._recent) < 3:
            return np.zeros_like(self._recent[-1][1])
        times = np.array([s[0] for s in self._recent])
        q = np.array([s[1] for s in self._recent])
        return np.polyfit(times - times[-1], q, 1)[0]

    # ------------------------------------------------------------------ outputs
    @property
    def pose_count(self):
        return len(self._poses)

    def estimated_torques(self):
        """Causal inverse-dynamics torque estimate at the latest sample [N·m], shape (n,), or None.

        Positions over the last ``torque_window`` samples are fitted with a quadratic; its
        derivatives at the latest time give qd and qdd (no raw differencing of noisy data).
        """
        if len(self._recent) < self.config.torque_window:
            return None
        times = np.array([s[0] for s in self._recent])
        q = np.array([s[1] for s in self._recent])
        coeff = np.polyfit(times - times[-1], q, 2)
        qd, qdd = coeff[1], 2.0 * coeff[0]
        like = self.model.params.mass
        args = [torch.as_tensor(x, dtype=like.dtype, device=like.device) for x in (q[-1], qd, qdd)]
        with torch.no_grad():
            tau = rnea(self.model, *args) - passive_torques(self.model, args[0], args[1])
        return tau.cpu().numpy()

    def estimates(self):
        """Dict name -> (value, stddev) of the accepted estimates."""
        return {name: (self.values[name], self.stddev.get(name)) for name in self.values}

    # ------------------------------------------------------------------ update
    def _static(self, poses):
        return StaticPoses(np.array([p[0] for p in poses]), np.array([p[1] for p in poses]), np.array([p[2] for p in poses]))

    def _holdout_rms(self, model, poses):
        block = StaticTorqueResidual(self._static(poses), model)
        with torch.no_grad():
            err = block.predict(model).cpu().numpy() - block.effort.cpu().numpy()
        return float(np.sqrt(np.mean(err**2)))

    def _in_bounds(self, values):
        for name, (low, high) in self.config.bounds.items():
            if name in values and not np.all((low <= values[name]) & (values[name] <= high)):
                return f"{name} = {values[name]} outside the configured bounds [{low}, {high}]"
        return None

    def update(self, now):
        """Run one bounded update if it is due and new poses arrived.

        Returns:
            OnlineUpdate, or None when no update was due.
        """
        cfg = self.config
        while self._poses and now - self._poses[0][3] > cfg.window_seconds:
            self._poses.popleft()
        due = now - self._last_update >= cfg.update_period and self._added > self._poses_at_last_update
        if not due or len(self._poses) < cfg.min_poses:
            return None
        self._last_update = now
        self._poses_at_last_update = self._added
        poses = list(self._poses)
        train, held = poses[: -cfg.holdout], poses[-cfg.holdout :]
        before = self._holdout_rms(self.model, held)
        camera = None
        if "camera" in cfg.groups and len(self._camera) >= 10:
            camera = CameraObservations(
                self.camera_frame, np.array([c[0] for c in self._camera]), np.array([c[1] for c in self._camera]),
                np.array([c[2] for c in self._camera]),
            )
        groups = tuple(g for g in cfg.groups if g != "camera" or camera is not None)
        try:
            guess = self.camera_pose if self.camera_pose is not None or camera is None else camera_initial_guess(self.model, camera)
            result = identify(
                self.model, Dataset(static=self._static(train), camera=camera), groups,
                camera_guess=guess, max_iterations=cfg.max_iterations,
            )
        except DataError as err:
            return self._record(now, False, f"no update: {err}", before, math.nan, len(poses))
        after = self._holdout_rms(result.model, held)
        problem = self._in_bounds(result.values)
        if problem:
            return self._record(now, False, f"rejected: {problem}", before, after, len(poses))
        if after > before * (1.0 + cfg.acceptance_margin) + 1e-9:
            return self._record(now, False, f"rejected: held-back RMS {after:.4f} > {before:.4f} N·m", before, after, len(poses))
        self.model = result.model
        self.values.update(result.values)
        self.stddev.update(result.stddev)
        if result.camera_pose is not None:
            self.camera_pose = result.camera_pose
        reason = "accepted" + (f" ({len(result.unidentifiable)} parameters not identifiable yet)" if result.unidentifiable else "")
        return self._record(now, True, reason, before, after, len(poses))

    def _record(self, now, accepted, reason, before, after, poses):
        update = OnlineUpdate(now, accepted, reason, before, after, poses)
        self.updates.append(update)
        return update
