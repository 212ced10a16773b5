"""Online object contact estimation: object poses stream in, every completed event is fitted.

The offline engine of ``diffsim-ros estimate-objects`` (:func:`~diffsim_ros.estimation.
object_fit.fit_objects`) run on the events of a live pose stream:

* **Window.** World-frame poses of every scene object are kept per object for
  ``window_seconds`` (at most ``max_poses``): memory is bounded whatever the stream does.
* **Events.** The camera noise comes from the data (:func:`~diffsim_ros.estimation.
  object_events.pose_noise`). A pose lies still when a window of REST_POSES consecutive poses
  around it stays within REST_SIGMAS noise sigmas of its mean (the at-rest test of
  :func:`~diffsim_ros.estimation.object_events.at_rest_at_start`, slid along the stream); a
  pose no such window covers is moving. An event is a span of motion of any object (a slide,
  a collision) that began after every object lay still (the push itself, which the model does
  not see, is over by the first moving pose) and is complete once every object has lain still
  for ``settle_poses`` poses after it. Its poses, from the first moving one to the end of that
  rest, go to the fit; objects lying still at its start are at rest at the start of the fit.
* **Fit.** :func:`fit_objects` with the scene's unknowns, warm-started: the current estimates
  join the scan grids (the global grids stay, so a changed surface is still found) and are the
  initial guesses where no scan covers a parameter. Work is bounded by evaluation budgets
  (``max_evaluations``, ``stage_evaluations``, ``restarts``) and by the event length
  (``max_event_seconds``).
* **Verdict.** A fit the offline quality check judges poor (rms residual far above the camera
  noise, or drifting residuals: ``poor_fit``) or with an implausible value
  (``friction_max``, ``mass_max``) is rejected and reported with the reason; the
  identifiable parameters of any other fit are accepted.
* **Combination.** Each parameter's estimate is the inverse-variance weighted mean of its
  last ``max_events`` accepted events; its standard deviation is the weighted mean's,
  scaled up by the Birge ratio ``sqrt(chi² / (n - 1))`` when the events disagree beyond their
  own standard deviations (model error the single fits cannot see).
"""

import collections
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.object_events import REST_POSES, REST_SIGMAS, pose_noise
from diffsim_ros.estimation.object_fit import FitSettings, fit_objects
from diffsim_ros.estimation.streams import PoseSeries
from diffsim_ros.sim.contact.errors import ContactError

__all__ = ["OnlineObjectEstimatorConfig", "EventOutcome", "OnlineObjectEstimator", "combine_estimates"]

ACCEPTED, REJECTED, SKIPPED = "accepted", "rejected", "skipped"
# Relative floor of a standard deviation in the inverse-variance weights (noise-free data
# report std 0; their weight must stay finite).
STD_FLOOR = 1e-9


@dataclass(frozen=True)
class OnlineObjectEstimatorConfig:
    """Tuning of the online object estimator.

    Attributes:
        window_seconds: Poses kept per object [s]; an event and the rest before it must fit in it.
        max_poses: At most this many poses kept per object (memory bound).
        settle_poses: Poses every object must lie still after the motion for an event to be complete.
        min_event_poses: Moving poses an event needs to be fitted.
        max_event_seconds: Longer motions are reported, not fitted (an object carried or pushed) [s].
        max_evaluations: Residual evaluations of an event's joint fit (bounded work).
        stage_evaluations: Residual evaluations of the friction fit before a contact.
        restarts: Joint fits restarted from other scanned points when a fit is poor (each one
            up to ``max_evaluations``).
        max_events: Accepted events combined per parameter (older ones stop voting).
        friction_max: Largest plausible friction coefficient.
        mass_max: Largest plausible object mass [kg].
    """

    window_seconds: float = 10.0
    max_poses: int = 600
    settle_poses: int = 6
    min_event_poses: int = 8
    max_event_seconds: float = 3.0
    max_evaluations: int = 40
    stage_evaluations: int = 20
    restarts: int = 0
    max_events: int = 20
    friction_max: float = 2.0
    mass_max: float = 50.0

    def __post_init__(self):
        if not self.window_seconds > 0 or not 0 < self.max_event_seconds < self.window_seconds:
            raise ValueError("need window_seconds > 0 and 0 < max_event_seconds < window_seconds")
        if self.settle_poses < REST_POSES or self.max_poses < 4 * REST_POSES or self.min_event_poses < 3:
            raise ValueError(f"need settle_poses >= {REST_POSES}, max_poses >= {4 * REST_POSES} and min_event_poses >= 3")
        if self.max_evaluations < 1 or self.stage_evaluations < 1 or self.restarts < 0 or self.max_events < 1:
            raise ValueError("need max_evaluations, stage_evaluations and max_events >= 1 and restarts >= 0")
        if not self.friction_max > 0 or not self.mass_max > 0:
            raise ValueError("friction_max and mass_max must be positive")


