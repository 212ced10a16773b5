"""Object estimation that cuts its own stages, starts each stage from a scan and judges its fit.

:func:`fit_objects` is the entry point for camera poses of objects in a ContactWorld:

1. **What the data say before any model** (:mod:`~diffsim_ros.estimation.object_events`):
   the camera noise, which objects rest at the start, when pairs of objects first touch.
   Unknowns the data cannot involve are not fitted but reported with the reason (the mass
   of an object that never touches another object: its motion does not depend on it).
2. **Before the first contact**: the sliding objects' unknown friction from the poses up to
   the last frame before it, started from a batched scan over FRICTION_GRID (a slide's
   friction is a near-convex 1-D problem once its start is in the right basin).
3. **At each contact between objects**: a batched scan over the collision's unknowns (mass
   of either object, the pair's restitution and friction) on the data up to the next
   contact, from the state the earlier stages estimated. The scan does not depend on the
   initial guess: masses span MASS_RATIOS times the partner's known mass.
4. **Everything together** from the best scanned point (local trust-region fit; restarts
   from the next-best scanned points if the fit fails its quality check).
5. **Quality**: per object, the rms position and orientation residuals against the camera
   noise estimated from the data, and their drift (:func:`residual_drift`: a model that
   departs from the data steadily, even within the noise in plain rms, biases its
   estimates). A fit more than QUALITY_LIMIT times above the noise, or drifting more than
   DRIFT_LIMIT, did not explain the data and is reported as ``"poor_fit"``, never as a result.
   So is a fit whose position and orientation data alone disagree on the parameters
   (:mod:`~diffsim_ros.estimation.consistency`): a model error the parameters absorb.

Why scans rather than the user's starting values (measured on MuJoCo collisions, see
``benchmarks/RESULTS.md``, contact-estimation): a collision moves in time with the
parameters, so a least-squares fit from a poor start lands in another basin (e.g. mass
+107 % with a residual 14x the noise) and still reports scipy's success.
"""

import itertools
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from scipy.stats import chi2

from diffsim_ros.dynamics.spatial import quat_conjugate, quat_log, quat_multiply
from diffsim_ros.estimation.consistency import CONSISTENCY_P_VALUE
from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.object_events import PoseNoise, at_rest_at_start, contact_events, move_time, noisy_poses, pose_noise
from diffsim_ros.estimation.objects import (
    MIN_POSES,
    NOISE_FLOOR,
    QUALITY_LIMIT,
    UNIDENTIFIABLE_RELATIVE_STD,
    as_pose_series,
    estimate_object_parameters,
    fitted_poses,
    quality_verdict,
    scan_parameters,
)
from diffsim_ros.sim.contact.errors import ContactError

__all__ = ["FitSettings", "StageReport", "ObjectFit", "fit_objects", "bootstrap_std", "check_known_restitutions", "residual_drift", "STATUSES"]

