"""What the data determine: rank tests, covariance, bound and precision checks, with reasons.

A parameter is reported as a value only if the data determine it. It is *not determined*
(and named with the reason and the data that would determine it) when

* its Jacobian column is zero or lies in the numerically null space (:func:`rank_flags`);
* the optimum sits on a plausibility bound that the data push beyond by more than
  ``bound_sigmas`` standard deviations (:func:`pinned_coordinates`): the fit is held up by
  the bound, not by the data;
* its standard deviation exceeds ``max(max_relative_std * |value|, resolution)``
  (:func:`imprecise`);
* its value is implausible (:func:`~diffsim_ros.model.plausibility.plausibility_violations`).

Standard deviations come from :func:`serial_covariance`: Gauss-Newton for independent rows
(rest poses, camera observations), a sandwich with the long-run score covariance for rows
that are time series of filtered data, whose errors are correlated over the filter's span.
"""

from dataclasses import dataclass, field

import numpy as np

from diffsim_ros.model.plausibility import parameter_kind

__all__ = [
    "CONDITION_LIMIT",
    "NULL_PARTICIPATION",
    "DeterminationPolicy",
    "SerialRows",
    "covariance",
    "data_hint",
    "imprecise",
    "MAX_FITTED_SHARE",
    "fitted_share",
    "long_run_information",
    "named_delta_method",
    "parzen_weights",
    "pinned_coordinates",
    "rank_flags",
    "serial_covariance",
]

CONDITION_LIMIT = 1e7
"""Normalized singular values below s_max / CONDITION_LIMIT span unidentifiable directions."""
NULL_PARTICIPATION = 0.3
"""A coordinate whose unit vector has this much weight in the null space is unidentifiable."""

_RESOLUTION = {
    "payload.mass": 0.01,  # [kg]
    "payload.com": 0.01,  # [m], norm of the std vector
    "mass": 0.05,
    "com": 0.01,
    "inertia": 1e-3,  # [kg·m²]
    "damping": 0.02,  # [N·m·s/rad]
    "friction": 0.02,  # [N·m]
    "armature": 0.005,  # [kg·m²] a tenth of a small arm's wrist rotor
    # [N·m] A fifth to a thirtieth of the biases of Baxter's effort sensors (0.5-3 N·m). Measured on an
    # independent MuJoCo arm (RESULTS "Arm calibration on an independent generator with effort nuisances"):
    # with 0.3 N·m of coloured effort noise, an unbiased s1 came out 0.025 +- 0.068.
    "effort_bias": 0.1,
    "efforts.delay": 0.001,  # [s] a tenth of a 100 Hz sample
    "spring.stiffness": 0.0,
    "spring.offset": 0.0175,  # [rad] (1 deg)
    "spring.alpha1": 0.0175,
    "spring.l1": 0.005,
    "spring.l2": 0.005,
    "spring.rest_length": 0.005,
    "spring.damping": 0.02,  # [N·s/m or N·m·s/rad]
    "spring.point_a": 0.005,
    "spring.point_b": 0.005,
    "origin.xyz": 0.005,
    "camera.pose": 0.01,  # [m] of the position part
}

_HINTS = {
    "payload.mass": "rest poses or motion with the payload at varied heights",
    "payload.com": "rest poses or motion with varied wrist orientations (and a payload heavy enough to weigh)",
    "mass": "motion or rest poses that load this link in varied orientations",
    "com": "motion or rest poses that load this link in varied orientations",
    "inertia": "fast motion with varied accelerations of this link",
    "damping": "motion of this joint at varied speeds",
    "friction": "motion of this joint in both directions at varied speeds",
    "armature": "motion with varied accelerations of this joint",
    "efforts.delay": "motion with faster changes of the joint torques",
    "effort_bias": "rest poses or motion over a wider range of configurations (the bias is the torque no pose changes)",
    "spring.stiffness": "motion or rest poses over a wider range of the spring joint",
    "spring.offset": "motion or rest poses over a wider range of the spring joint",
    "spring.rest_length": "motion or rest poses over a wider range of the spring's stretch",
    "spring.damping": "motion that stretches the spring at varied speeds",
    "origin.xyz": "camera poses or rest poses over a wider workspace",
    "camera.pose": "camera poses with the tracked link at varied positions and orientations",
}


