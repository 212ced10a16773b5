"""Least-squares solvers of identification: forward-mode Jacobians, trust-region LM, Adam.

Residual functions map optimizer coordinates z (P,) to normalized residuals r (M,) with unit
noise variance. ``least_squares`` is scipy's trust-region reflective method with box bounds
and a robust loss; ``adam`` is a first-order alternative for very large problems.
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.autograd.forward_ad as fwad
from scipy.optimize import least_squares as _scipy_least_squares

from diffsim_ros._tangents import lean_zero_tangents

__all__ = ["ROBUST_LOSSES", "DECREMENT_TOLERANCE", "Solution", "forward_jacobian", "robust_cost", "robust_influence",
           "gauss_newton_decrement", "CONVERGED_MESSAGE", "least_squares", "adam"]

ROBUST_LOSSES = ("linear", "huber", "soft_l1", "cauchy")

# Stop when the full Gauss-Newton step would lower the cost (normalized residuals: chi^2 / 2)
# by less than this: the estimate is then within sqrt(2 * 1e-5) = 0.0045 standard deviations
# of the optimum (in the metric of its own covariance). Further evaluations move nothing the
# data can tell apart; scipy's relative tolerances alone ran about twice as many evaluations.
DECREMENT_TOLERANCE = 1e-5
CONVERGED_MESSAGE = "the Gauss-Newton decrement is below decrement_tolerance"


@dataclass(frozen=True)
class Solution:
    """What a solver returns.

    Attributes:
        z: Coordinates at the solution, tensor (P,).
        success: Whether the solver reported convergence.
        message: Solver message.
        active: Per coordinate: -1 at its lower bound, +1 at its upper bound, 0 inside, (P,).
        evaluations: Residual evaluations used.
    """

    z: torch.Tensor
    success: bool
    message: str
    active: np.ndarray
    evaluations: int


def forward_jacobian(fn, x):
    """Jacobian of ``fn: (P,) -> (M,)`` by forward-mode AD.

    All P tangents are pushed through in one vectorized pass (``torch.func.jacfwd``); code
    that ``vmap`` cannot batch falls back to one forward-mode pass per coordinate. Forward
    mode is the cheap direction for identification, where residuals (M) far outnumber
    parameters (P). Inside :func:`~diffsim_ros._tangents.lean_zero_tangents`: the zero
    tangents of constants otherwise cost most of the time in torch's Python shape code.

    Returns:
        ``(value (M,), jacobian (M, P))``, detached.
    """
    if x.shape[0] == 0:
        value = fn(x).detach()
        return value, value.new_zeros(value.shape[0], 0)
    with lean_zero_tangents():
        try:
            jac, value = torch.func.jacfwd(lambda z: (lambda out: (out, out))(fn(z)), has_aux=True)(x)
            return value.detach(), jac.detach()
        except (RuntimeError, NotImplementedError):
            return _forward_jacobian_loop(fn, x)


def _forward_jacobian_loop(fn, x):
    columns, value = [], None
    eye = torch.eye(x.shape[0], dtype=x.dtype, device=x.device)
    for i in range(x.shape[0]):
        with fwad.dual_level():
            out = fwad.unpack_dual(fn(fwad.make_dual(x, eye[i])))
            value = out.primal if value is None else value
            columns.append(out.tangent if out.tangent is not None else torch.zeros_like(out.primal))
    return value.detach(), torch.stack(columns, dim=1).detach()


def _rho(z, robust):
    """scipy's robust loss ``rho(z)`` and its derivative ``rho'(z)`` at ``z = (r / scale)^2``."""
    if robust == "linear":
        return z, np.ones_like(z)
    if robust == "huber":
        root = np.sqrt(np.maximum(z, 1.0))
        return np.where(z <= 1, z, 2 * root - 1), np.where(z <= 1, 1.0, 1.0 / root)
    if robust == "soft_l1":
        return 2 * (np.sqrt(1 + z) - 1), 1.0 / np.sqrt(1 + z)
    return np.log1p(z), 1.0 / (1 + z)


def _curvature(z, robust):
    """``rho'(z) + 2 z rho''(z)``, floored at 0: the Gauss-Newton weight scipy gives a residual."""
    if robust == "linear":
        return np.ones_like(z)
    if robust == "huber":
        return np.where(z <= 1, 1.0, 0.0)  # beyond the bend the loss is linear in |r|
    if robust == "soft_l1":
        return (1 + z) ** -1.5
    return np.maximum((1 - z) / (1 + z) ** 2, 0.0)