STATUSES = ("ok", "undetermined", "poor_fit")
# Fits stop when a step lowers the cost by less than this fraction. Moving one parameter by
# one standard deviation raises the cost by ~1/R of it (R residuals, a few hundred here), so
# at 1e-5 the parameters are within ~0.1 std of the optimum; scipy's 1e-8 spent half the
# evaluations of a collision fit on digits below the noise.
COST_TOLERANCE = 1e-5
# Drift check: camera noise is white, a model error is not. Residuals averaged over blocks of
# DRIFT_BLOCK consecutive poses shrink by sqrt(DRIFT_BLOCK) for noise but not for a model
# that drifts away from the data, so their rms, in units of noise / sqrt(DRIFT_BLOCK), is ~1
# for a model that explains the data. Measured on issue 19's MuJoCo collisions (see
# benchmarks/RESULTS.md, contact-objects): a fit at 1.5x the noise in plain rms, within the
# QUALITY_LIMIT, with mass +20 % was a drift of the target's yaw. Above DRIFT_LIMIT (far in
# the tail of noise: 4 blocks x 3 axes give a 99.9 % quantile of 1.7) the fit is poor.
DRIFT_BLOCK = 6
DRIFT_LIMIT = 2.5
# A hit's error at the model's coarse step is made at the hit: issue 19's MuJoCo collisions
# replayed with the true parameters at 10 ms end the target 3.5 deg off in yaw and the box
# 3.3 deg, with the steps in which the boxes may touch split into 5 substeps 0.3 and 1.4 deg
# (a 2 ms step everywhere: 0.5 and 1.6 deg) for 1.7x the steps (benchmarks/RESULTS.md,
# contact-objects). The orientation residuals' drift was what made those fits poor: scene 1
# from the worst start fitted at mass +24 %, mu +15 % (target orientation 4.6x the noise)
# without substeps and at +9.5 %, +5.6 % (target 1.1x) with them, for 1.7x the CPU time.
IMPACT_SUBSTEPS = 5
# The fits' cone problems take 1e-3 compliance (relative, on the Delassus diagonal) rather than the
# simulator's 1e-6. At 1e-6 the load split among a box's coplanar corners is pinned only to the
# solver's velocity tolerance over the compliance, ~the per-corner impulse itself, and a hit beside
# sliding corners can find no KKT solution: on issue 19's scene 0 one such step at the hit moved a
# fit's cost by 90 chi-square, and fits from the worst start stopped 4-5 std from the truth of our
# own model's poses. At 1e-3 (still ~100x stiffer than MuJoCo's default) the captured hit solves
# exactly and to one solution from either search (benchmarks/RESULTS.md, contact-collision-basins).
FIT_REGULARIZATION = 1e-3


@dataclass(frozen=True)
class FitSettings:
    """Scans and budgets of :func:`fit_objects`.

    Attributes:
        friction_grid: Friction values scanned before the first contact (and for slides).
        mass_ratios: Masses scanned, as multiples of the collision partner's known mass (or
            of the initial guess when the partner's mass is unknown too).
        restitution_grid: Restitutions scanned at a collision.
        pair_friction_grid: Friction between the colliding objects, when unknown.
        stage_evaluations: Residual evaluations of the pre-contact stage.
        max_evaluations: Residual evaluations of the joint fit.
        restarts: Joint fits restarted from the next-best scanned points when a fit fails
            its quality check.
        quality_limit: See QUALITY_LIMIT.
        drift_limit: See DRIFT_LIMIT.
        cost_tolerance: Relative cost decrease below which a fit stops (see COST_TOLERANCE).
        impact_substeps: Substeps of the model's steps in which objects may touch each other
            (see IMPACT_SUBSTEPS; 1: none).
        regularization: Relative compliance of the model's cone contact problems (see
            FIT_REGULARIZATION and ContactOptions.regularization).
        engine: Rollouts and sensitivities by the compiled step where it covers the world
            ("auto") or always by torch's ("torch"; see objects.ENGINES).
        consistency_p_value: A fit whose position and orientation data disagree on the
            parameters at a p-value below this is poor (see
            :func:`~diffsim_ros.estimation.consistency.channel_consistency`; 0: not checked).
        bootstrap: Refits of the fitted model's own poses under fresh camera noise whose
            spread widens the reported std (a parametric bootstrap of the whole fit; 0: the
            linear std alone; otherwise at least 2). See :func:`bootstrap_std`.
        bootstrap_seed: Seed of the bootstrap's noise draws.
        known_p_value: A fit whose data disagree with a known restitution of two objects that
            collide in the data at a p-value below this is poor (see
            :func:`check_known_restitutions`; 0: not checked).
    """

    friction_grid: tuple = tuple(np.geomspace(0.03, 1.5, 12).round(4))
    mass_ratios: tuple = tuple(np.geomspace(0.1, 10.0, 11).round(4))
    restitution_grid: tuple = (0.05, 0.25, 0.45, 0.65, 0.85)
    pair_friction_grid: tuple = (0.05, 0.3, 1.0)
    stage_evaluations: int = 20
    max_evaluations: int = 40
    restarts: int = 2
    quality_limit: float = QUALITY_LIMIT
    drift_limit: float = DRIFT_LIMIT
    cost_tolerance: float = COST_TOLERANCE
    impact_substeps: int = IMPACT_SUBSTEPS
    regularization: float = FIT_REGULARIZATION
    engine: str = "auto"
    consistency_p_value: float = CONSISTENCY_P_VALUE
    bootstrap: int = 0
    bootstrap_seed: int = 0
    known_p_value: float = CONSISTENCY_P_VALUE