@dataclass(frozen=True)
class DeterminationPolicy:
    """When an estimate counts as determined by the data.

    Attributes:
        max_relative_std: Largest accepted std relative to the value's magnitude.
        resolution: Parameter kind -> absolute std always accepted (SI units), so that
            values near zero are not rejected for their relative precision.
        bound_sigmas: An estimate on a bound is rejected when the unconstrained fit lies more
            than this many standard deviations beyond it.
    """

    max_relative_std: float = 0.25
    resolution: dict = field(default_factory=lambda: dict(_RESOLUTION))
    bound_sigmas: float = 2.0

    def __post_init__(self):
        if not (self.max_relative_std > 0 and self.bound_sigmas > 0):
            raise ValueError("max_relative_std and bound_sigmas must be positive")


def data_hint(name):
    """Which data would determine the parameter ``name`` (for messages)."""
    return _HINTS.get(parameter_kind(name) or "", "more varied data")


def rank_flags(jac):
    """Coordinates the data cannot determine from the Jacobian alone.

    Args:
        jac: Normalized residual Jacobian, numpy (M, P).

    Returns:
        ``(flags (P,) bool, normalized singular values)``.
    """
    norms = np.linalg.norm(jac, axis=0)
    flags = ~(norms > 0)
    active = ~flags
    if not active.any():
        return flags, np.zeros(0)
    scaled = jac[:, active] / norms[active]
    _, sing, vt = np.linalg.svd(scaled, full_matrices=False)
    weak = sing < sing[0] / CONDITION_LIMIT
    if weak.any():
        participation = np.sqrt((vt[weak] ** 2).sum(0))
        flags[np.flatnonzero(active)[participation > NULL_PARTICIPATION]] = True
    return flags, sing


def covariance(jac, variance):
    """Gauss-Newton covariance ``variance * (J^T J)^+`` of the coordinates, numpy (P, P)."""
    return variance * np.linalg.pinv(jac.T @ jac)


@dataclass(frozen=True)
class SerialRows:
    """Rows of a stacked residual that are time series with serially correlated errors.

    Residuals from filtered data share raw samples with their neighbours: the errors of
    samples closer than the filter's reach are correlated, those of other blocks, other
    segments (gap-free runs) or farther samples are not.

    Attributes:
        start: First row of the block in the stacked residual.
        width: Rows per sample: the block's rows are ``(sum(lengths), width)`` row-major
            from ``start``.
        lengths: Samples of every segment, in row order.
        reach: Largest lag [samples] at which errors of one segment may be correlated (>= 1).
    """

    start: int
    width: int
    lengths: tuple
    reach: int


def parzen_weights(reach):
    """Parzen lag window over twice the dependency reach: weights of lags 0..2 reach, (2 reach + 1,).

    The Parzen window's spectrum is non-negative, so the long-run covariance it weights is
    positive semi-definite; spanning twice the reach, it keeps the errors' correlation at the
    short lags where a smoothing filter puts it (>= 0.99 of a Savitzky-Golay or Peano
    kernel's long-run variance, 0.82 of a flat moving average's).
    """
    x = np.arange(2 * reach + 1) / (2 * reach + 1)
    return np.where(x <= 0.5, 1 - 6 * x**2 + 6 * x**3, 2 * (1 - x) ** 3)


def _lag_covariances(psi, active, bounds, count):
    """Pooled cross-covariances ``G[l][c, d] = E psi[t + l, c] psi[t, d]`` of normalized errors.

    Sums over every segment, divided by ``sqrt(n_c n_d)`` (entries that count per column):
    a congruence of the sample autocovariance sequence, which keeps its positive
    semi-definiteness (a per-lag count would not).
    """
    counts = np.maximum(active.sum(0), 1.0)
    norm = 1.0 / np.sqrt(np.outer(counts, counts))
    out = []
    for lag in range(count):
        total = np.zeros_like(norm)
        for a, b in bounds:
            if b - a > lag:
                total += psi[a + lag : b].T @ psi[a : b - lag]
        out.append(norm * total)
    return out


