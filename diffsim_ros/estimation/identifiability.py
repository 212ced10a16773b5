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
"""

from dataclasses import dataclass, field

import numpy as np

from diffsim_ros.model.plausibility import parameter_kind

__all__ = [
    "CONDITION_LIMIT",
    "NULL_PARTICIPATION",
    "DeterminationPolicy",
    "covariance",
    "data_hint",
    "imprecise",
    "pinned_coordinates",
    "rank_flags",
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