@dataclass(frozen=True)
class StageReport:
    """One stage of :func:`fit_objects`: what it fitted, on which data, with what result."""

    name: str
    parameters: tuple
    end: float  # last observation time used [s] (inf: all)
    values: dict
    cost: float
    evaluations: int
    seconds: float


@dataclass(frozen=True)
class ObjectFit:
    """Result of :func:`fit_objects`.

    Attributes:
        status: ``"ok"`` (every fitted unknown determined, residuals at the noise level),
            ``"undetermined"`` (some fitted unknown not determined by the data: see
            ``identifiable``) or ``"poor_fit"`` (residuals far above the noise: no value
            of this fit is a result).
        message: One line saying why, naming parameters and figures.
        values: Fitted unknowns, name -> value (use only the identifiable ones of an
            ``"ok"`` or ``"undetermined"`` fit).
        std: Standard deviations (inf where not identifiable): the larger of ``std_linear``
            and ``std_bootstrap`` where the bootstrap ran.
        identifiable: Name -> bool.
        not_estimated: Unknowns the data cannot involve, name -> reason.
        estimate: The final ObjectEstimate (initial state, cost, scipy's message).
        noise: Camera PoseNoise estimated from the data.
        fit_ratio: Object -> {"position": rms / noise, "orientation": rms / noise}.
        drift: Object -> {"position": ..., "orientation": ...}, see :func:`residual_drift`.
        events: ContactEvent tuple (first contact of each touching pair of objects).
        at_rest: Objects at rest at the start.
        stages: StageReport tuple, in order.
        fitted: Object -> PoseSeries of the fitted model at the observation times.
        std_linear: The least-squares fit's std (its curvature and residual noise).
        std_bootstrap: The spread of the bootstrap's refits (empty when it did not run).
    """

    status: str
    message: str
    values: dict
    std: dict
    identifiable: dict
    not_estimated: dict
    estimate: object
    noise: object
    fit_ratio: dict
    drift: dict
    events: tuple
    at_rest: tuple
    stages: tuple
    fitted: dict = field(repr=False)
    std_linear: dict = field(default_factory=dict)
    std_bootstrap: dict = field(default_factory=dict)

    @property
    def ok(self):
        return self.status == "ok"


def _parts(world, name):
    """``(owner names, kind)`` of a parameter: ``(("box",), "mass")`` or ``(("box", "ground"), "friction")``."""
    owner, _, kind = name.rpartition(".")
    return tuple(owner.split("/")), kind


def _never_moves(name, observations, noise, at_rest):
    return name in at_rest and move_time(observations[name], noise) is None


def _relevance(world, unknowns, events, observations, noise, at_rest):
    """Split unknowns into those the data involve and the others (name -> reason)."""
    touching = {frozenset(e.pair) for e in events}
    in_events = {n for e in events for n in e.pair}
    objects = set(world.object_names)
    relevant, skipped = [], {}
    for name in unknowns:
        owners, kind = _parts(world, name)
        if kind == "mass" and owners[0] not in in_events:
            skipped[name] = ("no contact with another object in the data: the motion of an object touching only static "
                             "shapes does not depend on its mass")
        elif len(owners) == 2 and set(owners) <= objects and frozenset(owners) not in touching:
            skipped[name] = f"'{owners[0]}' and '{owners[1]}' never touch in the data"
        elif len(owners) == 2 and all(_never_moves(o, observations, noise, at_rest) for o in owners if o in objects):
            skipped[name] = f"{' and '.join(o for o in owners if o in objects)} never move in the data"
        else:
            relevant.append(name)
    return relevant, skipped


def _window(observations, end):
    """The observations up to ``end`` [s] (all of them for None or inf), or None when some
    object has fewer than MIN_POSES poses there (too short to fit on; counted before
    as_pose_series would raise)."""
    if end is None or math.isinf(end):
        return observations
    cut = {name: series.between(end=end) for name, series in observations.items()}
    if min(len(series) for series in cut.values()) < MIN_POSES:
        return None
    return {name: as_pose_series(name, series) for name, series in cut.items()}


