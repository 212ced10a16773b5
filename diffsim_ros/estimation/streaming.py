"""Streaming rigid-body estimator: bounded work per joint-state sample, refreshed every ``refresh_period``.

Every update (0.1 s by default):

1. the joint states and torques that arrived are filtered as offline
   (:class:`~diffsim_ros.estimation.motion_filter.StreamingMotionFilter`);
2. their regression rows ``tau - known = A phi(theta)``
   (:class:`~diffsim_ros.estimation.torque_regression.TorqueRegression`) become one chunk of
   normal equations (:class:`~diffsim_ros.estimation.information.NormalEquations`); the
   prediction errors of the current estimate feed the serial-correlation estimate and the
   change test (:class:`~diffsim_ros.estimation.change_detection.ChangeDetector`);
3. the newest ``validation_seconds`` of chunks are held back; older chunks enter the
   training statistics, which forget with the time constant ``forget_seconds``; a chunk the
   estimate misses by far more than usual (a collision, a spike) is withheld while the change
   test has not explained it (at most ``change_window``);
4. a candidate is fitted on the training statistics by Gauss-Newton (the nonlinear payload
   and spring-offset coordinates re-linearised at every step, on the statistics, not the
   data), keeping only what the data determine (:mod:`~diffsim_ros.estimation.statistics_fit`);
   it replaces the estimate only if plausible and no worse on the held-back chunks.

A detected change forgets the training data from before it at once: the statistics restart
from the chunks after the change, which the detector kept. The work of an update is that of
its new samples plus a fit of a few tens of coordinates: independent of how long the robot
has run. Rigid model only; groups payload, spring (lever and torsion), damping, friction.
"""

import collections
import math
import time

import numpy as np

from diffsim_ros.estimation.change_detection import ChangeDetector
from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.identification import IdentificationSettings
from diffsim_ros.estimation.information import NormalEquations, SerialCorrelation
from diffsim_ros.estimation.motion_filter import StreamingMotionFilter
from diffsim_ros.estimation.online import OnlineUpdate, causal_torques, configured_bounds_problem
from diffsim_ros.estimation.statistics_fit import fit_statistics
from diffsim_ros.estimation.torque_regression import TorqueRegression

__all__ = ["StreamingEstimator"]

_NS = 1_000_000_000
_REBASE = 0.02  # [rad] a spring offset's expansion point moves once the estimate is this far from it
_OUTLIER_RATIO = 10.0  # a chunk missed this many times worse than the noise (mean square) is withheld
_VARIANCE_FLOOR = 1e-6  # [N²·m²]