def long_run_information(jac, psi, lengths, reach):
    """``sum_{t,s} J_t^T w(t - s) G(t - s) J_s`` over samples t, s of one segment, numpy (P, P).

    The score covariance of a block of serially correlated errors whose covariance depends on
    the lag only (noise stationary within the block, as the Gauss-Newton covariance assumes
    it constant per column), a Hansen-Hodrick estimator with the Parzen lag window
    (:func:`parzen_weights`). With one column, unit weights and no lags it is
    ``var(psi) J^T J``, the Gauss-Newton information.

    Args:
        jac: Jacobian of the block's normalized residual, (S, C, P): sample, column, coordinate.
        psi: Influence of the normalized residual (:func:`~diffsim_ros.estimation.solvers.robust_influence`), (S, C).
        lengths: Samples of every segment in order (sum S).
        reach: Largest lag [samples] of correlated errors.
    """
    weights = parzen_weights(int(reach))
    ends = np.cumsum(lengths)
    bounds = list(zip(ends - np.asarray(lengths), ends))
    active = (psi != 0) | np.any(jac != 0, axis=2)  # entries a block leaves out are exactly 0
    lagged = _lag_covariances(psi, active, bounds, len(weights))
    smeared = np.zeros_like(jac)  # sum_s w(t - s) G(t - s) J_s for every sample t
    for lag, (weight, g) in enumerate(zip(weights, lagged)):
        for a, b in bounds:
            if b - a <= lag:
                continue
            smeared[a : b - lag] += weight * (g.T @ jac[a + lag : b])  # partners s = t + lag
            if lag:
                smeared[a + lag : b] += weight * (g @ jac[a : b - lag])  # partners s = t - lag
    size = jac.shape[2]
    info = jac.reshape(-1, size).T @ smeared.reshape(-1, size)
    return 0.5 * (info + info.T)


def _active_spans(jac, psi, lengths):
    """Each segment cut to its samples from the first to the last with a nonzero entry.

    Rows a caller zeroed (the other part of a data split) add nothing to any lag sum, so the
    sums are unchanged; they only cost time. Returns ``(jac, psi, lengths)`` without empty
    segments.
    """
    nonzero = (psi != 0).any(1) | (jac != 0).any((1, 2))
    ends = np.cumsum(lengths)
    keep, kept = [], []
    for a, b in zip(ends - np.asarray(lengths), ends):
        hits = np.flatnonzero(nonzero[a:b])
        if hits.size:
            keep.append(np.arange(a + hits[0], a + hits[-1] + 1))
            kept.append(int(hits[-1] - hits[0] + 1))
    index = np.concatenate(keep) if keep else np.zeros(0, dtype=int)
    return jac[index], psi[index], kept


def serial_covariance(jac, psi, variance, serial=()):
    """Sandwich covariance ``(J^T J)^+ S (J^T J)^+`` of the coordinates, numpy (P, P).

    Rows in ``serial`` contribute their long-run score covariance
    (:func:`long_run_information`), all others ``variance * J_i^T J_i`` as independent
    rows: without serial rows this is :func:`covariance`. Residuals of filtered motion are
    correlated over the filter's span; the Gauss-Newton covariance, which counts every row
    as new information, made the payload's std 2-3x too small (Baxter, 6 and 20 s of motion).

    Args:
        jac: Normalized residual Jacobian, (M, P).
        psi: Influence of every normalized residual, (M,) (the residual for least squares).
        variance: Residual variance of the independent rows (the Gauss-Newton one).
        serial: :class:`SerialRows` of every block whose rows are time series.
    """
    rows, size = jac.shape
    bread = np.linalg.pinv(jac.T @ jac)
    independent = np.ones(rows, dtype=bool)
    scores = np.zeros((size, size))
    for part in serial:
        samples = int(sum(part.lengths))
        index = slice(part.start, part.start + samples * part.width)
        independent[index] = False
        block, errors, lengths = _active_spans(jac[index].reshape(samples, part.width, size),
                                               psi[index].reshape(samples, part.width), part.lengths)
        if not lengths:
            continue
        info = long_run_information(block, errors, lengths, part.reach)
        scores += info / (1.0 - fitted_share(block, bread, lengths, part.reach))
    plain = jac[independent]
    scores += variance * (plain.T @ plain)
    return bread @ scores @ bread


MAX_FITTED_SHARE = 0.5
"""Largest share of a block's long-run variance taken as absorbed by the fit (very short
segments: the correction is first-order only)."""