def _scan_best(world, observations, grid, at_rest, state, engine):
    """Scan a grid (name -> (B,)); returns candidates sorted by cost: [(cost, {name: value})]."""
    costs = scan_parameters(world, observations, grid, at_rest=at_rest, initial_state=state, engine=engine)
    order = np.argsort(costs)
    return [(float(costs[b]), {n: float(v[b]) for n, v in grid.items()}) for b in order if math.isfinite(costs[b])]


def _product(axes):
    """Cartesian product of name -> values as name -> (B,) arrays."""
    names = list(axes)
    rows = list(itertools.product(*(axes[n] for n in names)))
    return {n: np.array([row[i] for row in rows], dtype=np.float64) for i, n in enumerate(names)}


def _collision_axes(world, event, relevant, values, known_masses, settings):
    """Scan axes of the unknowns a collision involves: name -> candidate values."""
    a, b = event.pair
    axes = {}
    for obj, partner in ((a, b), (b, a)):
        name = f"{obj}.mass"
        if name in relevant:
            scale = known_masses.get(partner) or values.get(name) or float(world.get_parameter(name).detach().reshape(-1)[0])
            axes[name] = tuple(scale * r for r in settings.mass_ratios)
    for kind, grid in (("restitution", settings.restitution_grid), ("friction", settings.pair_friction_grid)):
        for name in (f"{a}/{b}.{kind}", f"{b}/{a}.{kind}"):
            if name in relevant:
                axes[name] = tuple(grid)
    return axes


def _scan_centres(events, relevant, known_masses):
    """Unknown masses at the centre of their collision scan (the known partner's mass).

    A slide does not depend on the sliding object's mass, but its arithmetic does, to round-off;
    holding the unknown masses at a value of the data's scene rather than the user's guess
    makes the whole fit independent of the initial guess of every scanned unknown (issue 19's
    grid of starts then gives one result per scene, bit for bit)."""
    centres = {}
    for event in events:
        for obj, partner in (event.pair, event.pair[::-1]):
            if f"{obj}.mass" in relevant and partner in known_masses:
                centres.setdefault(f"{obj}.mass", known_masses[partner])
    return centres


def _stage(stages, name, parameters, end, estimate, start):
    stages.append(StageReport(name, tuple(parameters), math.inf if end is None else float(end), dict(estimate.values),
                              float(estimate.cost), int(estimate.evaluations), time.perf_counter() - start))


def _sliding_friction(world, name, at_rest):
    """Whether ``name`` is the friction between static geometry and an object moving from the start."""
    owners, kind = _parts(world, name)
    objects = [o for o in owners if o in world.object_names]
    return kind == "friction" and len(objects) == 1 and objects[0] not in at_rest


def _pre_contact(world, observations, relevant, at_rest, end, settings, stages, progress):
    """Friction of the objects sliding before the first contact: scan, then fit. Returns
    ``(values, initial state or None)``."""
    window = _window(observations, end)
    moving = [n for n in relevant if _sliding_friction(world, n, at_rest)]
    if not moving or window is None:  # nothing slides, or the contact comes within the first poses
        return {}, None
    progress("friction before the first contact")
    start = time.perf_counter()
    grid = {n: np.array(settings.friction_grid) for n in moving}
    try:
        best = _scan_best(world, window, grid, at_rest, None, settings.engine)[0][1]
        estimate = estimate_object_parameters(world.with_parameters(best), window, moving, at_rest=at_rest,
                                              max_evaluations=settings.stage_evaluations, cost_tolerance=settings.cost_tolerance,
                                              engine=settings.engine)
    except ValueError:  # DataError: too few poses before the contact for the unknowns
        return {}, None
    _stage(stages, "before the first contact", moving, end, estimate, start)
    return dict(estimate.values), estimate.initial_state


def _final_fit(world, observations, relevant, at_rest, values, state, settings, split_time=None):
    estimate = estimate_object_parameters(world.with_parameters(values), observations, relevant, at_rest=at_rest,
                                          max_evaluations=settings.max_evaluations, initial_state=state,
                                          cost_tolerance=settings.cost_tolerance, engine=settings.engine, split_time=split_time)
    final = world.with_parameters(estimate.values)
    return estimate, fitted_poses(final, estimate, observations, settings.engine)


