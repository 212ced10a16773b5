"""What motion determines of the link inertials: the base parameters (Gautier 1990).

Joint torques are linear in every link's ten inertial parameters (:mod:`~diffsim_ros.dynamics.regressor`),
and a serial arm's regressor has dependent columns whatever the motion: a link's mass moves the
torques only together with its neighbours' first moments, the first link's inertia only about
its axis, and so on. The data therefore determine combinations of the inertials, not each
link's. Which ones is read from the fit's own Jacobian at the solution, in the inertial
parameters (pi, :data:`~diffsim_ros.dynamics.regressor.INERTIAL_PARAMETERS` order) with the
other fitted parameters (damping, friction, armature, payload, ...) projected out: a QR
decomposition with column pivoting picks independent columns, the base set, and writes each
dependent column in terms of them, as Pinocchio's and mujoco-sysid's identification tools do.
Each base parameter is ``pi_b + sum_d c_d pi_d``; its standard deviation comes from the same
sandwich covariance as every other estimate (:func:`~diffsim_ros.estimation.identifiability.serial_covariance`).
"""

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch

from diffsim_ros.dynamics.regressor import INERTIAL_PARAMETERS, link_parameters
from diffsim_ros.estimation.identifiability import CONDITION_LIMIT, serial_covariance
from diffsim_ros.estimation.solvers import forward_jacobian
from diffsim_ros.model.inertia import inertial_from_log_cholesky

__all__ = ["INDIVIDUAL_PARTICIPATION", "BaseParameters", "base_parameters", "expression", "inertial_parameter_names",
           "linear_parameter_report"]

INDIVIDUAL_PARTICIPATION = 1e-3
"""An inertial parameter whose unit vector has less than this weight in the data's null space
is determined on its own (structural dependencies are exact: their weight is of order one)."""
COEFFICIENT_FLOOR = 1e-9
"""Coefficients of a base parameter smaller than this, relative to its largest, are rounding."""


@dataclass(frozen=True)
class BaseParameters:
    """The combinations of link inertials that the data determine.

    Attributes:
        names: Every inertial parameter considered, ``<link>.<m|mcx|...|izz>`` (10 per link).
        terms: Per base parameter, ``((coefficient, name), ...)``, its leading term first
            (coefficient 1): the base parameter is ``sum coefficient * value(name)``.
        values: Base parameter values at the estimate, SI units of their leading term, (B,).
        std: Their standard deviations, (B,).
        individual: Names determined on their own (each also a base parameter of one term).
        no_effect: Names with no effect on the data at all.
    """

    names: tuple
    terms: tuple
    values: np.ndarray
    std: np.ndarray
    individual: frozenset
    no_effect: frozenset

    @property
    def count(self):
        """Number of base parameters."""
        return len(self.terms)

    def expression(self, index, limit=6):
        """:func:`expression` of base parameter ``index``."""
        return expression(self.terms[index], limit)

    def records(self):
        """YAML-friendly list: one ``{expression, value, std, terms}`` per base parameter."""
        return [{"expression": self.expression(i, limit=len(t)), "value": float(self.values[i]), "std": float(self.std[i]),
                 "terms": [[float(c), n] for c, n in t]} for i, t in enumerate(self.terms)]


def expression(terms, limit=6):
    """``"panda_link3.mcy + 0.0833 panda_link4.m + ..."``: a base parameter's ``((coefficient, name), ...)``,
    its first ``limit`` terms."""
    text = terms[0][1]
    for coefficient, name in terms[1:limit]:
        size = "" if abs(abs(coefficient) - 1.0) < 1e-9 else f"{abs(coefficient):.4g} "
        text += f" {'-' if coefficient < 0 else '+'} {size}{name}"
    return text + (f" + ... ({len(terms) - limit} more)" if len(terms) > limit else "")


def inertial_parameter_names(links):
    """``<link>.<parameter>`` for every link and :data:`INERTIAL_PARAMETERS` entry, link by link."""
    return tuple(f"{link}.{key}" for link in links for key in INERTIAL_PARAMETERS)


def _to_inertial(jac, thetas):
    """Jacobian columns in log-Cholesky coordinates (R, 10 L) -> in inertial parameters, and pi (10 L,)."""
    blocks, values = [], []
    for theta in thetas:
        theta = torch.as_tensor(theta, dtype=torch.float64)
        value, d_pi = forward_jacobian(lambda t: link_parameters(*inertial_from_log_cholesky(t)), theta)
        blocks.append(np.linalg.inv(d_pi.numpy()))
        values.append(value.numpy())
    return jac @ scipy.linalg.block_diag(*blocks), np.concatenate(values)


def _without(jac, other):
    """``jac`` with the span of the columns ``other`` (R, Q) projected out."""
    norms = np.linalg.norm(other, axis=0)
    other = other[:, norms > 0] / norms[norms > 0]
    if other.shape[1] == 0:
        return jac
    basis, sing, _ = np.linalg.svd(other, full_matrices=False)
    basis = basis[:, sing > sing[0] / CONDITION_LIMIT]
    return jac - basis @ (basis.T @ jac)


def _individual(scaled):
    """Columns of ``scaled`` (normalized) outside every null direction of the data."""
    _, sing, vt = np.linalg.svd(scaled, full_matrices=False)
    weak = sing < sing[0] / CONDITION_LIMIT
    participation = np.sqrt((vt[weak] ** 2).sum(0)) if weak.any() else np.zeros(scaled.shape[1])
    return participation < INDIVIDUAL_PARTICIPATION