def robust_cost(residual, robust, scale):
    """``0.5 * sum rho(r^2)`` with scipy's robust-loss definitions (numpy, scalar)."""
    return 0.5 * scale**2 * _rho((np.asarray(residual) / scale) ** 2, robust)[0].sum()


def robust_influence(residual, robust, scale):
    """Influence ``psi(r) = rho'((r / scale)^2) r`` of every residual, numpy like ``residual``.

    The cost's gradient is ``J^T psi(r)``: a residual's share of the estimate (for Huber, r
    clipped to +-scale), what the scores of a sandwich covariance are made of.
    """
    residual = np.asarray(residual, dtype=float)
    return _rho((residual / scale) ** 2, robust)[1] * residual


def _active(z, lower, upper, reported=None):
    """-1 / +1 where a coordinate is at its lower / upper bound (the solver's own report, or
    within 1e-6 of the coordinate's magnitude: trust-region iterates stay strictly inside)."""
    width = np.maximum(np.abs(z), 1.0) * 1e-6
    near = np.where(z <= lower + width, -1, np.where(z >= upper - width, 1, 0))
    if reported is not None:
        near = np.where(near == 0, np.asarray(reported), near)
    return near.astype(int)


def _interior(x, lower, upper, rstep=1e-10):
    """``x`` moved ``rstep`` (relative) inside any bound it touches: scipy's trust-region start,
    so the start it evaluates is the one already evaluated here."""
    x = np.array(x, dtype=float)
    for bound, sign in ((np.asarray(lower, dtype=float), 1.0), (np.asarray(upper, dtype=float), -1.0)):
        margin = rstep * np.maximum(1.0, np.abs(bound))
        near = np.isfinite(bound) & (sign * (x - bound) <= margin)
        x[near] = bound[near] + sign * margin[near]
    return x


def gauss_newton_decrement(residual, jacobian, z, lower, upper, robust="linear", scale=3.0):
    """How much the full Gauss-Newton step from ``z`` would lower the robust cost.

    ``0.5 g^T H^+ g`` with the cost's gradient ``g = J^T psi(r)`` and scipy's Gauss-Newton
    Hessian ``H = J^T diag(w) J`` of the robust loss, over the coordinates a bound does not
    block (at a bound with the descent direction pointing out). In normalized residuals, the
    estimate lies ``sqrt(2 * decrement)`` standard deviations from the local optimum.

    Args:
        residual: (M,) normalized residual at ``z``; jacobian: (M, P); z, lower, upper: (P,).
        robust, scale: As :func:`least_squares`.

    Returns:
        float >= 0 (inf if the residual is not finite).
    """
    residual, jacobian = np.asarray(residual, dtype=float), np.asarray(jacobian, dtype=float)
    if not (np.isfinite(residual).all() and np.isfinite(jacobian).all()):
        return np.inf
    squared = (residual / scale) ** 2
    gradient = jacobian.T @ (_rho(squared, robust)[1] * residual)
    hessian = (jacobian * _curvature(squared, robust)[:, None]).T @ jacobian
    near = _active(np.asarray(z, dtype=float), lower, upper)
    open_ = ~(((near < 0) & (gradient > 0)) | ((near > 0) & (gradient < 0)))
    g, h = gradient[open_], hessian[np.ix_(open_, open_)]
    if g.size == 0:
        return 0.0
    d = np.sqrt(np.maximum(np.diag(h), 1e-300))  # equilibrate: coordinates differ by many decades
    step = np.linalg.lstsq(h / np.outer(d, d), g / d, rcond=1e-12)[0]
    return float(max(0.5 * np.dot(g / d, step), 0.0))


