"""Rigid-body inertia algebra and the physically consistent log-Cholesky parametrization.

Inertia tensors are stored as 6-vectors ``[ixx, ixy, ixz, iyy, iyz, izz]`` (URDF order),
expressed about the centre of mass in the body frame, in kg·m².

The log-Cholesky parametrization (Rucker & Wensing, "Smooth Parameterization of Rigid-Body
Inertia", RA-L 2022) maps any ``theta`` in R^10 to a positive-definite pseudo-inertia
matrix, i.e. to a mass, COM and inertia that some positive mass density can realize. An
optimizer working on ``theta`` therefore cannot produce negative masses or inertias that
violate the triangle inequality.
"""

import numpy as np
import torch

__all__ = [
    "inertia_from_vector",
    "inertia_to_vector",
    "combine_inertials",
    "pseudo_inertia",
    "inertial_from_pseudo_inertia",
    "log_cholesky_from_inertial",
    "inertial_from_log_cholesky",
    "is_physically_consistent",
]

_SIX = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))


def inertia_from_vector(vec):
    """Symmetric inertia matrix from ``[ixx, ixy, ixz, iyy, iyz, izz]``.

    Args:
        vec: Inertia 6-vector [kg·m²], shape (..., 6), torch tensor or numpy array.

    Returns:
        Inertia matrix [kg·m²], shape (..., 3, 3), same type as ``vec``.
    """
    ixx, ixy, ixz, iyy, iyz, izz = (vec[..., k] for k in range(6))
    rows = [[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]]
    if isinstance(vec, torch.Tensor):
        return torch.stack([torch.stack(r, dim=-1) for r in rows], dim=-2)
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


def inertia_to_vector(mat):
    """Inverse of :func:`inertia_from_vector`: shape (..., 3, 3) -> (..., 6)."""
    parts = [mat[..., i, j] for i, j in _SIX]
    if isinstance(mat, torch.Tensor):
        return torch.stack(parts, dim=-1)
    return np.stack(parts, axis=-1)


def combine_inertials(masses, coms, inertias):
    """Combine rigidly attached inertials expressed in one common frame (numpy).

    Args:
        masses: Masses [kg], shape (k,).
        coms: Centres of mass [m], shape (k, 3), in the common frame.
        inertias: Inertia matrices about each COM [kg·m²], shape (k, 3, 3), common axes.

    Returns:
        ``(mass, com, inertia)`` of the union: mass [kg] float, com [m] shape (3,),
        inertia about the combined COM [kg·m²] shape (3, 3). A massless union returns a
        zero mass, a zero COM and a zero inertia.
    """
    masses = np.asarray(masses, dtype=float)
    total = float(masses.sum())
    if total <= 0.0:
        return 0.0, np.zeros(3), np.zeros((3, 3))
    coms = np.asarray(coms, dtype=float).reshape(-1, 3)
    com = (masses[:, None] * coms).sum(0) / total
    inertia = np.zeros((3, 3))
    for m, c, i_c in zip(masses, coms, inertias):
        d = c - com
        inertia += i_c + m * (d @ d * np.eye(3) - np.outer(d, d))
    return total, com, 0.5 * (inertia + inertia.T)


def pseudo_inertia(mass, com, inertia):
    """Pseudo-inertia matrix ``J = [[Sigma, h], [h^T, m]]`` (torch).

    ``Sigma = 0.5 tr(I_o) 1 - I_o`` is the second moment of the mass distribution about the
    body origin, ``h = m c``. J is positive definite iff the inertial is physically consistent.

    Args:
        mass: Mass [kg], shape (...,).
        com: Centre of mass in the body frame [m], shape (..., 3).
        inertia: Inertia about the COM, body axes [kg·m²], shape (..., 6).

    Returns:
        Pseudo-inertia, shape (..., 4, 4).
    """
    i_c = inertia_from_vector(inertia)
    eye = torch.eye(3, dtype=i_c.dtype, device=i_c.device)
    cc = (com * com).sum(-1)[..., None, None] * eye - com[..., :, None] * com[..., None, :]
    i_o = i_c + mass[..., None, None] * cc
    trace = i_o.diagonal(dim1=-2, dim2=-1).sum(-1)
    sigma = 0.5 * trace[..., None, None] * eye - i_o
    h = mass[..., None] * com
    top = torch.cat([sigma, h[..., :, None]], dim=-1)
    bottom = torch.cat([h, mass[..., None]], dim=-1)[..., None, :]
    return torch.cat([top, bottom], dim=-2)