def residual_drift(observations, fitted, noise, block=DRIFT_BLOCK):
    """Systematic part of the residuals: rms of their means over blocks of ``block`` poses, in
    units of ``noise / sqrt(block)`` (~1 for white noise), per object and channel.

    Args:
        observations, fitted: Object -> PoseSeries at the same stamps (data and fitted model).
        noise: PoseNoise of the data.
        block: Poses per block.

    Returns:
        ``{object: {"position": ratio, "orientation": ratio}}`` (objects with fewer than two
        blocks of poses are left out).
    """
    out = {}
    scale = (max(noise.position, NOISE_FLOOR[0]), max(noise.orientation, NOISE_FLOOR[1]))
    for name, obs in observations.items():
        count = len(obs) // block
        if count < 2:
            continue
        model = fitted[name]
        rot = quat_log(quat_multiply(quat_conjugate(torch.as_tensor(obs.orientation)), torch.as_tensor(model.orientation))).numpy()
        channels = {"position": model.position - obs.position, "orientation": rot}
        out[name] = {}
        for (channel, residual), sigma in zip(channels.items(), scale):
            means = residual[: count * block].reshape(count, block, 3).mean(1)
            out[name][channel] = math.sqrt(float(np.mean(means**2)) * block) / sigma
    return out


def _split_time(observations, events):
    """Where the data are split to check that both sides agree [s]: just before the first
    contact between objects (the model's hit is where a model error enters), else midway."""
    if events:
        return events[0].last_apart
    start = min(float(o.times[0]) for o in observations.values())
    return 0.5 * (start + max(float(o.times[-1]) for o in observations.values()))


_WHAT_TO_CHECK = "(check the known values, the scene, and the model's time step: model: {dt: ...} in the scene file)"


def _judge(estimate, identifiable, drift, settings):
    """``(status, message)`` from the fit's residual ratios, their drift and identifiability."""
    verdict = quality_verdict(estimate.fit_ratio, estimate.noise, settings.quality_limit)
    if verdict is not None:
        return "poor_fit", verdict
    worst = max(((n, c, v) for n, r in drift.items() for c, v in r.items()), key=lambda item: item[2], default=None)
    if worst is not None and worst[2] > settings.drift_limit:
        name, channel, value = worst
        return "poor_fit", (f"poor fit: the {channel} residuals of '{name}' drift ({DRIFT_BLOCK}-pose means {value:.1f}x what "
                            f"camera noise leaves; limit {settings.drift_limit:g}x) although their rms is "
                            f"{estimate.worst_ratio:.2f}x the noise: the model departs from the data systematically and its "
                            "estimates would be biased " + _WHAT_TO_CHECK)
    failed = [c for c in estimate.consistency.values() if not c.agrees(settings.consistency_p_value / len(estimate.consistency))]
    if failed:
        check = min(failed, key=lambda c: c.p_value)
        name = max(check.z, key=lambda n: abs(check.z[n]))
        (a, by_a), (b, by_b) = check.by_channel.items()
        # With its std: one side may barely see a parameter (a mass before any hit).
        std = check.std_by_channel
        alone = [f"{by[name]:.4g} +- {std[side][name]:.2g} from the {side} data" for side, by in ((a, by_a), (b, by_b))]
        return "poor_fit", (f"poor fit: the {a} and {b} data disagree on the parameters beyond camera noise (chi-square "
                            f"{check.statistic:.1f} on {check.dof} dof, p = {check.p_value:.1e} < {settings.consistency_p_value:g}; "
                            f"'{name}' is {alone[0]} alone and {alone[1]}, "
                            f"{abs(check.z[name]):.1f} std apart): a model error is absorbed by the parameters and the "
                            "estimates would be biased " + _WHAT_TO_CHECK)
    missing = [n for n, ok in identifiable.items() if not ok]
    if missing:
        return "undetermined", f"the data do not determine {missing} (relative std above the limit or unobservable)"
    drift_text = f"residual drift {worst[2]:.2f}x" if worst else f"residual drift not checked (fewer than {2 * DRIFT_BLOCK} poses)"
    return "ok", f"fit within {estimate.worst_ratio:.2f}x the camera noise, {drift_text}"