class StreamingEstimator:
    """Streaming estimator with the interface of :class:`~diffsim_ros.estimation.online.OnlineEstimator`.

    Args:
        model: Nominal (or calibrated) RobotModel, float64 recommended.
        config: OnlineEstimatorConfig (``method="streaming"``; its streaming fields).
        camera_frame, camera_pose: Not supported (no camera group): must be None.
        settings: IdentificationSettings (torque_std: the initial noise; stiction_velocity;
            bounds; policy).

    Raises:
        ValueError: The rigid model is not selected, or a group it cannot estimate.
    """

    def __init__(self, model, config, camera_frame=None, camera_pose=None, settings=None):
        if config.model != "rigid":
            raise ValueError(f"the streaming estimator runs the rigid model only, got model={config.model!r}")
        if camera_frame is not None and "camera" in config.groups:
            raise ValueError("the streaming estimator does not estimate the camera; use method='batch'")
        self.config, self.settings = config, settings or IdentificationSettings(reweight=False, robust="linear")
        self.regression = TorqueRegression(model, config.groups, self.settings.bounds)
        self.nominal = model
        self.camera_pose = None
        self.values, self.stddev, self.updates = {}, {}, []
        self._limits = (model.lower.detach().cpu().numpy(), model.upper.detach().cpu().numpy())
        friction = "friction" in config.groups or bool((model.params.friction != 0).any())
        self._stiction = self.settings.stiction_velocity if friction else None
        self.filter = StreamingMotionFilter(config.dataset_options(), model.joint_names, self._limits,
                                            slowest=self._stiction is not None)
        self.theta = self.regression.start(model)
        self._model = (self.theta, model)  # (theta, its model): the nominal until an estimate is accepted
        self.variance = np.full(model.nq, self.settings.torque_std**2)
        self._reset_statistics()
        self.detector = self._detector()
        self.serial = None
        self._origin = None
        self._last_joint_ns = self._last_command_ns = -(2**62)
        self._last_update_ns = None
        self._recent = collections.deque(maxlen=max(3, config.torque_window))
        self._change_ns = None
        self._settled = False  # an estimate accepted since the start or the last change

    def _detector(self):
        """The change test of the payload's coordinates (a material change moves its mass), or None without a payload."""
        payload = [b for b in self.regression.blocks if b.kind == "payload"]
        if not payload:
            return None
        tested = np.zeros(self.regression.size, bool)
        tested[payload[0].t0 : payload[0].t0 + 4] = True
        min_step = np.full(self.regression.size, np.inf)
        min_step[payload[0].t0] = self.config.change_min_mass
        return ChangeDetector(self.regression, tested, self.config.change_window * _NS, self.config.change_threshold,
                              min_step)

    def _reset_statistics(self):
        size, n = self.regression.phi_size, self.nominal.nq
        self.train = NormalEquations.zeros(n, size)
        self._held = collections.deque()  # (start_ns, end_ns, NormalEquations, withheld)
        self._train_ns = None  # end of the newest chunk in the training statistics
        self._withheld_since = None

    # ------------------------------------------------------------------ inputs
    def _stamp(self, t):
        if self._origin is None:
            self._origin = float(t)
        return int(round((float(t) - self._origin) * _NS))

    def add_joint_state(self, t, q, qd=None, effort=None):
        """One joint-state sample (model order): t [s], q [rad], effort [N·m] or None; non-finite
        and out-of-order samples are ignored, velocities are not used (filtered from q)."""
        q = np.asarray(q, float)
        effort = None if effort is None else np.asarray(effort, float)
        if not np.all(np.isfinite(q)) or (effort is not None and not np.all(np.isfinite(effort))):
            return
        stamp = self._stamp(t)
        if stamp <= self._last_joint_ns:
            return
        self._last_joint_ns = stamp
        self.filter.add_joint_state(stamp, q, effort)
        self._recent.append((float(t), q))

    def add_commanded_torque(self, t, tau):
        """A commanded motor torque [N·m] (model order), applied from ``t`` [s] on."""
        tau = np.asarray(tau, float)
        stamp = self._stamp(t)
        if np.all(np.isfinite(tau)) and stamp > self._last_command_ns:
            self._last_command_ns = stamp
            self.filter.add_command(stamp, tau)

    def add_camera_pose(self, t, position, quaternion_wxyz):
        """Camera poses are not used by the streaming estimator (no camera group)."""

    # ------------------------------------------------------------------ outputs
    @property
    def pose_count(self):
        """Rest poses kept: none (rests enter as motion samples at zero speed)."""
        return 0

    @property
    def model(self):
        """The nominal model with the accepted estimates (built at the first call after an acceptance)."""
        if self._model[0] is not self.theta:  # theta changes only when an estimate is accepted
            self._model = (self.theta, self.regression.model_at(self.nominal, self.theta))
        return self._model[1]

    def estimated_torques(self):
        """Causal inverse-dynamics torque at the latest sample [N·m], (n,), or None."""
        return causal_torques(self.model, self._recent, self.config.torque_window)

    def estimates(self):
        """Dict name -> (value, stddev) of the accepted estimates."""
        return {name: (self.values[name], self.stddev.get(name)) for name in self.values}

    # ------------------------------------------------------------------ chunks
    def _rows(self, chunk):
        """Regression rows (A, b, w) of a filtered chunk."""
        tau = chunk.tau
        if chunk.measured_efforts:
            delay = float(self.nominal.params.effort_delay)  # not estimated here: the nominal's
            if delay != 0.0:  # the batch estimator corrects efforts by delay * their rate; this one does not
                raise DataError(f"the model's efforts.delay is {delay:g} s and the torques are measured efforts: the "
                                "streaming estimator does not model an effort delay; use method='batch' or commanded "
                                "torques")
            tau = tau - self.nominal.params.effort_bias.detach().cpu().numpy()
        # The rows do not depend on the estimates' values: the nominal model keeps the regression's snapshots.
        a, b = self.regression.rows(self.nominal, chunk.q, chunk.qd, chunk.qdd, tau)
        w = np.ones_like(b) if self._stiction is None else (chunk.slowest >= self._stiction).astype(float)
        return a, b, w

    def _ingest(self, chunk):
        """Filtered samples -> chunk statistics, serial correlation, change test; returns a Change or None."""
        a, b, w = self._rows(chunk)
        if self.serial is None:
            self.serial = SerialCorrelation(self.nominal.nq, 2 * chunk.filter_span)
        errors = (b - a @ self.regression.phi(self.theta)[0]) / np.sqrt(self.variance)
        stats = NormalEquations.of_rows(a, b, w)
        start, end = int(chunk.stamps_ns[0]), int(chunk.stamps_ns[-1])
        mean_square = float(np.sum(w * errors**2) / max(w.sum(), 1.0))
        # Before a first estimate every chunk is missed: nothing is an outlier, and the errors
        # are the model's, not the noise's (their correlation is not the filter's).
        withheld = self._settled and mean_square > _OUTLIER_RATIO
        if self._settled and not withheld:
            self.serial.add(chunk.index, np.where(w > 0, errors, np.nan), self._decay(end - start))
        self._held.append((start, end, stats, withheld))
        if self.detector is None:
            return None
        self.detector.add(start, end, stats)
        if not self._settled:  # no estimate of this regime yet: nothing to test against
            return None
        return self.detector.test(self.theta, self.variance, self.serial.inflation())

    def _decay(self, seconds_ns):
        return math.exp(-seconds_ns / (self.config.forget_seconds * _NS))

    def _train_on(self, start, end, stats):
        elapsed = 0 if self._train_ns is None else max(0, end - self._train_ns)
        self.train = self.train.decayed(self._decay(elapsed)) + stats
        self._train_ns = end

    def _release(self, now_ns):
        """Chunks older than the validation span enter the training statistics (or are dropped as withheld)."""
        keep_ns = now_ns - int(self.config.validation_seconds * _NS)
        while len(self._held) > 1 and self._held[0][1] < keep_ns:  # the newest chunk always validates
            start, end, stats, withheld = self._held.popleft()
            if withheld and self._withheld_since is None:
                self._withheld_since = start
            if not withheld:
                self._withheld_since = None
            if withheld and end - self._withheld_since < self.config.change_window * _NS:
                continue  # unexplained errors: a collision or a spike, unless they persist
            self._train_on(start, end, stats)

    def _restart_at(self, change):
        """A change: training data from before it are forgotten; the chunks since re-enter."""
        self._change_ns = change.start_ns
        self._reset_statistics()
        # The filter mixes a span of samples on either side of the change into the first chunks.
        mixed_ns = change.start_ns + self.filter.span_ns()
        self._held = collections.deque((s, e, st, False) for s, e, st in change.chunks if s >= mixed_ns)
        self.serial.reset()  # the errors since were the old estimate's
        self._settled = False

    # ------------------------------------------------------------------ update
    def update(self, now):
        """Filter the new samples, test for a change and refresh the estimate, if due.

        Args:
            now: Stream time [s] (the latest sample's stamp, as the inputs).

        Returns:
            OnlineUpdate, or None when no update was due or no new sample was filtered.
        """
        if self._origin is None:
            return None
        now_ns = self._stamp(now)
        if self._last_update_ns is not None and now_ns - self._last_update_ns < 0.999 * self.config.refresh_period * _NS:
            return None
        started = time.thread_time()
        self._last_update_ns = now_ns
        try:
            chunk = self.filter.emit()
            change = None if chunk is None else self._ingest(chunk)
        except DataError as err:
            return self._record(now, False, f"no update: {err}", started)
        if chunk is None:
            return None
        note = ""
        if change is not None:
            self._restart_at(change)
            note = (f"change detected at {change.start_ns / _NS:.2f} s of the stream (likelihood ratio "
                    f"{change.statistic:.3g}, explained to {change.fit_ratio:.2f} of the noise, step {np.round(change.step[:4], 3).tolist()}); older data forgotten; ")
        self._release(now_ns)
        return self._refresh(now, started, note)

    def _held_score(self, theta):
        """Mean squared normalized error of the held-back chunks at ``theta`` (nan without any)."""
        held = [stats for _, _, stats, withheld in self._held if not withheld]
        if not held:
            return math.nan
        total = held[0]
        for stats in held[1:]:
            total = total + stats
        count = total.count.sum()
        phi = self.regression.phi(theta)[0]
        return float((total.rss(phi) / self.variance).sum() / count) if count > 0 else math.nan

    def _motion_seconds(self):
        period = self.filter.period_ns or 0
        return float(self.train.count.max()) * period * 1e-9

    def _refresh(self, now, started, note):
        cfg = self.config
        motion = self._motion_seconds()
        needed = cfg.min_motion_seconds if self._change_ns is None else cfg.change_min_seconds
        record = lambda accepted, reason, before=math.nan, after=math.nan: self._record(  # noqa: E731
            now, accepted, note + reason, started, before, after, motion)
        if motion < needed:
            return record(False, f"collecting data ({motion:.1f} s of motion, {needed:g} s needed)")
        before = self._held_score(self.theta)
        if not math.isfinite(before):
            return record(False, "nothing held back to validate a candidate yet")
        inflation = self.serial.inflation()
        fit = fit_statistics(self.regression, self.train, self.variance, inflation, self.theta, self.settings.policy,
                             self.settings.bounds)
        self._update_variance(fit.theta if fit.values else self.theta)
        if not fit.values:
            first = next(iter(fit.rejected.items()), ("", "no data"))
            return record(False, f"no parameter determined ({first[0]}: {first[1]})", math.sqrt(before))
        after = self._held_score(fit.theta)
        if after > before * (1.0 + cfg.acceptance_margin) + 1e-12:
            return record(False, f"rejected: predicts the held-back data worse ({math.sqrt(after):.3g} > "
                                 f"{math.sqrt(before):.3g})", math.sqrt(before), math.sqrt(after))
        problem = configured_bounds_problem(self.config.bounds, fit.values)
        if problem:
            return record(False, f"rejected: {problem}", math.sqrt(before), math.sqrt(after))
        self._accept(fit)
        pending = [n for n in fit.rejected if n not in self.values]
        return record(True, "accepted" + (f" ({len(pending)} parameters not determined yet)" if pending else ""),
                      math.sqrt(before), math.sqrt(after))

    def _accept(self, fit):
        self._settled = True
        self.theta = fit.theta
        self.values.update(fit.values)
        self.stddev.update(fit.stddev)
        transform = self.regression.rebase(self.theta, _REBASE)
        if transform is not None:  # the statistics follow the spring offsets' expansion points
            self.train = self.train.transformed(transform)
            self._held = collections.deque((a, b, s.transformed(transform), w) for a, b, s, w in self._held)
            if self.detector is not None:
                self.detector.transform(transform)

    def _update_variance(self, theta):
        """Noise variance of every column from the training residuals at ``theta`` (variance components)."""
        count = self.train.count
        if count.min() <= 0:
            return
        dof = max(1.0 - self.regression.size / max(self.train.effective_count(), 1.0), 0.5)
        rss = self.train.rss(self.regression.phi(theta)[0])
        self.variance = np.maximum(rss / (count * dof), _VARIANCE_FLOOR)

    def _record(self, now, accepted, reason, started, before=math.nan, after=math.nan, motion=0.0):
        update = OnlineUpdate(float(now), accepted, reason, before, after, 0, motion, time.thread_time() - started,
                              {k: np.copy(v) for k, v in self.values.items()},
                              {k: np.copy(v) for k, v in self.stddev.items()})
        self.updates.append(update)
        return update
