"""Contact frames, rigid poses and the quaternion exponential (torch, batched, differentiable)."""

import torch

from diffsim_ros.dynamics.spatial import matvec, quat_exp, quat_multiply, quat_normalize

__all__ = ["contact_frames", "safe_norm", "safe_normalize", "integrate_orientation", "transform_points"]

# Below this norm a direction is treated as undefined (degenerate geometry).
DEGENERATE_NORM = 1e-12


def safe_norm(vec, keepdim=False):
    """Euclidean norm over the last dimension with a finite gradient at zero, shape (...).

    ``torch.linalg.vector_norm`` has a NaN gradient at the zero vector, which poisons masked
    branches (NaN * 0 = NaN); below DEGENERATE_NORM this returns DEGENERATE_NORM, gradient 0.
    """
    return torch.sqrt((vec * vec).sum(-1, keepdim=keepdim).clamp_min(DEGENERATE_NORM**2))


def safe_normalize(vec, fallback):
    """Unit vectors with a fallback where the norm vanishes.

    Args:
        vec: Vectors, shape (..., 3).
        fallback: Unit vectors used where ``|vec|`` < DEGENERATE_NORM, broadcastable to ``vec``.

    Returns:
        ``(unit, degenerate)``: unit vectors (..., 3) and a bool mask (...) of fallback entries.
        Gradients stay finite (the norm is clamped before dividing).
    """
    norm = safe_norm(vec, keepdim=True)
    degenerate = norm[..., 0] <= DEGENERATE_NORM
    unit = vec / norm
    return torch.where(degenerate[..., None], fallback.expand_as(vec), unit), degenerate


def contact_frames(normal):
    """Orthonormal contact frames ``[n; t1; t2]`` (rows) from unit normals.

    The tangents are world-anchored (t2 = n x x_world unless n is near x_world), so a plane
    with normal +z gets t1 = +x, t2 = +y: the pyramid baseline's facets are then fixed in the
    world, which is what makes its friction anisotropic.

    Args:
        normal: Unit normals, shape (..., 3).

    Returns:
        Rotation-like matrices, shape (..., 3, 3), rows n, t1, t2 (right-handed: t1 x t2 = n).
    """
    ex = torch.zeros_like(normal)
    ex[..., 0] = 1.0
    ey = torch.zeros_like(normal)
    ey[..., 1] = 1.0
    anchor = torch.where((normal[..., :1].abs() > 0.9), ey, ex)
    t2 = torch.cross(normal, anchor, dim=-1)
    t2 = t2 / torch.linalg.vector_norm(t2, dim=-1, keepdim=True)
    t1 = torch.cross(t2, normal, dim=-1)
    return torch.stack([normal, t1, t2], dim=-2)



def integrate_orientation(quat, rotvec):
    """Orientation after a world-frame rotation ``rotvec`` [rad]: ``exp(rotvec) * quat``, renormalized."""
    return quat_normalize(quat_multiply(quat_exp(rotvec), quat))


def transform_points(rot, pos, points):
    """World coordinates of body-frame points: ``rot @ p + pos``; rot (..., 3, 3), pos (..., 3), points (..., k, 3)."""
    return matvec(rot[..., None, :, :], points) + pos[..., None, :]