@dataclass(frozen=True)
class EventOutcome:
    """What became of one event.

    Attributes:
        start: Time of its first moving pose [s] (the stream's stamps).
        end: Time of its last pose (end of the rest after it) [s].
        status: ``"accepted"``, ``"rejected"`` (a fit judged poor, implausible or undetermined)
            or ``"skipped"`` (not fitted: too long, too short, no rest before it).
        reason: One line saying why (the fit's verdict for fitted events).
        poses: Object -> poses given to the fit.
        values: Accepted parameter values (empty unless accepted).
        std: Their standard deviations.
        fit_status: ``fit_objects``' status (``""`` when not fitted).
        seconds: Wall time of the fit [s] (0 when not fitted).
        evaluations: Residual evaluations of the fit's stages.
    """

    start: float
    end: float
    status: str
    reason: str
    poses: dict[str, PoseSeries] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    std: dict[str, float] = field(default_factory=dict)
    fit_status: str = ""
    seconds: float = 0.0
    evaluations: int = 0

    @property
    def accepted(self):
        return self.status == ACCEPTED


def combine_estimates(values, stds):
    """Inverse-variance weighted mean of independent estimates of one parameter.

    Args:
        values: Estimates, shape (n,).
        stds: Their standard deviations, shape (n,) (> 0; floored at STD_FLOOR relative).

    Returns:
        ``(mean, std, birge)``: the std is the weighted mean's times ``max(1, birge)``, the
        Birge ratio ``sqrt(chi² / (n - 1))`` (1 for a single estimate).
    """
    values, stds = np.asarray(values, float), np.asarray(stds, float)
    stds = np.maximum(stds, STD_FLOOR * np.maximum(np.abs(values), 1e-12))
    weights = 1.0 / stds**2
    mean = float(weights @ values / weights.sum())
    std = float(1.0 / math.sqrt(weights.sum()))
    birge = math.sqrt(float(weights @ (values - mean) ** 2) / (values.size - 1)) if values.size > 1 else 1.0
    return mean, std * max(1.0, birge), birge


class _Stream:
    """Bounded, time-ordered poses of one object."""

    def __init__(self, max_poses):
        self.times = collections.deque(maxlen=max_poses)
        self.poses = collections.deque(maxlen=max_poses)  # (7,): position, quaternion (w, x, y, z)

    def trim(self, oldest):
        while self.times and self.times[0] < oldest:
            self.times.popleft()
            self.poses.popleft()

    def arrays(self):
        poses = np.array(self.poses, dtype=np.float64).reshape(-1, 7)
        return np.array(self.times, dtype=np.float64), poses[:, :3], poses[:, 3:]


def _moving(position, noise_position):
    """Per pose, whether no window of REST_POSES consecutive poses containing it lies still, (T,)."""
    count = position.shape[0]
    if count < REST_POSES:
        return np.ones(count, bool)
    windows = np.lib.stride_tricks.sliding_window_view(position, REST_POSES, axis=0)  # (W, 3, REST_POSES)
    spread = np.abs(windows - windows.mean(-1, keepdims=True)).max(axis=(1, 2))
    still = spread < REST_SIGMAS * max(noise_position, 1e-6)
    covered = np.zeros(count, bool)
    for offset in range(REST_POSES):
        covered[offset : offset + still.size] |= still
    return ~covered