def inertial_from_pseudo_inertia(pseudo):
    """Inverse of :func:`pseudo_inertia`: shape (..., 4, 4) -> ``(mass, com, inertia6)``."""
    mass = pseudo[..., 3, 3]
    h = pseudo[..., :3, 3]
    sigma = pseudo[..., :3, :3]
    eye = torch.eye(3, dtype=pseudo.dtype, device=pseudo.device)
    i_o = sigma.diagonal(dim1=-2, dim2=-1).sum(-1)[..., None, None] * eye - sigma
    com = h / mass[..., None]
    cc = (com * com).sum(-1)[..., None, None] * eye - com[..., :, None] * com[..., None, :]
    i_c = i_o - mass[..., None, None] * cc
    return mass, com, inertia_to_vector(i_c)


def _log_cholesky_factor(theta):
    """Upper-triangular U(theta) with J = U U^T, shape (..., 10) -> (..., 4, 4)."""
    alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3 = (theta[..., k] for k in range(10))
    zero = torch.zeros_like(alpha)
    one = torch.ones_like(alpha)
    rows = [
        [torch.exp(d1), s12, s13, t1],
        [zero, torch.exp(d2), s23, t2],
        [zero, zero, torch.exp(d3), t3],
        [zero, zero, zero, one],
    ]
    u = torch.stack([torch.stack(r, dim=-1) for r in rows], dim=-2)
    return torch.exp(alpha)[..., None, None] * u


def inertial_from_log_cholesky(theta):
    """Physically consistent inertial from log-Cholesky parameters (differentiable).

    Args:
        theta: ``[alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3]``, shape (..., 10), any real
            values.

    Returns:
        ``(mass, com, inertia)``: mass [kg] shape (...,), COM [m] shape (..., 3), inertia
        about the COM [kg·m²] shape (..., 6). Always physically consistent.
    """
    u = _log_cholesky_factor(theta)
    return inertial_from_pseudo_inertia(u @ u.transpose(-1, -2))


def log_cholesky_from_inertial(mass, com, inertia):
    """Log-Cholesky parameters of a physically consistent inertial.

    Args:
        mass: Mass [kg], shape (...,).
        com: COM [m], shape (..., 3).
        inertia: Inertia about the COM [kg·m²], shape (..., 6).

    Returns:
        theta, shape (..., 10), with ``inertial_from_log_cholesky(theta)`` reproducing the input.

    Raises:
        ValueError: If the inertial is not physically consistent (pseudo-inertia not positive
            definite), naming the smallest eigenvalue.
    """
    pseudo = pseudo_inertia(mass, com, inertia)
    # J = U U^T with U upper triangular: Cholesky of the index-reversed matrix.
    flip = torch.flip(pseudo, dims=(-2, -1))
    lower, info = torch.linalg.cholesky_ex(flip)
    if bool((info != 0).any()):
        smallest = torch.linalg.eigvalsh(pseudo).min().item()
        raise ValueError(
            "inertial is not physically consistent (pseudo-inertia smallest eigenvalue "
            f"{smallest:.3e} <= 0): mass must be positive and the inertia must satisfy the "
            "triangle inequality about the COM"
        )
    u = torch.flip(lower, dims=(-2, -1))
    scale = u[..., 3, 3]
    un = u / scale[..., None, None]
    return torch.stack(
        [
            torch.log(scale),
            torch.log(un[..., 0, 0]),
            torch.log(un[..., 1, 1]),
            torch.log(un[..., 2, 2]),
            un[..., 0, 1],
            un[..., 1, 2],
            un[..., 0, 2],
            un[..., 0, 3],
            un[..., 1, 3],
            un[..., 2, 3],
        ],
        dim=-1,
    )


def is_physically_consistent(mass, inertia, tol=0.0):
    """Whether mass > 0 and the principal moments are positive and satisfy the triangle inequality.

    Args:
        mass: Mass [kg], float.
        inertia: Inertia about the COM [kg·m²], numpy array shape (3, 3).
        tol: Relative slack on the triangle inequality.

    Returns:
        bool.
    """
    if not mass > 0.0:
        return False
    moments = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
    if moments.min() <= 0.0:
        return False
    a, b, c = moments
    slack = tol * moments.sum()
    return a + b >= c - slack and a + c >= b - slack and b + c >= a - slack