def least_squares(value_and_jacobian, z0, lower, upper, robust="linear", scale=3.0, max_evaluations=50,
                  on_evaluation=None, decrement_tolerance=DECREMENT_TOLERANCE):
    """Trust-region reflective least squares (scipy) with given Jacobians.

    Args:
        value_and_jacobian: Tensor (P,) -> (residual (M,), Jacobian (M, P)), e.g. from
            :func:`forward_jacobian`.
        z0: Start, tensor (P,) inside the bounds.
        lower, upper: Box bounds, numpy (P,) (infinite where unbounded).
        robust: One of :data:`ROBUST_LOSSES`.
        scale: Residual size where the robust loss bends (normalized units).
        max_evaluations: Residual evaluations.
        on_evaluation: Called with the cost after every evaluation.
        decrement_tolerance: Stop at an accepted point whose :func:`gauss_newton_decrement` is
            below this (also at the start); 0 leaves only scipy's own (relative) tolerances.

    Returns:
        Solution.
    """
    cache, count = {}, [0]

    def evaluate(z):
        key = z.tobytes()
        if key not in cache:
            cache.clear()
            value, jac = value_and_jacobian(torch.as_tensor(z, dtype=z0.dtype, device=z0.device))
            cache[key] = (value.cpu().numpy(), jac.cpu().numpy())
            count[0] += 1
            if on_evaluation is not None:
                on_evaluation(robust_cost(cache[key][0], robust, scale))
        return cache[key]

    def converged(z):
        return decrement_tolerance > 0 and gauss_newton_decrement(*evaluate(z), z, lower, upper, robust,
                                                                  scale) < decrement_tolerance

    def callback(x):  # at every accepted point, where scipy has just evaluated the Jacobian
        if x.tobytes() in cache and converged(x):
            raise StopIteration

    start = _interior(z0.cpu().numpy(), lower, upper)
    if converged(start):  # e.g. the second pass after a reweight: nothing left to gain
        z = torch.as_tensor(start, dtype=z0.dtype, device=z0.device)
        return Solution(z, True, CONVERGED_MESSAGE, _active(start, lower, upper), count[0])
    bounded = np.isfinite(lower).any() or np.isfinite(upper).any()
    result = _scipy_least_squares(
        lambda z: evaluate(z)[0], start, jac=lambda z: evaluate(z)[1],
        bounds=(lower, upper) if bounded else (-np.inf, np.inf), method="trf", loss=robust, f_scale=scale,
        x_scale="jac", max_nfev=max_evaluations, ftol=1e-12, xtol=1e-12, gtol=1e-12, callback=callback,
    )
    z = torch.as_tensor(result.x, dtype=z0.dtype, device=z0.device)
    active = _active(result.x, lower, upper, result.active_mask if bounded else None)
    stopped = result.status == -2  # by the callback: the decrement test
    return Solution(z, stopped or bool(result.success), CONVERGED_MESSAGE if stopped else str(result.message), active,
                    count[0])



def adam(fn, z0, lower, upper, robust="linear", scale=3.0, steps=200, lr=0.05, on_evaluation=None):
    """Adam in coordinates normalized by their magnitude, projected onto the bounds.

    Args: as :func:`least_squares`; ``steps`` gradient steps of size ``lr`` (normalized).

    Returns:
        Solution.
    """
    typical = torch.clamp(z0.abs(), min=1e-2)
    u = torch.zeros_like(z0, requires_grad=True)
    opt = torch.optim.Adam([u], lr=lr)
    low = torch.as_tensor(lower, dtype=z0.dtype, device=z0.device)
    high = torch.as_tensor(upper, dtype=z0.dtype, device=z0.device)
    huber = torch.nn.HuberLoss(reduction="sum", delta=scale)
    for _ in range(int(steps)):
        opt.zero_grad()
        r = fn(z0 + typical * u)
        loss = 0.5 * r.square().sum() if robust == "linear" else huber(r, torch.zeros_like(r))
        loss.backward()
        opt.step()
        with torch.no_grad():
            u.copy_(((z0 + typical * u).clamp(low, high) - z0) / typical)
        if on_evaluation is not None:
            on_evaluation(float(loss))
    z = (z0 + typical * u).detach()
    return Solution(z, True, f"Adam: {int(steps)} steps", _active(z.cpu().numpy(), lower, upper), int(steps))
