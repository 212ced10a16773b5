"""NumPy companion of :mod:`~diffsim_ros.dynamics.spatial`: the same rotations, same names and
conventions (quaternions ``(w, x, y, z)``), for per-sample code outside autograd.

Why a companion: MuJoCo plants and references convert one pose per simulator step, where a
torch call costs more than the arithmetic. Everything differentiable uses the torch module;
``test_spatial_np.py`` holds the two to each other.
"""

import numpy as np

__all__ = ["so3_exp", "quat_exp", "quat_multiply", "quat_to_matrix"]

_SMALL_ANGLE_SQUARED = 1e-8  # as the torch module: below it, Taylor series exact to double precision


def _skew(v):
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    zero = np.zeros_like(x)
    return np.stack([np.stack([zero, -z, y], -1), np.stack([z, zero, -x], -1), np.stack([-y, x, zero], -1)], -2)


def so3_exp(rotvec):
    """Rotation matrix of a rotation vector (axis * angle) [rad], shape (..., 3) -> (..., 3, 3)."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    theta2 = (rotvec * rotvec).sum(-1)
    small = theta2 < _SMALL_ANGLE_SQUARED
    theta = np.sqrt(np.where(small, 1.0, theta2))
    a = np.where(small, 1.0 - theta2 / 6.0, np.sin(theta) / theta)
    b = np.where(small, 0.5 - theta2 / 24.0, (1.0 - np.cos(theta)) / theta**2)
    k = _skew(rotvec)
    return np.eye(3) + a[..., None, None] * k + b[..., None, None] * (k @ k)


def quat_exp(rotvec):
    """Unit quaternion (w, x, y, z) of a rotation vector [rad], shape (..., 3) -> (..., 4)."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    square = (rotvec * rotvec).sum(-1, keepdims=True)
    small = square < _SMALL_ANGLE_SQUARED
    angle = np.sqrt(np.where(small, 1.0, square))
    cos_half = np.where(small, 1.0 - square / 8.0, np.cos(0.5 * angle))
    sinc_half = np.where(small, 0.5 - square / 48.0, np.sin(0.5 * angle) / angle)
    return np.concatenate([cos_half, sinc_half * rotvec], -1)


def quat_multiply(a, b):
    """Hamilton product ``a * b`` of (w, x, y, z) quaternions, shape (..., 4)."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, dtype=np.float64), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, dtype=np.float64), -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        -1,
    )


def quat_to_matrix(q):
    """Rotation matrices of quaternions (normalized first), shape (..., 4) -> (..., 3, 3)."""
    q = np.asarray(q, dtype=np.float64)
    w, x, y, z = np.moveaxis(q / np.linalg.norm(q, axis=-1, keepdims=True), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )
