"""Streaming estimator: keeps the model current while the robot works.

The identification engine of the offline calibration, run on a sliding window:

* Joint states (with efforts), commanded torques and camera poses stream in. Every update
  takes the last ``window_seconds`` of them through the same data preparation as a bag
  (:func:`~diffsim_ros.estimation.preparation.prepare_dataset`: filtered motion on an
  integer-nanosecond grid, torques as the robot applied them) and the rests through the
  same rest detector; rests are kept longer (``rest_window_seconds``, ``window_poses``),
  since a working arm rests rarely.
* The newest data are held back: the last ``holdout_seconds`` of motion and the ``holdout``
  newest rests. The rest is fitted by :func:`~diffsim_ros.estimation.identification.identify`
  (one joint problem; rigid-body or PBD residuals), warm-started from the current estimate,
  with a bounded number of residual evaluations (``max_iterations``, shrunk to fit
  ``cpu_budget``). A candidate replaces the estimate only if every parameter is plausible
  (the shared bounds and the configured ones) and it predicts the held-back data no worse
  than the current model.
* Change detection: when the current model predicts the held-back data ``change_ratio``
  times worse than the data it was fitted on (a payload picked up, a spring changed), the
  data before the held-back span stop voting and the window grows again from there.
"""

import collections
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from diffsim_ros.dynamics.passive import passive_torques
from diffsim_ros.dynamics.rnea import rnea
from diffsim_ros.estimation.data import MIN_MOTION_SECONDS, MIN_REST_POSES, DataError, Dataset, StaticPoses, \
    data_shortfall, static_poses_from_intervals
from diffsim_ros.estimation.identification import IdentificationSettings, camera_initial_guess, groups_with_data, \
    identify, prediction_errors
from diffsim_ros.estimation.preparation import DatasetOptions, prepare_dataset
from diffsim_ros.estimation.signals import detect_static_segments, near_limits, segments_away_from
from diffsim_ros.estimation.streams import JointStateSeries, PoseSeries, RobotStreams, StreamStats, TorqueSeries
from diffsim_ros.vocabulary import MODELS, ONLINE_METHODS, TORQUE_SOURCES

__all__ = ["OnlineEstimatorConfig", "OnlineUpdate", "OnlineEstimator", "MODELS", "METHODS", "causal_torques", "configured_bounds_problem"]

METHODS = ONLINE_METHODS

_REST_FILTER_WINDOW = 0.1  # [s] Savitzky-Golay window of the rest detector (as offline)
_NS = 1_000_000_000
_CHANGE_RESOLUTION = 0.25  # [s] spans scanned to locate a change (older data at most this long stay)


@dataclass(frozen=True)
class OnlineEstimatorConfig:
    """Tuning of the streaming estimator.

    Attributes:
        groups: Parameter groups to keep current (any of identify()'s groups).
        model: ``"rigid"`` or ``"pbd"``: the model the residuals run through.
        window_seconds: Motion and camera data kept [s].
        holdout_seconds: Newest motion held back to validate a candidate [s].
        min_motion_seconds: Training motion needed for an update without enough rests [s].
        window_poses: Rest poses kept (oldest dropped first).
        rest_window_seconds: Rest poses older than this are dropped [s].
        rest_velocity: Max filtered speed of every joint at rest [rad/s].
        rest_duration: Shortest rest averaged into a pose [s].
        max_rest_duration: A longer rest is cut into several poses [s].
        min_poses: Rest poses needed for an update without enough motion.
        holdout: Newest rest poses held back to validate a candidate (>= 1).
        update_period: Seconds between updates.
        max_iterations: Residual evaluations per solve (bounded work).
        cpu_budget: CPU seconds one update may take (0: no budget); the evaluations of the
            next update are cut to fit, measured on the previous one.
        acceptance_margin: A candidate may predict the held-back data this much worse
            (relative mean square) and still be accepted.
        change_ratio: The held-back data predicted this many times worse (mean square)
            than the training data by the current model means a change: older data are
            forgotten.
        torque_source: ``"auto"``, ``"commanded"`` or ``"effort"`` (as offline).
        bounds: Extra plausibility bounds ``name -> (low, high)`` on scalar parameters.
        effort_std_floor: Floor of an averaged effort's standard deviation [N·m].
        motion_rate: Filtered motion enters the fits at no more than this rate [Hz] (every
            k-th sample; 0: every sample). The samples of one smoothing window are strongly
            correlated: thinning cuts the work of an update about k-fold and loses little.
        camera_window: At most this many camera observations per fit.
        torque_window: Samples used for the causal torque estimate.
        rest_outlier: Rests the accepted model misses by more than this are forgotten.
            RMS in units of the rest's own effort noise: something the model does not know
            held the arm (a hand, an obstacle), or the robot changed since.
        method: ``"batch"`` (this module: a windowed refit every ``update_period``) or
            ``"streaming"`` (:mod:`~diffsim_ros.estimation.streaming`: accumulated statistics,
            bounded work per sample, an update every ``refresh_period``; rigid model, groups
            payload, spring, damping, friction).
        refresh_period: Streaming: seconds between updates (new samples are filtered, enter the
            statistics and a validated estimate is refreshed) [s].
        forget_seconds: Streaming: time constant of the exponential forgetting of the
            statistics [s] (the batch's ``window_seconds``).
        validation_seconds: Streaming: the newest motion held back to validate a candidate [s].
        change_threshold: Streaming: the generalized likelihood ratio (chi-square, in units of the
            serially correlated noise) above which the newest ``change_window`` seconds of data
            mean a payload change.
        change_window: Streaming: newest data [s] scanned for a change.
        change_min_seconds: Streaming: motion after a change [s] before the estimate is refitted.
        change_min_mass: Streaming: a change must move the payload's mass by at least this [kg].
    """

    groups: tuple = ("payload", "spring")
    model: str = "rigid"
    window_seconds: float = 20.0
    holdout_seconds: float = 2.0
    min_motion_seconds: float = MIN_MOTION_SECONDS
    window_poses: int = 40
    rest_window_seconds: float = 600.0
    rest_velocity: float = 0.01
    rest_duration: float = 0.3
    max_rest_duration: float = 2.0
    min_poses: int = MIN_REST_POSES
    holdout: int = 3
    update_period: float = 2.0
    max_iterations: int = 12
    cpu_budget: float = 0.0
    acceptance_margin: float = 0.02
    change_ratio: float = 4.0
    torque_source: str = "auto"
    bounds: dict = field(default_factory=dict)
    effort_std_floor: float = 2e-3
    motion_rate: float = 50.0
    camera_window: int = 300
    torque_window: int = 21
    rest_outlier: float = 10.0
    method: str = "batch"
    refresh_period: float = 0.1
    forget_seconds: float = 20.0
    validation_seconds: float = 0.3
    change_threshold: float = 50.0
    change_window: float = 1.0
    change_min_seconds: float = 0.5
    change_min_mass: float = 0.05

    def __post_init__(self):
        if self.holdout < 1 or self.min_poses < self.holdout + 2:
            raise ValueError("need holdout >= 1 and min_poses >= holdout + 2")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if not 0 < self.holdout_seconds < self.window_seconds:
            raise ValueError("need 0 < holdout_seconds < window_seconds")
        # Each value is named alone; NaN fails every comparison.
        _check_at_least(self, ("min_motion_seconds", "update_period", "rest_window_seconds", "rest_velocity",
                               "rest_duration", "rest_outlier", "effort_std_floor"), 0.0, strict=True)
        _check_at_least(self, ("cpu_budget", "motion_rate", "acceptance_margin"), 0.0)
        _check_at_least(self, ("window_poses", "max_iterations", "camera_window"), 1)
        _check_at_least(self, ("torque_window",), 3)  # a quadratic fit
        _check_at_least(self, ("change_ratio",), 1.0, strict=True)
        _check_at_least(self, ("refresh_period", "forget_seconds", "validation_seconds", "change_threshold",
                               "change_window", "change_min_seconds", "change_min_mass"), 0.0, strict=True)
        if not self.max_rest_duration >= self.rest_duration:
            raise ValueError(f"max_rest_duration must be >= rest_duration, got {self.max_rest_duration!r}")
        if self.torque_source not in TORQUE_SOURCES:
            raise ValueError(f"torque_source must be auto, commanded or effort, got {self.torque_source!r}")
        for name, bound in self.bounds.items():
            if len(bound) != 2 or not bound[0] < bound[1]:
                raise ValueError(f"bounds[{name!r}] must be (low, high) with low < high")

    def dataset_options(self):
        """DatasetOptions of the motion and camera data (as offline)."""
        return DatasetOptions(static_velocity_tolerance=self.rest_velocity, static_min_duration=self.rest_duration,
                              effort_std_floor=self.effort_std_floor, torque_source=self.torque_source,
                              camera_samples=self.camera_window)


def _check_at_least(config, names, low, strict=False):
    """ValueError naming the first of ``config``'s fields ``names`` not above (``strict``) or at least ``low``."""
    for name in names:
        value = getattr(config, name)
        if not (value > low if strict else value >= low) or value == math.inf:
            raise ValueError(f"{name} must be {'>' if strict else '>='} {low:g} and finite, got {value!r}")


@dataclass(frozen=True)
class OnlineUpdate:
    """Outcome of one update attempt.

    Attributes:
        time: When it ran (stream time) [s].
        accepted: Whether the candidate replaced the estimate.
        reason: Why (accepted, worse on held-back data, implausible, change detected...).
        holdout_rms_before: Held-back prediction error of the current model: RMS of the
            noise-normalized residuals (1 = at the noise level).
        holdout_rms_after: The same for the candidate (nan when there was none).
        poses: Rest poses in the window.
        motion_seconds: Training motion in the window [s].
        cpu_seconds: CPU time of the update [s].
        values: Accepted estimate after the update (name -> value).
        stddev: Its standard deviations.
    """

    time: float
    accepted: bool
    reason: str
    holdout_rms_before: float
    holdout_rms_after: float
    poses: int
    motion_seconds: float = 0.0
    cpu_seconds: float = 0.0
    values: dict = field(default_factory=dict)
    stddev: dict = field(default_factory=dict)


def configured_bounds_problem(bounds, values):
    """Why ``values`` (name -> array) break the configured ``bounds`` (name -> (low, high)), or None."""
    for name, (low, high) in bounds.items():
        if name in values and not np.all((low <= values[name]) & (values[name] <= high)):
            return f"{name} = {values[name]} outside the configured bounds [{low}, {high}]"
    return None


def causal_torques(model, recent, samples):
    """Inverse-dynamics torque at the latest of ``recent`` ``(t [s], q (n,))`` samples [N·m], (n,), or None.

    Positions over the last ``samples`` samples are fitted with a quadratic; its derivatives at
    the latest time give qd and qdd (no raw differencing of noisy data).
    """
    if len(recent) < samples:
        return None
    recent = list(recent)[-samples:]
    times = np.array([s[0] for s in recent])
    q = np.array([s[1] for s in recent])
    coeff = np.polyfit(times - times[-1], q, 2)
    qd, qdd = coeff[1], 2.0 * coeff[0]
    like = model.params.mass
    args = [torch.as_tensor(x, dtype=like.dtype, device=like.device) for x in (q[-1], qd, qdd)]
    with torch.no_grad():
        tau = rnea(model, *args) - passive_torques(model, args[0], args[1])
    return tau.cpu().numpy()


def _chunks(start, stop, longest):
    """[start, stop] cut into consecutive pieces of ``longest`` (the last one may be shorter)."""
    edges = list(np.arange(start, stop, longest)) + [stop]
    return list(zip(edges[:-1], edges[1:]))


