"""Gauss-Newton on accumulated statistics, and what they determine.

The cost of coordinates ``theta`` is exact on :class:`~diffsim_ros.estimation.information.NormalEquations`
of a :class:`~diffsim_ros.estimation.torque_regression.TorqueRegression`:
``F(theta) = phi(theta)^T H phi(theta) - 2 g^T phi(theta) + const`` (columns weighted by their
noise variances). Minimizing it is a small problem (tens of coordinates) whatever the data's
length: Gauss-Newton with ``J = d phi / d theta``, inside the plausibility boxes.

What counts as determined follows the batch identification
(:mod:`~diffsim_ros.estimation.identifiability`): the rank test of the normalized information
(:func:`~diffsim_ros.estimation.identifiability.rank_flags` on its square root), a coordinate
held at a bound against the data, an imprecise value (:func:`~diffsim_ros.estimation.identifiability.imprecise`)
or an implausible one (:func:`~diffsim_ros.model.plausibility.plausibility_violations`). Such a
parameter's block keeps its current value and the rest is solved again without it. Standard
deviations are the sandwich ``I^-1 S I^-1`` with ``S`` the score covariance of the
exponentially weighted, serially correlated rows
(:meth:`~diffsim_ros.estimation.information.NormalEquations.score_covariance`).
"""

from dataclasses import dataclass, field

import numpy as np

from diffsim_ros.estimation import identifiability as ident
from diffsim_ros.model.plausibility import plausibility_violations

__all__ = ["StatisticsFit", "fit_statistics", "gauss_newton"]

_STEP_TOLERANCE = 1e-10  # relative step size at which Gauss-Newton stops


@dataclass(frozen=True)
class StatisticsFit:
    """A fit on accumulated statistics.

    Attributes:
        theta: Coordinates (P,): fitted where determined, the start values elsewhere.
        values: Determined parameters, name -> numpy value.
        stddev: Their standard deviations.
        rejected: Name -> why the data do not determine it (its value is not updated).
        cost: Weighted cost ``F(theta) - F(start)`` (<= 0 for a better fit).
    """

    theta: np.ndarray
    values: dict
    stddev: dict
    rejected: dict = field(default_factory=dict)
    cost: float = 0.0


def _cost(regression, hw, gw, theta):
    phi = regression.phi(theta)[0]
    return float(phi @ hw @ phi - 2 * gw @ phi)


def _solve(info, grad):
    """``info^-1 grad`` on the directions ``info`` determines (diagonal scaling, pseudo-inverse)."""
    scale = np.sqrt(np.clip(np.diag(info), 1e-300, None))
    scaled = info / np.outer(scale, scale)
    return np.linalg.lstsq(scaled, grad / scale, rcond=1e-12)[0] / scale


def gauss_newton(regression, hw, gw, theta, free, iterations=3):
    """Minimize the weighted cost over the ``free`` coordinates (bool (P,)) inside the bounds.

    Args:
        regression: TorqueRegression.
        hw, gw: Column-weighted normal equations (P_phi, P_phi), (P_phi,).
        theta: Start (P,), inside the bounds.
        free: Coordinates to move.
        iterations: Gauss-Newton steps at most.

    Returns:
        ``(theta, at_bound)``: the minimizer and -1/0/+1 per coordinate at a plausibility bound
        (lower / inside / upper); a lever offset may also stop at its trust region's edge
        (:data:`~diffsim_ros.estimation.torque_regression.OFFSET_TRUST`), to go on from there
        once its expansion point has moved.
    """
    lower, upper = regression.box()
    theta = np.clip(np.array(theta, float), lower, upper)
    active = np.zeros(theta.size, int)
    for _ in range(iterations):
        moving = free & (active == 0)
        if not moving.any():
            break
        phi, jac = regression.phi(theta)
        j = jac[:, moving]
        step = -_solve(j.T @ hw @ j, j.T @ (hw @ phi - gw))
        new = theta.copy()
        new[moving] += step
        clipped = np.clip(new, lower, upper)
        active = np.where(clipped <= lower, -1, np.where(clipped >= upper, 1, 0)) * free
        done = np.all(np.abs(clipped - theta) <= _STEP_TOLERANCE * (1.0 + np.abs(theta)))
        theta = clipped
        if done:
            break
    at_bound = np.where(theta <= regression.lower, -1, np.where(theta >= regression.upper, 1, 0)) * free
    return theta, at_bound


