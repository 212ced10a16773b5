"""Do the two kinds of camera data agree on the parameters? A specification test of a pose fit.

A fit's residuals can sit at the camera noise and still hide a model error that the
parameters absorb: issue 19's MuJoCo collisions fitted by a rigid, impulsive hit end "ok" at
mass +11 % (4 std) on some noise draws, because the hit spins the boxes ~2.6 % differently
and the mass bends to fit the spin. Positions and orientations are independent measurements
(separate camera noise), so under a correct model each alone estimates the same parameters;
a model error pulls them apart. :func:`channel_consistency` compares the two estimates,
linearized at the joint solution (one Gauss-Newton step on each channel's rows: no extra
rollouts), by a Hausman-type chi-square test on the physical parameters:

``T = dᵀ (C_p + C_o)⁺ d``,  ``d = δ_p − δ_o``,

with ``δ_c`` the step and ``C_c`` its covariance from channel c's rows (noise weighted) plus
the shared prior rows, nuisances (initial poses and twists) eliminated. The prior rows make
the two estimates slightly correlated, which ``C_p + C_o`` overstates: the test is
conservative. Directions that one channel cannot determine carry no evidence, nor do
parameters one channel knows :data:`STD_RATIO` times less well than the other (they are
then nuisances of the test).
"""

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2

from diffsim_ros.estimation.identifiability import serial_covariance

__all__ = ["Consistency", "SplitTest", "channel_consistency", "split_consistency", "CONSISTENCY_P_VALUE"]

# Below this p-value the position and orientation data disagree beyond noise. 1e-3: one fit
# in a thousand of a correct model is flagged; a model error of a few std is not missed.
CONSISTENCY_P_VALUE = 1e-3
# Singular values below this fraction of the largest are dropped (as in parameter_uncertainty).
RCOND = 1e-9
# A channel whose std of a parameter is this many times the other channel's has no opinion on
# it worth testing: what little it sees comes from second-order effects the model does not claim
# to reproduce. Measured: before a hit, a box's mass is seen only through the ground contact's
# compliance, 19 kg std against 0.1 kg after it; its -79 kg "estimate" made a fit of an
# independent MuJoCo collision poor (chi-square 17.7 of 19.2) whose data after the hit agreed.
STD_RATIO = 30.0


@dataclass(frozen=True)
class Consistency:
    """Result of :func:`channel_consistency`.

    Attributes:
        statistic: ``T``, chi-square distributed with ``dof`` degrees of freedom under a
            correct model with white camera noise.
        dof: Degrees of freedom (parameters both channels inform).
        p_value: Probability of a ``T`` at least this large under a correct model.
        by_channel: Channel name -> {parameter: its one-channel estimate}.
        z: Parameter -> difference of the two estimates over its std (signed, position
            minus orientation).
        std_by_channel: Channel name -> {parameter: std of its one-channel estimate} (inf
            where that channel is blind to it).
    """

    statistic: float
    dof: int
    p_value: float
    by_channel: dict
    z: dict
    std_by_channel: dict

    def agrees(self, p_value=CONSISTENCY_P_VALUE):
        """True when the channels agree at the given p-value (or there is nothing to test)."""
        return self.dof == 0 or self.p_value >= p_value


def _marginal(jac, residual, sigma, rows, count):
    """One channel's marginal information on the first ``count`` unknowns (count, count) and
    the Gauss-Newton step on them (count,), nuisances eliminated (Schur complement)."""
    jw = jac[rows] / sigma[rows, None]
    info = jw.T @ jw
    gradient = jw.T @ (residual[rows] / sigma[rows])
    nn = np.linalg.pinv(info[count:, count:], rcond=RCOND, hermitian=True)
    coupling = info[:count, count:] @ nn
    schur = info[:count, :count] - coupling @ info[count:, :count]
    reduced = gradient[:count] - coupling @ gradient[count:]
    return schur, -np.linalg.pinv(schur, rcond=RCOND, hermitian=True) @ reduced


def _variances(schur):
    """Marginal variances (count,) from an information matrix; inf where it is blind."""
    values, vectors = np.linalg.eigh(schur)
    seen = values > RCOND * max(values.max(initial=0.0), np.finfo(float).tiny)
    blind = np.linalg.norm(vectors[:, ~seen], axis=1) > 1e-6
    variance = (vectors[:, seen] ** 2 / values[seen]).sum(1)
    return np.where(blind, np.inf, variance)


def _weak(variance_a, variance_b):
    """Parameters one channel sees, but :data:`STD_RATIO` times less precisely than the other."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.sqrt(np.maximum(variance_a, variance_b) / np.minimum(variance_a, variance_b))
    return np.isfinite(ratio) & (ratio > STD_RATIO)


def channel_consistency(jac, residual, sigma, channels, names, x, labels=("position", "orientation"), shared=2):
    """Chi-square test that position and orientation rows agree on the parameters.

    Each channel (its rows plus the ``shared`` rows) gives a linearized estimate of the
    parameters at the joint solution with its nuisances eliminated: marginal information
    ``S_c`` and step ``δ_c``. The statistic ``T = dᵀ S_p (S_p + S_o)⁺ S_o d`` is
    ``dᵀ (S_p⁻¹ + S_o⁻¹)⁻¹ d`` where both are invertible, and ignores directions one
    channel cannot see (``S_c`` singular there: the channel has no opinion to disagree with).

    Args:
        jac: Jacobian of the residuals at the solution, shape (R, P); the first
            ``len(names)`` columns are the tested parameters (the rest are nuisances).
        residual: Residuals at the solution, shape (R,).
        sigma: Noise standard deviation of every row (same units as the row), shape (R,).
        channels: Channel of every row: 0, 1 (the compared channels, see ``labels``) or
            ``shared`` (rows both estimates use, e.g. priors), shape (R,).
        names: Tested parameter names, length p <= P.
        x: Joint solution, shape (P,) (only the first p entries are used).
        labels: Names of channels 0 and 1.
        shared: Channel of the rows both estimates use.

    Returns:
        Consistency.
    """
    channels = np.asarray(channels)
    sigma = np.maximum(np.asarray(sigma, float), np.finfo(float).tiny)
    count = len(names)
    rows = [(channels == c) | (channels == shared) for c in (0, 1)]
    (info_a, step_a), (info_b, step_b) = (_marginal(jac, residual, sigma, r, count) for r in rows)
    variances = (_variances(info_a), _variances(info_b))
    stds = {label: {n: float(np.sqrt(v[i])) for i, n in enumerate(names)} for label, v in zip(labels, variances)}
    by_channel = {label: {n: float(x[i] + step[i]) for i, n in enumerate(names)} for label, step in zip(labels, (step_a, step_b))}
    weak = _weak(*variances)
    tested = np.flatnonzero(~weak)
    if not tested.size:
        return Consistency(0.0, 0, 1.0, by_channel, {n: 0.0 for n in names}, stds)
    if weak.any():  # weakly seen parameters become nuisances: tested columns first
        order = np.concatenate([tested, np.flatnonzero(weak), np.arange(count, jac.shape[1])])
        jac = jac[:, order]
        (info_a, step_a), (info_b, step_b) = (_marginal(jac, residual, sigma, r, tested.size) for r in rows)
    d = step_a - step_b
    metric = info_a @ np.linalg.pinv(info_a + info_b, rcond=RCOND, hermitian=True) @ info_b
    metric = 0.5 * (metric + metric.T)
    statistic = float(max(d @ metric @ d, 0.0))
    values = np.linalg.eigvalsh(metric)
    dof = int((values > RCOND * max(values.max(initial=0.0), np.finfo(float).tiny)).sum()) if values.size else 0
    p_value = float(chi2.sf(statistic, dof)) if dof else 1.0
    spread = np.sqrt(_variances(info_a) + _variances(info_b))
    z = {n: 0.0 for n in names}
    z.update({names[i]: float(d[k] / spread[k]) for k, i in enumerate(tested) if np.isfinite(spread[k]) and spread[k] > 0})
    return Consistency(statistic=statistic, dof=dof, p_value=p_value, by_channel=by_channel, z=z, std_by_channel=stds)


@dataclass(frozen=True)
class SplitTest:
    """Result of :func:`split_consistency`, in the fit's coordinates (P of them).

    Attributes:
        statistic: ``T``, chi-square distributed with ``dof`` degrees of freedom when both
            parts of the data follow one model.
        dof: Degrees of freedom (coordinates both parts inform).
        p_value: Probability of a ``T`` at least this large under one model.
        steps: ``(δ_a, δ_b)``: each part's linearized estimate minus the joint one, (P,) each
            (0 at untested coordinates).
        covariances: ``(C_a, C_b)``: their covariances, (P, P) each (0 outside the tested).
        tested: Coordinates the test compares, bool (P,); the others (blind in a part, or
            seen :data:`STD_RATIO` times less well by one) are eliminated as nuisances.
    """

    statistic: float
    dof: int
    p_value: float
    steps: tuple
    covariances: tuple
    tested: np.ndarray

    def agrees(self, p_value=CONSISTENCY_P_VALUE):
        """True when the parts agree at the given p-value (or there is nothing to test)."""
        return self.dof == 0 or self.p_value >= p_value


def _partial_out(jac, nuisance):
    """Columns of ``jac`` with the nuisance columns' span projected out (Frisch-Waugh-Lovell)."""
    tested = jac[:, ~nuisance]
    if not nuisance.any():
        return tested
    other = jac[:, nuisance]
    return tested - other @ np.linalg.lstsq(other, tested, rcond=None)[0]


def split_consistency(jac, psi, variance, parts, serial=(), shared=2):
    """Chi-square test that two parts of a fit's data (e.g. the data before and after their
    middle) agree on the parameters, with rows whose errors are serially correlated.

    As :func:`channel_consistency`, each part (its rows plus the ``shared`` ones) gives a
    linearized estimate at the joint solution, ``δ_c = -(J_cᵀ J_c)⁻¹ J_cᵀ ψ_c``, and
    ``T = dᵀ (C_a + C_b)⁺ d`` with ``d = δ_a - δ_b``; but ``C_c`` is the sandwich
    covariance of :func:`~diffsim_ros.estimation.identifiability.serial_covariance`, since
    residuals of filtered motion are correlated over the filter's span (a white-noise
    covariance would flag a correct model). Shared rows make the two estimates positively
    correlated, which ``C_a + C_b`` overstates: the test is conservative.

    Args:
        jac: Normalized residual Jacobian at the solution, (R, P).
        psi: Influence of every normalized residual, (R,) (the residual for least squares).
        variance: Residual variance of the independent rows.
        parts: Part of every row: 0, 1, or ``shared``, (R,); rows of any other label count
            on neither side.
        serial: :class:`~diffsim_ros.estimation.identifiability.SerialRows` of the rows.
        shared: Label of the rows both parts use.

    Returns:
        SplitTest.
    """
    parts, size = np.asarray(parts), jac.shape[1]
    # Unit columns: coordinates of very different information (a camera's millimetres next to a
    # damping) would otherwise look blind against the largest eigenvalue. T does not change.
    scale = np.linalg.norm(jac, axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    jac = jac / scale
    masks = [((parts == c) | (parts == shared)).astype(float) for c in (0, 1)]
    jacs = [jac * m[:, None] for m in masks]  # zeroed rows count for nothing, offsets stay valid
    variances = [_variances(j.T @ j) for j in jacs]
    nuisance = ~(np.isfinite(variances[0]) & np.isfinite(variances[1])) | _weak(*variances)
    tested = ~nuisance
    if not tested.any():  # no coordinate both parts inform: nothing to compare
        zero = np.zeros((size, size))
        return SplitTest(0.0, 0, 1.0, (np.zeros(size),) * 2, (zero, zero), tested)
    steps, covariances = [], []
    for j, m in zip(jacs, masks):
        reduced = _partial_out(j, nuisance)
        bread = np.linalg.pinv(reduced.T @ reduced, rcond=RCOND, hermitian=True)
        step, cov = np.zeros(size), np.zeros((size, size))
        step[tested] = -bread @ reduced.T @ (psi * m)
        cov[np.ix_(tested, tested)] = serial_covariance(reduced, psi * m, variance, serial)
        steps.append(step)
        covariances.append(cov)
    d = (steps[0] - steps[1])[tested]  # in the unit-column coordinates
    total = (covariances[0] + covariances[1])[np.ix_(tested, tested)]
    values, vectors = np.linalg.eigh(0.5 * (total + total.T))
    seen = values > RCOND * max(values.max(initial=0.0), np.finfo(float).tiny)
    statistic = float(((vectors[:, seen].T @ d) ** 2 / values[seen]).sum())
    dof = int(seen.sum())
    p_value = float(chi2.sf(statistic, dof)) if dof else 1.0
    return SplitTest(statistic, dof, p_value, tuple(s / scale for s in steps),
                     tuple(c / np.outer(scale, scale) for c in covariances), tested)