def fit_objects(world, observations, unknowns, initial=None, at_rest=None, settings=None, progress=None):
    """Estimate unknown object and pair parameters from camera poses, robustly, and judge the fit.

    Args:
        world: ContactWorld of the observed objects (known values set; unknowns at any value).
        observations: Mapping object name -> PoseSeries (world frame), every object.
        unknowns: Parameter names to estimate (``box.mass``, ``box/ground.friction``, ...).
        initial: Optional name -> initial guess (used where no scan covers a parameter).
        at_rest: Objects at rest at the start; default detected from the data.
        settings: FitSettings.
        progress: Optional callable taking a stage description (for progress display).

    Returns:
        ObjectFit (check ``status``: only ``"ok"`` results are all determined and good fits).

    Raises:
        ContactError: Unknown parameter names or objects, a world with a robot.
        DataError: Malformed observations or too few poses.
        ValueError: ``settings.bootstrap`` is 1 or negative.
    """
    settings = settings or FitSettings()
    if settings.bootstrap < 0 or settings.bootstrap == 1:
        raise ValueError(f"bootstrap refits must be 0 (none) or at least 2 (a spread), got {settings.bootstrap}")
    progress = progress or (lambda stage: None)
    unknowns = list(dict.fromkeys(unknowns))
    if not unknowns:
        raise ContactError("nothing is unknown: mark the values to estimate 'unknown' in the scene")
    given = (world, unknowns, initial)
    for name in list(unknowns) + list(initial or {}):
        world.locate_parameter(name)  # raises for unknown names
    observations = {name: as_pose_series(name, value) for name, value in observations.items()}
    missing = [o for o in world.object_names if o not in observations]
    if missing:
        raise ContactError(f"every object needs pose observations; missing {missing}")
    world = (world.with_parameters(dict(initial or {})).with_impact_substeps(settings.impact_substeps)
             .with_regularization(settings.regularization))
    try:
        noise = pose_noise(list(observations.values()))
    except ValueError as err:  # name what the data hold
        counts = ", ".join(f"'{name}' {len(series)}" for name, series in observations.items())
        raise DataError(f"too few poses ({counts}): {err}") from None
    if at_rest is None:
        at_rest = tuple(n for n in world.object_names if at_rest_at_start(observations[n], noise))
    events = tuple(contact_events(world, observations, noise, at_rest))
    relevant, skipped = _relevance(world, unknowns, events, observations, noise, at_rest)
    stages, values, state = [], {}, None
    if not relevant:
        raise ContactError(f"none of the unknowns {unknowns} affects the data: {skipped}")
    known_masses = {o: float(world.get_parameter(f"{o}.mass").detach().reshape(-1)[0])
                    for o in world.object_names if f"{o}.mass" not in relevant}
    if events:
        neutral = world.with_parameters(_scan_centres(events, relevant, known_masses))
        values, state = _pre_contact(neutral, observations, relevant, at_rest, events[0].last_apart, settings, stages, progress)
    candidates = []
    for k, event in enumerate(events):
        axes = _collision_axes(world, event, relevant, values, known_masses, settings)
        if not axes:
            continue
        progress(f"scan of the {event.pair[0]}-{event.pair[1]} contact")
        start = time.perf_counter()
        end = events[k + 1].last_apart if k + 1 < len(events) else None
        window = _window(observations, end) or observations  # next contact within MIN_POSES poses: scan on all
        ranked = _scan_best(world.with_parameters(values), window, _product(axes), at_rest, state, settings.engine)
        values.update(ranked[0][1])
        candidates = [v for _, v in ranked[1:]]
        stages.append(StageReport(f"scan of the {event.pair[0]}-{event.pair[1]} contact", tuple(axes),
                                  math.inf if end is None else end, dict(ranked[0][1]), ranked[0][0], len(ranked), time.perf_counter() - start))
    if not events:
        frictions = [n for n in relevant if _parts(world, n)[1] == "friction"]
        if frictions:
            progress("friction scan")
            ranked = _scan_best(world, observations, {n: np.array(settings.friction_grid) for n in frictions}, at_rest, None,
                                settings.engine)
            values.update(ranked[0][1])
    fit = _joint(world, observations, relevant, skipped, at_rest, values, state, candidates, events, noise, stages, settings, progress)
    fit = check_known_restitutions(*given, observations, fit, settings, progress)
    if settings.bootstrap and fit.status != "poor_fit":  # a poor fit's values are no result to put error bars on
        fit = _with_bootstrap(fit, bootstrap_std(*given, fit, settings, progress))
    return fit