def _covariance(regression, hw, score, theta, free):
    """Sandwich covariance (P, P) of the free coordinates (zeros elsewhere) and the information (F, F)."""
    jac = regression.phi(theta)[1][:, free]
    info = jac.T @ hw @ jac
    # Scaled as the rank test scales (unit columns): only the directions it finds null are dropped.
    scale = 1.0 / np.sqrt(np.clip(np.diag(info), 1e-300, None))
    bread = scale[:, None] * np.linalg.pinv(info * np.outer(scale, scale), rcond=ident.CONDITION_LIMIT**-2) * scale
    cov = np.zeros((theta.size, theta.size))
    cov[np.ix_(free, free)] = bread @ (jac.T @ score @ jac) @ bread
    return cov, info


def _held_by_rank(regression, info, free, rejected):
    """Blocks whose coordinates the rank test flags (named in ``rejected``), as a set of block indices."""
    eigen, vectors = np.linalg.eigh(0.5 * (info + info.T))
    root = np.sqrt(np.clip(eigen, 0.0, None))[:, None] * vectors.T
    flags, _ = ident.rank_flags(root)
    owner = regression.block_of()[free]
    held = {int(owner[i]) for i in np.flatnonzero(flags)}
    for index in held:
        for name in regression.blocks[index].names:
            rejected.setdefault(name, f"not determined by the data so far (no excitation of it); would need {ident.data_hint(name)}")
    return held


def _pinned(regression, hw, gw, theta, active, cov, policy, rejected):
    """Blocks held at a plausibility bound by more than ``bound_sigmas`` against the data."""
    held = set()
    if not np.any(active):
        return held
    phi, jac = regression.phi(theta)
    unconstrained = theta - _solve(jac.T @ hw @ jac, jac.T @ (hw @ phi - gw))
    std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    owner = regression.block_of()
    for i in np.flatnonzero(active):
        bound = regression.lower[i] if active[i] < 0 else regression.upper[i]
        beyond = (bound - unconstrained[i]) if active[i] < 0 else (unconstrained[i] - bound)
        if beyond > policy.bound_sigmas * std[i]:
            held.add(int(owner[i]))
            for name in regression.blocks[owner[i]].names:
                rejected.setdefault(name, f"held at its plausibility bound {bound:.4g}: the data alone put it at "
                                          f"{unconstrained[i]:.4g} +- {std[i]:.2g}")
    return held


def _named(regression, theta, cov, free_blocks, policy, bounds, rejected):
    """Values and stds of the parameters of ``free_blocks``; rejected names added; the blocks to hold."""
    value, jac, layout = regression.physical(theta)
    values, stddev = ident.named_delta_method(value, jac, layout, cov)
    names = {n for i in free_blocks for n in regression.blocks[i].names}
    values = {k: v for k, v in values.items() if k in names}
    held = set()
    problems = {name: f"implausible estimate: {reason}" for name, reason in plausibility_violations(values, bounds).items()}
    for name in values:
        reason = problems.get(name) or ident.imprecise(name, values[name], stddev[name], policy)
        if reason:
            rejected.setdefault(name, f"{reason}; would need {ident.data_hint(name)}")
            held.update(i for i in free_blocks if name in regression.blocks[i].names)
    return values, {k: stddev[k] for k in values}, held


def fit_statistics(regression, stats, variance, inflation, start, policy, bounds, iterations=3):
    """Fit the determined parameters on accumulated statistics; hold the others at ``start``.

    Args:
        regression: TorqueRegression.
        stats: NormalEquations of the training rows.
        variance: Noise variance of every column [N²·m²], (n,).
        inflation: Long-run over plain variance of every column, (n,).
        start: Current coordinates (P,) (inside the bounds): held parameters keep them.
        policy: :class:`~diffsim_ros.estimation.identifiability.DeterminationPolicy`.
        bounds: PlausibilityBounds (final check).
        iterations: Gauss-Newton steps per solve.

    Returns:
        StatisticsFit.
    """
    hw, gw = stats.weighted(variance)
    score = stats.score_covariance(variance, inflation)
    block_of = regression.block_of()
    held, rejected = set(), {}
    for _ in range(3):  # the first solve, and again without what it could not determine
        free = ~np.isin(block_of, list(held))
        if not free.any():
            return StatisticsFit(np.array(start, float), {}, {}, rejected)
        theta, active = gauss_newton(regression, hw, gw, start, free, iterations)
        cov, info = _covariance(regression, hw, score, theta, free)
        new = _held_by_rank(regression, info, free, rejected)
        new |= _pinned(regression, hw, gw, theta, active, cov, policy, rejected)
        values, stddev, implausible = _named(regression, theta, cov, sorted(set(block_of[free]) - new), policy, bounds,
                                             rejected)
        new |= implausible
        if not new:
            break
        held |= new
    theta = np.where(~np.isin(block_of, list(held)), theta, start)
    return StatisticsFit(theta, values, stddev, rejected, _cost(regression, hw, gw, theta) - _cost(regression, hw, gw, start))