def base_parameters(jac, inertial_columns, thetas, links, direct, psi, variance, serial):
    """Base parameters of the links' inertials (and other linear parameters) from a fit's Jacobian.

    Args:
        jac: Normalized residual Jacobian of the data rows over the free coordinates, numpy (R, P).
        inertial_columns: Per link, the indices of its 10 log-Cholesky coordinates in ``jac``.
        thetas: Per link, its log-Cholesky coordinates at the solution, (10,) each.
        links: Link names, one per entry of ``inertial_columns``.
        direct: ``[(column, name, value)]`` of coordinates that are linear parameters themselves
            and may be confounded with the inertials (a joint's armature with its link's inertia
            about the axis); the other columns of ``jac`` are projected out.
        psi, variance, serial: As :func:`~diffsim_ros.estimation.identifiability.serial_covariance`
            (``psi`` of the data rows).

    Returns:
        :class:`BaseParameters`.
    """
    columns = np.concatenate(inertial_columns)
    linear = [c for c, _, _ in direct]
    others = np.setdiff1d(np.arange(jac.shape[1]), np.concatenate([columns, linear]).astype(int))
    j_pi, pi = _to_inertial(jac[:, columns], thetas)
    j_pi = _without(np.concatenate([j_pi, jac[:, linear]], 1), jac[:, others])
    pi = np.concatenate([pi, [float(v) for _, _, v in direct]])
    names = inertial_parameter_names(links) + tuple(n for _, n, _ in direct)
    norms = np.linalg.norm(j_pi, axis=0)
    effective = norms > norms.max() / CONDITION_LIMIT if norms.max() > 0 else np.zeros(len(names), dtype=bool)
    index = np.flatnonzero(effective)
    scaled = j_pi[:, index] / norms[index]
    _, r, pivots = scipy.linalg.qr(scaled, mode="economic", pivoting=True)
    rank = int((np.abs(np.diag(r)) > abs(r[0, 0]) / CONDITION_LIMIT).sum()) if index.size else 0
    base, dependent = pivots[:rank], pivots[rank:]
    mix = scipy.linalg.solve_triangular(r[:rank, :rank], r[:rank, rank:]) if rank else np.zeros((0, dependent.size))
    terms, rows = [], np.zeros((rank, len(names)))
    for i, b in enumerate(base):  # beta_i = pi_b + sum_d mix[i, d] s_d / s_b pi_d, in the physical units of pi_b
        coefficients = mix[i] * norms[index[dependent]] / norms[index[b]]
        keep = np.abs(coefficients) > COEFFICIENT_FLOOR * max(1.0, np.abs(coefficients).max(initial=0.0))
        rows[i, index[b]] = 1.0
        rows[i, index[dependent[keep]]] = coefficients[keep]
        order = np.argsort(-np.abs(coefficients[keep]))
        terms.append(((1.0, names[index[b]]),) + tuple((float(coefficients[keep][k]), names[index[dependent[keep]][k]]) for k in order))
    cov = serial_covariance(j_pi[:, index[base]], psi, variance, serial) if rank else np.zeros((0, 0))
    individual = {names[i] for i, ok in zip(index, _individual(scaled)) if ok} if index.size else set()
    return BaseParameters(names, tuple(terms), rows @ pi, np.sqrt(np.clip(np.diag(cov), 0.0, None)),
                          frozenset(individual), frozenset(n for n, e in zip(names, effective) if not e))


_NAMED = {"mass": ("m",), "com": ("m", "mcx", "mcy", "mcz"), "inertia": INERTIAL_PARAMETERS}
"""A link's named parameter -> the inertial parameters it is computed from (com = h / m, ...)."""
_IN_COMBINATION = ("determined only in combination with other inertial parameters (base parameters, listed in "
                   "calibration.yaml under base_parameters); kept at the values nearest the URDF's that reproduce them")
_NO_EFFECT = "no effect on these data; kept at its URDF value"


def _verdicts(base, coordinate_names):
    """Named parameter -> why it is not determined on its own, for the linear parameters analysed."""
    out = {}
    for name in coordinate_names:
        link, _, key = name.rpartition(".")
        parts = [f"{link}.{k}" for k in _NAMED[key]] if key in _NAMED else [name]
        if all(p in base.individual for p in parts):
            continue
        out[name] = _NO_EFFECT if all(p in base.no_effect for p in parts) else _IN_COMBINATION
    return out


def linear_parameter_report(space, free, jac, x, psi, variance, serial):
    """Base parameters of a fit whose link inertials (and armatures) a prior holds, and which of
    their named parameters the data do not determine on their own.

    Args:
        space: The fit's :class:`~diffsim_ros.estimation.parameters.ParameterSpace`.
        free: Its free coordinates, bool (P_all,).
        jac: Normalized Jacobian of the data rows over the free coordinates, (R, P).
        x: All coordinates at the solution, numpy (P_all,).
        psi, variance, serial: As :func:`base_parameters`.

    Returns:
        ``(BaseParameters, {name: reason})``.
    """
    position = np.cumsum(free) - 1  # coordinate -> its column among the free ones
    inertial, thetas, links, direct, named, start = [], [], [], [], [], 0
    for block in space.blocks:
        span = slice(start, start + block.size)
        start += block.size
        if not free[span].all():
            continue
        if block.kind == "log_cholesky":
            inertial.append(position[span])
            thetas.append(x[span])
            links.append(block.names[0].rsplit(".", 1)[0])
            named += list(block.names)
        elif block.kind == "direct" and block.names[0].endswith(".armature"):
            direct.append((int(position[span][0]), block.names[0], float(x[span][0])))
            named.append(block.names[0])
    if not inertial:
        return None, {}
    base = base_parameters(jac, inertial, thetas, links, direct, psi, variance, serial)
    return base, _verdicts(base, named)