def fitted_share(jac, bread, lengths, reach):
    """Share of the long-run variance that fitted residuals lose to the fit, scalar in [0, MAX_FITTED_SHARE].

    Fitted residuals ``(I - H) e`` are orthogonal to the Jacobian: each lag covariance of
    them is low by about ``lambda * sum_t H[t + l, t] / n`` (``lambda`` the long-run variance,
    for a Jacobian smooth over the filter's span), so the weighted sum is low by the share
    ``sum_l w_l sum_t H[t + l, t] / n``; at lag 0 alone it is the ``P / M`` of the
    Gauss-Newton variance's ``M - P``. Measured on smoothed white noise and on white noise:
    the estimated variance ends 5-20 % low without it (600 samples, 3 coordinates, 60 lags).

    Args:
        jac: Jacobian of the block, (S, C, P).
        bread: ``(J^T J)^+`` of the whole problem, (P, P).
        lengths: Samples of every segment in order.
        reach: Largest lag [samples] of correlated errors.
    """
    size = jac.shape[2]
    ends = np.cumsum(lengths)
    weights = parzen_weights(int(reach))
    lagged = np.zeros((size, size))
    for lag, weight in enumerate(weights):
        for a, b in zip(ends - np.asarray(lengths), ends):
            if b - a > lag:
                gram = jac[a : b - lag].reshape(-1, size).T @ jac[a + lag : b].reshape(-1, size)
                lagged += weight * (gram + gram.T if lag else gram)
    entries = max(1, int(np.sum(np.any(jac != 0, axis=2))))
    return float(np.clip(np.sum(bread * lagged) / entries, 0.0, MAX_FITTED_SHARE))


def pinned_coordinates(z, active, jac, residual, cov, lower, upper, bound_sigmas):
    """Coordinates held at a bound against the data.

    From the constrained optimum, one unconstrained Gauss-Newton step shows where the data
    alone would put each coordinate; one that lands beyond its active bound by more than
    ``bound_sigmas`` of its standard deviation is pinned.

    Args:
        z: Coordinates at the optimum, numpy (P,).
        active: -1 / 0 / +1 per coordinate (at lower / inside / at upper bound), (P,).
        jac, residual: Linear-loss Jacobian (M, P) and residual (M,) at the optimum.
        cov: Covariance (P, P).
        lower, upper: Bounds (P,).
        bound_sigmas: Tolerance in standard deviations.

    Returns:
        Dict index -> (bound side "lower"/"upper", bound value, unconstrained value, std).
    """
    out = {}
    if not np.any(active):
        return out
    step = -np.linalg.lstsq(jac, residual, rcond=None)[0]
    std = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    for i in np.flatnonzero(active):
        free_value = z[i] + step[i]
        side, bound = ("lower", lower[i]) if active[i] < 0 else ("upper", upper[i])
        beyond = (bound - free_value) if active[i] < 0 else (free_value - bound)
        if beyond > bound_sigmas * std[i]:
            out[int(i)] = (side, float(bound), float(free_value), float(std[i]))
    return out


def imprecise(name, value, std, policy):
    """Reason why ``value +- std`` of parameter ``name`` is not determined, or None."""
    value, std = np.asarray(value, float), np.asarray(std, float)
    if not np.all(np.isfinite(std)):
        return "its standard deviation is not finite"
    kind = parameter_kind(name) or ""
    if kind == "camera.pose":
        value, std = value[:3], std[:3]
    size, spread = float(np.linalg.norm(value)), float(np.linalg.norm(std))
    allowed = max(policy.max_relative_std * size, policy.resolution.get(kind, 0.0))
    if spread <= allowed:
        return None
    return (f"too imprecise: std {spread:.3g} against the value {size:.3g} "
            f"(accepted: {allowed:.3g}, {policy.max_relative_std:.0%} or the resolution of its kind)")


def named_delta_method(value, jacobian, layout, cov):
    """Named values and delta-method standard deviations of stacked physical parameters.

    Args:
        value: Stacked parameter values, (Q,).
        jacobian: Their Jacobian over the coordinates, (Q, P).
        layout: ``[(name, shape)]`` in stacking order.
        cov: Covariance of the coordinates, (P, P).

    Returns:
        ``(values, stddev)``: name -> array of its shape, each.
    """
    std = np.sqrt(np.clip(np.einsum("ij,jk,ik->i", jacobian, cov, jacobian), 0.0, None))
    values, stddev, start = {}, {}, 0
    for name, shape in layout:
        size = int(np.prod(shape)) if shape else 1
        values[name] = value[start : start + size].reshape(shape)
        stddev[name] = std[start : start + size].reshape(shape)
        start += size
    return values, stddev
