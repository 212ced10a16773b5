"""Small rotation, quaternion and spatial-vector helpers (torch, batched, differentiable); a NumPy
companion with the same names for per-sample code is :mod:`~diffsim_ros.dynamics.spatial_np`.

Quaternions are ``(w, x, y, z)`` (scalar first, as MuJoCo); ROS messages use ``(x, y, z, w)``
and are converted at the I/O boundary. Spatial vectors are 3-vector pairs, angular first.
"""

import torch

__all__ = [
    "skew",
    "axis_angle_to_matrix",
    "so3_exp",
    "matvec",
    "quat_multiply",
    "quat_conjugate",
    "quat_to_matrix",
    "matrix_to_quat",
    "quat_normalize",
    "quat_exp",
    "quat_log",
]


def skew(v):
    """Cross-product matrix ``[v]x`` with ``[v]x w = v x w``, shape (..., 3) -> (..., 3, 3)."""
    x, y, z = v.unbind(-1)
    zero = torch.zeros_like(x)
    return torch.stack(
        [torch.stack([zero, -z, y], -1), torch.stack([z, zero, -x], -1), torch.stack([-y, x, zero], -1)],
        dim=-2,
    )


def axis_angle_to_matrix(axis, angle):
    """Rodrigues' rotation about unit ``axis`` by ``angle``.

    Args:
        axis: Unit axes, shape (..., 3).
        angle: Angles [rad], shape (...) broadcastable with ``axis[..., 0]``.

    Returns:
        Rotation matrices, shape (..., 3, 3).
    """
    k = skew(axis)
    eye = torch.eye(3, dtype=k.dtype, device=k.device)
    s = torch.sin(angle)[..., None, None]
    c = (1.0 - torch.cos(angle))[..., None, None]
    return eye + s * k + c * (k @ k)


def so3_exp(rotvec):
    """Rotation matrix of a rotation vector (axis * angle), exact derivatives at zero too.

    ``R = I + A [w]x + B [w]x^2`` with ``A = sin t / t`` and ``B = (1 - cos t) / t^2``; Taylor
    series below a small angle keep values and gradients finite and exact at ``w = 0``.

    Args:
        rotvec: Rotation vectors [rad], shape (..., 3).

    Returns:
        Rotation matrices, shape (..., 3, 3).
    """
    theta2 = (rotvec * rotvec).sum(-1)
    small = theta2 < 1e-8
    safe2 = torch.where(small, torch.ones_like(theta2), theta2)
    theta = torch.sqrt(safe2)
    a = torch.where(small, 1.0 - theta2 / 6.0, torch.sin(theta) / theta)
    b = torch.where(small, 0.5 - theta2 / 24.0, (1.0 - torch.cos(theta)) / safe2)
    k = skew(rotvec)
    eye = torch.eye(3, dtype=rotvec.dtype, device=rotvec.device)
    return eye + a[..., None, None] * k + b[..., None, None] * (k @ k)


def matvec(mat, vec):
    """Batched matrix-vector product, shapes (..., a, b) x (..., b) -> (..., a)."""
    return (mat @ vec.unsqueeze(-1)).squeeze(-1)


_SMALL_ANGLE_SQUARED = 1e-8  # below it, Taylor series (exact to double precision) replace sin/cos ratios


def quat_exp(rotvec):
    """Unit quaternion (w, x, y, z) of the rotation vector ``rotvec`` [rad], (..., 3) -> (..., 4).

    Exact, so that a rotation update and the angular velocity read back from it are inverse
    to each other; a Taylor branch keeps value and gradient finite at zero.
    """
    square = (rotvec * rotvec).sum(-1, keepdim=True)
    small = square < _SMALL_ANGLE_SQUARED
    angle = torch.sqrt(torch.where(small, torch.ones_like(square), square))
    cos_half = torch.where(small, 1.0 - square / 8.0, torch.cos(0.5 * angle))
    sinc_half = torch.where(small, 0.5 - square / 48.0, torch.sin(0.5 * angle) / angle)
    return torch.cat([cos_half, sinc_half * rotvec], dim=-1)


def quat_multiply(a, b):
    """Hamilton product ``a * b`` of (w, x, y, z) quaternions, shape (..., 4)."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def quat_conjugate(q):
    """Conjugate (inverse for unit quaternions), shape (..., 4)."""
    return q * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=q.dtype, device=q.device)



def quat_normalize(q):
    """Unit quaternions, shape (..., 4)."""
    return q / torch.linalg.vector_norm(q, dim=-1, keepdim=True)


def quat_to_matrix(q):
    """Rotation matrices of unit quaternions, shape (..., 4) -> (..., 3, 3)."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        dim=-2,
    )


def matrix_to_quat(r):
    """Unit quaternions (w >= 0) of rotation matrices, shape (..., 3, 3) -> (..., 4).

    Uses the numerically best of the four Shepperd branches per element, so it is accurate
    and differentiable for every rotation.
    """
    m00, m11, m22 = r[..., 0, 0], r[..., 1, 1], r[..., 2, 2]
    candidates = torch.stack(
        [
            torch.stack([1 + m00 + m11 + m22, r[..., 2, 1] - r[..., 1, 2], r[..., 0, 2] - r[..., 2, 0], r[..., 1, 0] - r[..., 0, 1]], -1),
            torch.stack([r[..., 2, 1] - r[..., 1, 2], 1 + m00 - m11 - m22, r[..., 0, 1] + r[..., 1, 0], r[..., 0, 2] + r[..., 2, 0]], -1),
            torch.stack([r[..., 0, 2] - r[..., 2, 0], r[..., 0, 1] + r[..., 1, 0], 1 - m00 + m11 - m22, r[..., 1, 2] + r[..., 2, 1]], -1),
            torch.stack([r[..., 1, 0] - r[..., 0, 1], r[..., 0, 2] + r[..., 2, 0], r[..., 1, 2] + r[..., 2, 1], 1 - m00 - m11 + m22], -1),
        ],
        dim=-2,
    )
    diag = torch.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    best = diag.argmax(-1, keepdim=True)
    chosen = torch.gather(candidates, -2, best[..., None].expand(*best.shape[:-1], 1, 4)).squeeze(-2)
    scale = 0.5 / torch.sqrt(torch.gather(diag, -1, best).clamp_min(torch.finfo(r.dtype).tiny))
    q = chosen * scale
    return torch.where(q[..., :1] < 0, -q, q)



def quat_log(q):
    """Rotation vector (axis * angle, angle in [0, pi]) of unit quaternions, (..., 4) -> (..., 3).

    The sign of ``q`` is normalized first (q and -q are the same rotation).
    """
    q = torch.where(q[..., :1] < 0, -q, q)
    w = q[..., 0].clamp(-1.0, 1.0)
    v = q[..., 1:]
    s = torch.linalg.vector_norm(v, dim=-1)
    angle = 2.0 * torch.atan2(s, w)
    # angle / s -> 2 / w as s -> 0; the branch keeps the value and gradient finite at identity.
    small = s < 1e-8
    safe_s = torch.where(small, torch.ones_like(s), s)
    ratio = torch.where(small, 2.0 / w.clamp_min(1e-12), angle / safe_s)
    return v * ratio[..., None]