def _chi_square(fit, observations):
    """The fit's residuals in units of the camera noise, squared and summed (position and
    orientation rows of every object)."""
    return sum(3 * len(observations[name]) * sum(r**2 for r in ratio.values()) for name, ratio in fit.fit_ratio.items())


def check_known_restitutions(world, unknowns, initial, observations, fit, settings, progress=None):
    """Refit with each known restitution of a colliding pair of objects freed; a fit whose data
    reject the known value is poor.

    A wrong known restitution (declared 0 where the objects bounce) is absorbed by the
    estimated mass and friction with residuals at the camera noise (a box pushed 2.4 m/s into
    a resting one, 3 poses before the hit: mass 3.6x and friction 2.2x the truth, rms 1.28x
    the noise; freed, the restitution fits at 0.13 with the truth's mass and friction). The
    local test at the fit cannot see it (the two fits lie in different basins), so the check
    is a likelihood ratio: the freed fit's chi-square (residuals over the camera noise) drops
    by ``D``, chi-square with 1 dof under the known value.

    Args:
        world, unknowns, initial: As given to :func:`fit_objects`.
        observations: Object -> PoseSeries (as fitted).
        fit: The fit with the restitutions held.
        settings: FitSettings (``known_p_value``, Bonferroni over the checked pairs).
        progress: Optional callable taking a stage description.

    Returns:
        ``fit``, or it as ``"poor_fit"`` naming the rejected value, with the freed fits'
        stages appended.
    """
    held = {world.locate_parameter(n) for n in unknowns}
    names = [f"{a}/{b}.restitution" for a, b in (event.pair for event in fit.events)]
    names = [n for n in dict.fromkeys(names) if world.locate_parameter(n) not in held]
    if not settings.known_p_value or fit.status == "poor_fit" or not names:
        return fit
    stages, verdict = list(fit.stages), None
    for name in names:
        (progress or (lambda stage: None))(f"check of the known {name}")
        start = time.perf_counter()
        try:
            freed = fit_objects(world, observations, [*unknowns, name], initial=initial, at_rest=fit.at_rest,
                                settings=replace(settings, bootstrap=0, known_p_value=0.0))
        except (ContactError, DataError):  # e.g. too few poses for one more unknown: nothing to compare
            continue
        if name not in freed.values:  # the freed fit finds the pair never touching: no evidence on it
            continue
        drop = _chi_square(fit, observations) - _chi_square(freed, observations)
        p_value = float(chi2.sf(max(drop, 0.0), 1))
        stages.append(StageReport(f"check: {name} freed", (name,), math.inf, {name: freed.values[name]}, freed.estimate.cost,
                                  sum(s.evaluations for s in freed.stages), time.perf_counter() - start))
        if verdict is None and p_value < settings.known_p_value / len(names):
            declared = float(world.get_parameter(name).detach().reshape(-1)[0])
            verdict = (f"poor fit: the data disagree with the known {name} = {declared:.3g}: freed, it fits at "
                       f"{freed.values[name]:.3g} and the chi-square drops by {drop:.1f} (p = {p_value:.1e} < "
                       f"{settings.known_p_value:g}); the estimates absorb the difference and would be wrong (make it "
                       "unknown in the scene, or check the value)")
    if verdict is None:
        return replace(fit, stages=tuple(stages))
    return replace(fit, status="poor_fit", message=verdict, stages=tuple(stages))