def _strided(trajectory, k):
    """Every k-th sample of a trajectory (same torque signal and clock)."""
    if k == 1:
        return trajectory
    t = trajectory
    return replace(t, dt=t.dt * k, q=t.q[::k], qd=t.qd[::k], tau=t.tau[::k], qdd=None if t.qdd is None else t.qdd[::k],
                   tau_rate=None if t.tau_rate is None else t.tau_rate[::k], filter_span=-(-t.filter_span // k))


class OnlineEstimator:
    """Sliding-window, warm-started, validated identification (module docstring).

    Args:
        model: Nominal (or previously calibrated) RobotModel, float64 recommended.
        config: OnlineEstimatorConfig.
        camera_frame: Tracked link of the camera stream (needed for the ``camera`` group).
        camera_pose: Initial camera pose (4, 4); default: closed form once data arrive.
        settings: IdentificationSettings of the fits (default: plain least squares, noise
            weights from the data as given; ``max_iterations`` comes from the config).

    Inputs are stamped in seconds on one clock (the stream's); samples older than the
    newest one are ignored.
    """

    def __init__(self, model, config=OnlineEstimatorConfig(), camera_frame=None, camera_pose=None, settings=None):
        if "camera" in config.groups and camera_frame is None:
            raise ValueError("group 'camera' needs camera_frame")
        self.nominal = self.model = model
        self._limits = (model.lower.detach().cpu().numpy(), model.upper.detach().cpu().numpy())
        self.config = config
        self.camera_frame = camera_frame
        self.camera_pose = None if camera_pose is None else np.asarray(camera_pose, float)
        self.settings = settings or IdentificationSettings(reweight=False, robust="linear")
        self.values, self.stddev = {}, {}
        self.updates = []
        self._origin = None  # stream time [s] of stamp 0
        self._joints = collections.deque()  # (stamp_ns, q, effort or None)
        self._commands = collections.deque()  # (stamp_ns, tau)
        self._camera = collections.deque()  # (stamp_ns, position, quaternion)
        self._rests = collections.deque(maxlen=config.window_poses)  # (start_ns, stop_ns, q, effort, std)
        self._rest_until_ns = -1
        self._recent = collections.deque(maxlen=max(3, config.torque_window))
        self._change_ns = -(2**62)
        self._last_update_ns = None
        self._fresh = False
        self._iterations = config.max_iterations
        self._held_scores = []  # held-back scores of the current model at past updates

    # ------------------------------------------------------------------ inputs
    def _stamp(self, t):
        if self._origin is None:
            self._origin = float(t)
        return int(round((float(t) - self._origin) * _NS))

    @staticmethod
    def _in_order(buffer, stamp):
        return not buffer or stamp > buffer[-1][0]

    def add_joint_state(self, t, q, qd=None, effort=None):
        """One joint-state sample in model order: t [s], q [rad], effort [N·m] (or None).

        Non-finite and out-of-order samples are ignored (the node counts them). Velocities
        are not used: the motion is filtered from the positions, as offline.
        """
        q = np.asarray(q, float)
        effort = None if effort is None else np.asarray(effort, float)
        if not np.all(np.isfinite(q)) or (effort is not None and not np.all(np.isfinite(effort))):
            return
        stamp = self._stamp(t)
        if not self._in_order(self._joints, stamp):
            return
        self._joints.append((stamp, q, effort))
        self._recent.append((float(t), q))
        self._fresh = True

    def add_commanded_torque(self, t, tau):
        """A commanded motor torque [N·m] (model order), applied from ``t`` [s] on."""
        tau = np.asarray(tau, float)
        stamp = self._stamp(t)
        if np.all(np.isfinite(tau)) and self._in_order(self._commands, stamp):
            self._commands.append((stamp, tau))

    def add_camera_pose(self, t, position, quaternion_wxyz):
        """A camera measurement of the tracked frame: position [m], quaternion (w, x, y, z)."""
        position, quaternion = np.asarray(position, float), np.asarray(quaternion_wxyz, float)
        stamp = self._stamp(t)
        if np.all(np.isfinite(position)) and np.all(np.isfinite(quaternion)) and self._in_order(self._camera, stamp):
            self._camera.append((stamp, position, quaternion / np.linalg.norm(quaternion)))

    # ------------------------------------------------------------------ outputs
    @property
    def pose_count(self):
        """Rest poses kept."""
        return len(self._rests)

    def estimated_torques(self):
        """Causal inverse-dynamics torque estimate at the latest sample [N·m], shape (n,), or None.

        Positions over the last ``torque_window`` samples are fitted with a quadratic; its
        derivatives at the latest time give qd and qdd (no raw differencing of noisy data).
        """
        return causal_torques(self.model, self._recent, self.config.torque_window)

    def estimates(self):
        """Dict name -> (value, stddev) of the accepted estimates."""
        return {name: (self.values[name], self.stddev.get(name)) for name in self.values}

    # ------------------------------------------------------------------ windows
    def _trim(self, now_ns):
        """Drop what no window needs any more."""
        keep_from = now_ns - int(self.config.window_seconds * _NS) - _NS  # + filter and hold margins
        for buffer in (self._joints, self._camera):
            while buffer and buffer[0][0] < keep_from:
                buffer.popleft()
        while len(self._commands) > 1 and self._commands[1][0] < keep_from:
            self._commands.popleft()  # the command in force at keep_from stays
        oldest = max(now_ns - int(self.config.rest_window_seconds * _NS), self._change_ns)
        while self._rests and self._rests[0][0] < oldest:
            self._rests.popleft()

    def _streams(self, start_ns, stop_ns):
        """The buffered streams in [start_ns, stop_ns] (the command in force at start included)."""
        joints = [s for s in self._joints if start_ns <= s[0] <= stop_ns]
        if len(joints) < 2:
            return None
        stamps = np.array([s[0] for s in joints], dtype=np.int64)
        efforts = np.array([s[2] for s in joints]) if all(s[2] is not None for s in joints) else None
        stats = lambda n, what: StreamStats(what, what, n, n)  # noqa: E731
        js = JointStateSeries(tuple(self.model.joint_names), stamps, stamps * 1e-9, np.array([s[1] for s in joints]),
                              None, efforts, stats(len(joints), "joint_states"))
        commands = [s for s in self._commands if s[0] <= stop_ns]
        first = max(0, max((i for i, s in enumerate(commands) if s[0] <= start_ns), default=0))
        commands = commands[first:]
        torques = None
        if len(commands) >= 2:
            c_stamps = np.array([s[0] for s in commands], dtype=np.int64)
            torques = TorqueSeries(c_stamps, c_stamps * 1e-9, np.array([s[1] for s in commands]),
                                   stats(len(commands), "commanded_torques"))
        camera = [s for s in self._camera if start_ns <= s[0] <= stop_ns]
        poses = None
        if camera and self.camera_frame is not None:
            p_stamps = np.array([s[0] for s in camera], dtype=np.int64)
            poses = PoseSeries(p_stamps * 1e-9, np.array([s[1] for s in camera]), np.array([s[2] for s in camera]),
                               frame_id="camera", stamps_ns=p_stamps, stats=stats(len(camera), "camera_pose"))
        return RobotStreams("online window", 0, js, poses, torques)

    def _collect_rests(self, js):
        """Store the rests that ended (or outlasted ``max_rest_duration``) inside the window."""
        cfg = self.config
        if js.efforts is None or len(js.times) < 10:
            return
        segments = detect_static_segments(js.times, js.positions, velocity_tolerance=cfg.rest_velocity,
                                          min_duration=cfg.rest_duration, window=_REST_FILTER_WINDOW)
        margin = cfg.dataset_options().limit_margin
        segments = segments_away_from(segments, js.times, near_limits(js.positions, *self._limits, margin))
        first, last = js.times[0], js.times[-1]
        for seg in segments:
            if seg.t_start <= first + _REST_FILTER_WINDOW:
                continue  # it began before the window: not all of it is seen
            ended = seg.t_stop < last - 2 * _REST_FILTER_WINDOW
            for a, b in _chunks(seg.t_start, seg.t_stop, cfg.max_rest_duration):
                complete = ended or b - a >= cfg.max_rest_duration - 1e-9
                if not complete or b - a < cfg.rest_duration or round(a * _NS) + _NS // 1000 < self._rest_until_ns:
                    continue
                pose = static_poses_from_intervals(js.times, js.positions, js.efforts, [(a, b)], cfg.effort_std_floor)
                self._rests.append((round(a * _NS), round(b * _NS), pose.q[0], pose.effort[0], pose.effort_std[0]))
                self._rest_until_ns = round(b * _NS)

    def _static(self, rests):
        if not rests:
            return None
        return StaticPoses(np.array([r[2] for r in rests]), np.array([r[3] for r in rests]), np.array([r[4] for r in rests]))

    def _motion(self, streams):
        """Trajectories and camera observations of some streams (offline preparation); notes."""
        if streams is None:
            return (), None, "no joint states"
        try:
            dataset, summary = prepare_dataset(streams, self.camera_frame, self.config.dataset_options(), self._limits)
        except DataError as err:  # e.g. no torques at all: rests may still inform the fit
            return (), None, str(err)
        rate = self.config.motion_rate
        strides = [1 if rate <= 0 else max(1, int(round(1.0 / (t.dt * rate)))) for t in dataset.trajectories]
        trajectories = tuple(_strided(t, k) for t, k in zip(dataset.trajectories, strides) if len(t) >= 2 * k)
        return trajectories, dataset.camera, ""

    def _datasets(self, now_ns):
        """(train, held) Datasets of the current window, and the training motion [s]."""
        cfg = self.config
        start = max(now_ns - int(cfg.window_seconds * _NS), self._change_ns)
        cut = now_ns - int(cfg.holdout_seconds * _NS)
        margin = int(cfg.dataset_options().trajectory_filter_window * _NS)
        window = self._streams(start, now_ns)
        if window is not None:
            self._collect_rests(window.joint_states)
        rests = [r for r in self._rests if r[0] >= self._change_ns]
        held_rests = rests[-cfg.holdout:] if len(rests) >= cfg.holdout + 2 else []
        train_rests = rests[: len(rests) - len(held_rests)]
        train_motion, train_camera, _ = self._motion(self._streams(start, cut))
        held_motion, held_camera, _ = self._motion(self._streams(max(start, cut - margin), now_ns))
        train = Dataset(static=self._static(train_rests), trajectories=train_motion, camera=train_camera)
        held = Dataset(static=self._static(held_rests), trajectories=held_motion, camera=held_camera)
        motion = sum(len(t) * t.dt for t in train_motion)
        return train, held, motion, len(rests)

    # ------------------------------------------------------------------ update
    def _simulator(self):
        return None if self.config.model == "rigid" else "pbd"

    def _scores(self, candidates, dataset, groups):
        if not groups_with_data(dataset, groups):
            return [math.nan] * len(candidates)
        return prediction_errors(candidates, dataset, groups_with_data(dataset, groups), settings=self.settings,
                                 simulator=self._simulator())

    def update(self, now):
        """Run one bounded update if it is due and new data arrived.

        Args:
            now: Stream time [s] (the latest sample's stamp, as the inputs).

        Returns:
            OnlineUpdate, or None when no update was due.
        """
        cfg = self.config
        if self._origin is None:
            return None
        now_ns = self._stamp(now)
        if not self._fresh or (self._last_update_ns is not None and now_ns - self._last_update_ns < cfg.update_period * _NS):
            return None
        started = time.thread_time()
        previous_ns, self._last_update_ns, self._fresh = self._last_update_ns, now_ns, False
        self._trim(now_ns)
        train, held, motion, poses = self._datasets(now_ns)
        record = lambda accepted, reason, before=math.nan, after=math.nan: self._record(  # noqa: E731
            now, accepted, reason, before, after, poses, motion, time.thread_time() - started)
        groups = groups_with_data(train, cfg.groups)
        enough = data_shortfall(motion, poses if train.static is not None else 0, cfg.min_motion_seconds, cfg.min_poses) is None
        if not groups or not enough:
            return record(False, f"collecting data ({motion:.1f} s of motion, {poses} rest poses)")
        current = (self.model, self.camera_pose)
        before = self._scores([current], held, cfg.groups)[0]
        if not math.isfinite(before):
            return record(False, "nothing held back to validate a candidate yet")
        fitted = self._scores([current], train, cfg.groups)[0]
        # A change makes the newest data worse than both the data fitted and what held-back
        # data used to score (the mix of rests and motion held back varies from update to update).
        usual = np.median(self._held_scores[-5:]) if len(self._held_scores) >= 3 else 0.0
        self._held_scores.append(before)
        if before > cfg.change_ratio * max(fitted, usual, 1e-12) and self._changed(held, before):
            return self._forget(now_ns, previous_ns, record, before, max(fitted, usual))
        try:
            result = self._fit(train, groups)
        except DataError as err:
            return record(False, f"no update: {err}", math.sqrt(before))
        candidate = (result.model, result.camera_pose if result.camera_pose is not None else self.camera_pose)
        before, after = self._scores([current, candidate], held, cfg.groups)
        self._budget(result, time.thread_time() - started)
        problem = result.poor_fit or self._out_of_bounds(result.values)
        if problem:
            return record(False, f"rejected: {problem}", math.sqrt(before), math.sqrt(after))
        if after > before * (1.0 + cfg.acceptance_margin) + 1e-12:
            return record(False, f"rejected: predicts the held-back data worse ({math.sqrt(after):.3g} > "
                                 f"{math.sqrt(before):.3g})", math.sqrt(before), math.sqrt(after))
        self.model = result.model
        self.values.update(result.values)
        self.stddev.update(result.stddev)
        if result.camera_pose is not None:
            self.camera_pose = result.camera_pose
        pending = [n for n in result.unidentifiable if n not in self.values]
        reason = "accepted" + (f" ({len(pending)} parameters not determined yet)" if pending else "")
        dropped = self._forget_unexplained_rests()
        reason += f"; {dropped} rest poses the estimate cannot explain forgotten" if dropped else ""
        return record(True, reason, math.sqrt(before), math.sqrt(after))

    def _forget_unexplained_rests(self):
        """Drop the rests the current estimate misses by more than ``rest_outlier``; their count."""
        current, limit = (self.model, self.camera_pose), self.config.rest_outlier ** 2
        keep = [rest for rest in self._rests
                if not self._scores([current], Dataset(static=self._static([rest])), ("payload", "spring"))[0] > limit]
        dropped = len(self._rests) - len(keep)
        if dropped:
            self._rests = collections.deque(keep, maxlen=self._rests.maxlen)
        return dropped

    def _fit(self, train, groups):
        guess = self.camera_pose
        if guess is None and "camera" in groups:
            guess = camera_initial_guess(self.model, train.camera)
        settings = replace(self.settings, max_iterations=self._iterations)
        return identify(self.model, train, groups, settings=settings, simulator=self._simulator(), camera_guess=guess)

    def _changed(self, held, before):
        """Whether other parameters explain the held-back data ``change_ratio`` times better.

        A fast move the model reproduces less well also raises the held-back error; only
        parameters that fit the newest data much better mean that the robot changed. The
        refit is scored with every parameter it moved, determined or not: a few seconds of
        data leave some undetermined, and reverting those to the current values undid most
        of the gain on a window straddling a change (2.9 against 4; the change was then
        found one update later).
        """
        groups = groups_with_data(held, self.config.groups)
        try:
            result = self._fit(held, groups)
        except DataError:
            return False
        model, pose = result.fitted
        refitted = self._scores([(model, pose if pose is not None else self.camera_pose)], held, self.config.groups)[0]
        return before > self.config.change_ratio * refitted

    def _forget(self, now_ns, previous_ns, record, before, fitted):
        """A change: data from before it stop voting."""
        start = now_ns - int(self.config.holdout_seconds * _NS)
        if previous_ns is not None:  # the previous held-back span agreed as a whole, but may end after the change
            start = min(start, previous_ns - int(self.config.holdout_seconds * _NS))
        self._change_ns = self._locate_change(start, now_ns, fitted)
        self._held_scores = []
        self._trim(now_ns)
        return record(False, f"change detected at {self._change_ns / _NS:.2f} s of the stream: the held-back data are "
                             f"predicted {before / max(fitted, 1e-12):.1f} times worse than the fitted and the usual "
                             "ones; older data forgotten", math.sqrt(before))

    def _locate_change(self, start_ns, now_ns, reference):
        """Start of the first short motion span from ``start_ns`` on that the current model
        predicts ``change_ratio`` times worse than ``reference`` (``start_ns`` when none does,
        e.g. without motion); what came before it stops voting."""
        step = int(_CHANGE_RESOLUTION * _NS)
        half = int(self.config.dataset_options().trajectory_filter_window * _NS) // 2
        for a in range(start_ns, now_ns - step, step):
            trajectories, _, _ = self._motion(self._streams(a - half, a + step + half))
            if not trajectories:
                continue
            score = self._scores([(self.model, self.camera_pose)], Dataset(trajectories=trajectories), self.config.groups)[0]
            if score > self.config.change_ratio * reference:
                return a
        return start_ns

    def _budget(self, result, cpu):
        """Evaluations of the next update, to fit the CPU budget (measured on this one)."""
        if self.config.cpu_budget <= 0:
            return
        per_evaluation = cpu / (len(result.history) + 3)  # + the start, the covariance and the scores
        self._iterations = int(np.clip(self.config.cpu_budget / per_evaluation - 3, 1, self.config.max_iterations))

    def _out_of_bounds(self, values):
        return configured_bounds_problem(self.config.bounds, values)

    def _record(self, now, accepted, reason, before, after, poses, motion, cpu):
        update = OnlineUpdate(float(now), accepted, reason, before, after, poses, motion, cpu,
                              {k: np.copy(v) for k, v in self.values.items()},
                              {k: np.copy(v) for k, v in self.stddev.items()})
        self.updates.append(update)
        return update