class OnlineObjectEstimator:
    """Object contact parameters from a live pose stream (module docstring).

    Args:
        world: ContactWorld of the scene (known values set; unknowns at any value), no robot.
        unknowns: Parameter names to estimate (``box.mass``, ``box/ground.friction``, ...).
        config: OnlineObjectEstimatorConfig.
        initial: Optional name -> starting value of unknowns (before any accepted event).

    Attributes:
        values, std: Combined accepted estimates, name -> float (empty before the first).
        birge: Name -> Birge ratio of the combination.
        outcomes: The last ``max_events`` EventOutcome, oldest first.
        counts: Outcome status -> events so far.
        dropped: Poses refused by :meth:`add_pose` (non-finite, out of order).
        last_fit: ObjectFit of the last fitted event (None before).
        last_event: ``(start, end, observations)`` of the last event handed out for a fit.
        not_estimated: Unknowns some fit could not involve (a slide and a mass), name -> reason.
    """

    def __init__(self, world, unknowns, config=None, initial=None):
        self.world, self.unknowns = world, tuple(unknowns)
        self.config = config or OnlineObjectEstimatorConfig()
        for name in (*self.unknowns, *(initial or {})):
            world.locate_parameter(name)  # raises ContactError naming an unknown parameter
        if not self.unknowns:
            raise ContactError("no unknown parameters to estimate")
        self.initial = dict(initial or {})
        self.names = tuple(world.object_names)
        self._streams = {name: _Stream(self.config.max_poses) for name in self.names}
        self._accepted = collections.deque(maxlen=self.config.max_events)  # EventOutcome
        self.outcomes = collections.deque(maxlen=self.config.max_events)
        self.counts = {ACCEPTED: 0, REJECTED: 0, SKIPPED: 0}
        self.values, self.std, self.birge = {}, {}, {}
        self.dropped, self.last_fit, self.last_event = 0, None, None
        self.not_estimated = {}  # unknowns some fit could not involve, name -> its reason
        self._cursor = -math.inf  # motion up to this time [s] belongs to a finished event
        self.noise = None

    # ------------------------------------------------------------------ input
    def add_pose(self, name, t, position, quaternion):
        """One world-frame pose of an object.

        Args:
            name: Object name.
            t: Stamp [s] (increasing per object).
            position: (3,) [m]. quaternion: (4,) unit, (w, x, y, z).

        Returns:
            Whether it was kept (False: non-finite or not after the object's last stamp; counted in ``dropped``).

        Raises:
            KeyError: An object the scene does not have.
        """
        stream = self._streams[name]
        pose = np.concatenate([np.asarray(position, float).reshape(3), np.asarray(quaternion, float).reshape(4)])
        norm = float(np.linalg.norm(pose[3:]))
        if not (math.isfinite(t) and np.isfinite(pose).all() and norm > 1e-9) or (stream.times and t <= stream.times[-1]):
            self.dropped += 1
            return False
        pose[3:] /= norm
        stream.times.append(float(t))
        stream.poses.append(pose)
        stream.trim(t - self.config.window_seconds)
        return True

    @property
    def pose_count(self):
        """Poses held, object -> count."""
        return {name: len(s.times) for name, s in self._streams.items()}

    # ------------------------------------------------------------------ events
    def _series(self):
        """Object -> (times, position, quaternion) of the window, or None while an object has too few poses."""
        arrays = {name: s.arrays() for name, s in self._streams.items()}
        return None if min(a[0].size for a in arrays.values()) < 2 * REST_POSES else arrays

    def next_event(self):
        """The next complete event: ``(start, end, observations)`` with object -> PoseSeries
        (stamps from ``start``), an EventOutcome for an event that cannot be fitted, or None."""
        arrays = self._series()
        if arrays is None:
            return None
        try:
            self.noise = pose_noise([PoseSeries(t, p, q) for t, p, q in arrays.values()])
        except (ValueError, DataError):
            return None
        moving = {name: _moving(p, self.noise.position) & (t > self._cursor) for name, (t, p, _) in arrays.items()}
        starts = [t[m][0] for (t, _, _), m in zip(arrays.values(), moving.values()) if m.any()]
        if not starts:
            return None
        start = float(min(starts))
        end = self._event_end(arrays, moving, start)
        if end is None:
            return None
        last = max(self._tail_time(t, end) for t, _, _ in arrays.values())
        self._cursor = end
        return self._event(arrays, moving, start, end, last)

    def _event_end(self, arrays, moving, start):
        """Time of the event's last moving pose once every object lay still ``settle_poses`` poses after it, else None."""
        settle, end = self.config.settle_poses, start
        while True:
            extended, waiting = False, False
            for (t, _, _), m in zip(arrays.values(), moving.values()):
                after = np.flatnonzero(t > end)[:settle]
                if m[after].any():
                    end, extended = float(t[after][m[after]].max()), True
                    break
                waiting |= after.size < settle
            if not extended:
                return None if waiting else end

    def _tail_time(self, times, end):
        after = times[times > end][: self.config.settle_poses]
        return float(after[-1]) if after.size else end

    def _event(self, arrays, moving, start, end, last):
        cfg = self.config
        if end - start > cfg.max_event_seconds:
            return self._skip(start, last, f"motion of {end - start:.2f} s is longer than max_event_seconds "
                                           f"({cfg.max_event_seconds:g} s): an object carried or pushed, not a free event")
        for name, (t, _, _) in arrays.items():
            before = np.flatnonzero(t < start)[-REST_POSES:]
            if before.size < REST_POSES or _moving_before(arrays[name], start, self.noise):
                return self._skip(start, last, f"'{name}' was not seen lying still before the motion (the push and the "
                                               "start of the free motion are unknown)")
        movers = sum(int(m[(t >= start) & (t <= end)].sum()) for (t, _, _), m in zip(arrays.values(), moving.values()))
        if movers < cfg.min_event_poses:
            return self._skip(start, last, f"only {movers} moving poses (min_event_poses {cfg.min_event_poses})")
        observations = {}
        for name, (t, p, q) in arrays.items():
            keep = (t >= start) & (t <= last)
            if keep.sum() < REST_POSES:
                return self._skip(start, last, f"only {int(keep.sum())} poses of '{name}' during the event")
            observations[name] = PoseSeries(t[keep] - start, p[keep], q[keep])
        self.last_event = (start, last, observations)
        return self.last_event

    def _skip(self, start, end, reason):
        return self._record(EventOutcome(start, end, SKIPPED, reason))

    def _record(self, outcome):
        self.outcomes.append(outcome)
        self.counts[outcome.status] += 1
        return outcome

    # ------------------------------------------------------------------ fits
    def fit_settings(self):
        """FitSettings of the next fit: the budgets, and the current estimates joined to the scan grids."""
        cfg, defaults = self.config, FitSettings()
        frictions = [v for n, v in self.values.items() if n.endswith(".friction")]
        restitutions = [v for n, v in self.values.items() if n.endswith(".restitution")]
        known = [float(self.world.get_parameter(f"{o}.mass").detach().reshape(-1)[0]) for o in self.names
                 if f"{o}.mass" not in self.unknowns]
        ratios = [v / m for n, v in self.values.items() if n.endswith(".mass") for m in known]

        def join(grid, extra):
            return tuple(sorted(set(grid) | {round(float(v), 6) for v in extra}))

        return replace(defaults, friction_grid=join(defaults.friction_grid, frictions),
                       pair_friction_grid=join(defaults.pair_friction_grid, frictions),
                       restitution_grid=join(defaults.restitution_grid, [min(max(r, 0.0), 1.0) for r in restitutions]),
                       mass_ratios=join(defaults.mass_ratios, ratios), max_evaluations=cfg.max_evaluations,
                       stage_evaluations=cfg.stage_evaluations, restarts=cfg.restarts)

    def fit_event(self, start, end, observations):
        """Fit one event with :func:`fit_objects` and judge it; returns ``(EventOutcome, ObjectFit or None)``.

        Pure with respect to the estimator's state (it reads the current estimates as the
        warm start): safe to run off the caller's thread while poses keep arriving.
        """
        begin = time.perf_counter()
        poses = {name: len(s) for name, s in observations.items()}
        try:
            fit = fit_objects(self.world, observations, self.unknowns, initial={**self.initial, **self.values},
                              settings=self.fit_settings())
        except (ContactError, DataError, ValueError) as err:
            return EventOutcome(start, end, REJECTED, f"not fitted: {err}", poses, seconds=time.perf_counter() - begin), None
        seconds = time.perf_counter() - begin
        evaluations = sum(s.evaluations for s in fit.stages)
        common = {"poses": poses, "fit_status": fit.status, "seconds": seconds, "evaluations": evaluations}
        if fit.status == "poor_fit":
            return EventOutcome(start, end, REJECTED, fit.message, **common), fit
        values = {n: float(fit.values[n]) for n, ok in fit.identifiable.items() if ok}
        std = {n: float(fit.std[n]) for n in values}
        if not values:
            return EventOutcome(start, end, REJECTED, fit.message, **common), fit
        implausible = self.implausible(values)
        if implausible:
            return EventOutcome(start, end, REJECTED, f"implausible: {implausible}", **common), fit
        return EventOutcome(start, end, ACCEPTED, fit.message, values=values, std=std, **common), fit

    def implausible(self, values):
        """Why some of ``values`` (name -> value) are not plausible object parameters, or ``""``."""
        reasons = []
        for name, value in values.items():
            kind = name.rpartition(".")[2]
            high = {"friction": self.config.friction_max, "mass": self.config.mass_max, "restitution": 1.0}.get(kind)
            if high is not None and not (0.0 <= value <= high and (kind != "mass" or value > 0.0)):
                reasons.append(f"{name} = {value:.4g} outside {'(' if kind == 'mass' else '['}0, {high:g}]")
        return "; ".join(reasons)

    def apply(self, outcome, fit=None):
        """Record a fitted event's outcome; an accepted one updates the combined estimates.

        Returns:
            Whether the combined estimates changed.
        """
        self._record(outcome)
        if fit is not None:
            self.last_fit = fit
            self.not_estimated.update(fit.not_estimated)
        if not outcome.accepted:
            return False
        self._accepted.append(outcome)
        for name in {n for o in self._accepted for n in o.values}:
            votes = [(o.values[name], o.std[name]) for o in self._accepted if name in o.values]
            self.values[name], self.std[name], self.birge[name] = combine_estimates(*zip(*votes))
        return True

    def update(self):
        """Find the next complete event and fit it (all in this call).

        Returns:
            The EventOutcome of the event handled, or None when no event is complete.
        """
        event = self.next_event()
        if event is None or isinstance(event, EventOutcome):
            return event
        outcome, fit = self.fit_event(*event)
        self.apply(outcome, fit)
        return outcome

    # ------------------------------------------------------------------ report
    def document(self, known=None):
        """The ``objects.yaml`` mapping of the online estimates (offline layout plus ``online``)."""
        missing = [n for n in self.unknowns if n not in self.values]
        status = "ok" if self.values and not missing else "undetermined" if self.values else "no_estimates"
        message = (f"events: {self.counts[ACCEPTED]} accepted, {self.counts[REJECTED]} rejected, "
                   f"{self.counts[SKIPPED]} skipped")
        return {
            "status": status,
            "message": message,
            "estimates": {n: {"value": self.values[n], "std": self.std[n]} for n in self.values},
            "unidentifiable": {n: "no accepted event determined it" for n in missing if n not in self.not_estimated},
            "not_estimated": {n: self.not_estimated[n] for n in missing if n in self.not_estimated},
            "known": {k: float(v) for k, v in (known or {}).items()},
            "online": {
                "counts": dict(self.counts),
                "birge_ratio": dict(self.birge),
                "noise": None if self.noise is None else {"position_m": self.noise.position,
                                                          "orientation_rad": self.noise.orientation},
                "events": [_outcome_document(o) for o in self.outcomes],
            },
        }


def _moving_before(series, start, noise):
    """Whether the REST_POSES poses right before ``start`` spread beyond the rest test (an object
    whose rest window is cut by the window's start)."""
    t, p, _ = series
    before = p[t < start][-REST_POSES:]
    spread = np.abs(before - before.mean(0)).max() if before.size else math.inf
    return not spread < REST_SIGMAS * max(noise.position, 1e-6)


def _outcome_document(outcome):
    return {"start": round(float(outcome.start), 6), "end": round(float(outcome.end), 6), "status": outcome.status,
            "reason": outcome.reason, "fit_status": outcome.fit_status, "seconds": round(outcome.seconds, 3),
            "evaluations": int(outcome.evaluations), "poses": {n: int(c) for n, c in outcome.poses.items()},
            "values": {n: {"value": v, "std": outcome.std[n]} for n, v in outcome.values.items()}}