def bootstrap_std(world, unknowns, initial, fit, settings, progress=None):
    """Spread of :func:`fit_objects` over refits of a fit's own poses under fresh camera noise.

    The fitted model's poses (``fit.fitted``), redrawn ``settings.bootstrap`` times with the
    camera noise estimated from the data (at least NOISE_FLOOR) and fitted again as the data
    were (same world, unknowns, initial guess, objects at rest, settings): a parametric
    bootstrap of the whole estimator, scans and stages included. The linear std of one fit
    is its curvature at the optimum; on collisions the estimate moves with the noise draw by
    about twice that even when the model made the data (``benchmarks/RESULTS.md``,
    contact-collision-limits), so the linear std alone would overstate the precision.

    Args:
        world, unknowns, initial: As given to :func:`fit_objects`.
        fit: Its ObjectFit.
        settings: FitSettings (``bootstrap`` refits, seeded by ``bootstrap_seed``).
        progress: Optional callable taking a stage description.

    Returns:
        Name -> std over the refits (inf with fewer than two refits that ran) for every fitted unknown.
    """
    progress = progress or (lambda stage: None)
    rng = np.random.default_rng(settings.bootstrap_seed)
    noise = PoseNoise(max(fit.noise.position, NOISE_FLOOR[0]), max(fit.noise.orientation, NOISE_FLOOR[1]), fit.noise.windows)
    inner = replace(settings, bootstrap=0)
    draws = {name: [] for name in fit.values}
    for k in range(settings.bootstrap):
        progress(f"bootstrap refit {k + 1} of {settings.bootstrap}")
        poses = {name: noisy_poses(series, noise, rng) for name, series in fit.fitted.items()}
        try:
            refit = fit_objects(world, poses, unknowns, initial=initial, at_rest=fit.at_rest, settings=inner)
        except ContactError:  # e.g. a non-finite Jacobian on one draw: that draw is lost, not the fit
            continue
        for name in draws:
            if name in refit.values:  # a draw on which the refit cannot involve an unknown says nothing about it
                draws[name].append(refit.values[name])
    return {name: float(np.std(v, ddof=1)) if len(v) > 1 else math.inf for name, v in draws.items()}


def _with_bootstrap(fit, spread):
    """The fit with its std widened to the bootstrap's spread where that is larger, and judged again
    on it (an unknown whose widened relative std passes UNIDENTIFIABLE_RELATIVE_STD is undetermined)."""
    std = {name: max(fit.std[name], spread[name]) for name in fit.std}
    identifiable = {name: ok and std[name] <= UNIDENTIFIABLE_RELATIVE_STD * abs(fit.values[name]) for name, ok in fit.identifiable.items()}
    status, message = fit.status, fit.message
    lost = [name for name, ok in identifiable.items() if fit.identifiable[name] and not ok]
    if lost:
        status, message = "undetermined", (f"the data do not determine {lost}: refits of the fitted poses under fresh camera noise "
                                           f"spread by {', '.join(f'{spread[n]:.3g}' for n in lost)} (relative std above the limit)")
    return replace(fit, std=std, identifiable=identifiable, status=status, message=message, std_bootstrap=spread)


def _joint(world, observations, relevant, skipped, at_rest, values, state, candidates, events, noise, stages, settings, progress):
    """The joint fit from the scanned start, restarts while it fails its quality check, and the verdict."""
    best = None
    starts = [values] + [{**values, **c} for c in candidates[: settings.restarts]]
    for attempt, start_values in enumerate(starts):
        progress("joint fit" if attempt == 0 else f"joint fit, restart {attempt}")
        start = time.perf_counter()
        estimate, fitted = _final_fit(world, observations, relevant, at_rest, start_values, state, settings, _split_time(observations, events))
        _stage(stages, "joint fit" if attempt == 0 else f"joint fit, restart {attempt}", relevant, None, estimate, start)
        if best is None or estimate.cost < best[0].cost:
            best = (estimate, fitted)
        if estimate.worst_ratio <= settings.quality_limit:
            break
    estimate, fitted = best
    identifiable = {n: bool(estimate.identifiable[n]) for n in relevant}
    drift = residual_drift(observations, fitted, noise)
    status, message = _judge(estimate, identifiable, drift, settings)
    return ObjectFit(
        status=status, message=message, values=dict(estimate.values), std=dict(estimate.std), identifiable=identifiable,
        not_estimated=skipped, estimate=estimate, noise=noise, fit_ratio=estimate.fit_ratio, drift=drift, events=events, at_rest=tuple(at_rest),
        stages=tuple(stages), fitted=fitted, std_linear=dict(estimate.std),
    )
