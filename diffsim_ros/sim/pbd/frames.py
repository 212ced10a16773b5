"""Joint geometry on particle states: world anchors and axes, joint coordinates and rates.

Shared by the force, constraint and joint-space mapping phases. Shapes: ``pos``/``quat``
(..., N, 3/4) for the N particles; per-joint results (..., n, ...).
"""

import math
from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import quat_conjugate, quat_multiply, quat_rotate

__all__ = [
    "quat_exp",
    "JointDirections",
    "rotate",
    "parent_rows",
    "child_rows",
    "parent_mats",
    "child_mats",
    "joint_directions",
    "joint_rates",
    "joint_coordinates",
    "wrap_angle",
    "relative_rotation",
]


def quat_exp(rotvec):
    """Unit quaternion of the rotation vector ``rotvec`` [rad], shape (..., 3) -> (..., 4).

    Exact (the PBD rotation update and the angular velocity read back with ``quat_log``
    must be inverse to each other, or every substep loses ~h^2 |w|^3 / 24 of angular
    speed); a Taylor branch keeps value and gradient finite at zero.
    """
    square = (rotvec * rotvec).sum(-1, keepdim=True)
    small = square < 1e-8
    safe = torch.where(small, torch.ones_like(square), square)
    angle = torch.sqrt(safe)
    cos_half = torch.where(small, 1.0 - square / 8.0 + square * square / 384.0, torch.cos(0.5 * angle))
    sinc_half = torch.where(small, 0.5 - square / 48.0 + square * square / 3840.0, torch.sin(0.5 * angle) / angle)
    return torch.cat([cos_half, sinc_half * rotvec], dim=-1)


def rotate(quat, vec):
    """Rotate constant or batched vectors (..., 3) by quaternions (..., 4) (broadcasting)."""
    shape = torch.broadcast_shapes(quat.shape[:-1], vec.shape[:-1])
    return quat_rotate(quat.expand(*shape, 4), vec.expand(*shape, 3))


def parent_rows(joints, x):
    """Rows of the parent particle of every joint, shape (..., N, k) -> (..., n, k)."""
    return x[..., joints.parent_index, :]


def child_rows(x):
    """Rows of the child particle of every joint (particles 1..N-1), (..., N, k) -> (..., n, k)."""
    return x[..., 1:, :]


def parent_mats(joints, mat):
    """Matrices of the parent particle of every joint, (..., N, a, b) -> (..., n, a, b)."""
    return mat[..., joints.parent_index, :, :]


def child_mats(mat):
    """Matrices of the child particle of every joint, (..., N, a, b) -> (..., n, a, b)."""
    return mat[..., 1:, :, :]


@dataclass(frozen=True)
class JointDirections:
    """Rows of the joint Jacobians of the two particles of every joint, world axes.

    The joint rate is ``lin . (v_c - v_p) + ang_child . w_c - ang_parent . w_p`` and a joint
    torque/force ``tau`` acts as the wrench ``(tau ang_child, tau lin)`` on the child and the
    opposite ``(-tau ang_parent, -tau lin)`` on the parent (torque about each COM).
    """

    lin: torch.Tensor
    """Linear direction [-], shape (..., n, 3) (zero for revolute joints)."""
    ang_child: torch.Tensor
    """Angular direction on the child [- or m], shape (..., n, 3)."""
    ang_parent: torch.Tensor
    """Angular direction on the parent [- or m], shape (..., n, 3)."""
    axis: torch.Tensor
    """Joint axis in the world (child's), shape (..., n, 3)."""


def joint_directions(joints, pos, quat):
    """Jacobian rows of every joint at the given particle poses.

    A prismatic joint's force acts at the child's anchor on both particles, so its pair of
    forces has no net moment.

    Args:
        joints: PBDJoints.
        pos: COM positions [m], shape (..., N, 3).
        quat: Orientations, shape (..., N, 4).

    Returns:
        JointDirections.
    """
    quat_c = child_rows(quat)
    axis = rotate(quat_c, joints.axis_child)
    if all(joints.revolute):
        return JointDirections(lin=torch.zeros_like(axis), ang_child=axis, ang_parent=axis, axis=axis)
    revolute = torch.tensor(joints.revolute, device=pos.device)[:, None]
    lever_c = rotate(quat_c, joints.anchor_child)
    lever_p = child_rows(pos) + lever_c - parent_rows(joints, pos)
    return JointDirections(
        lin=torch.where(revolute, torch.zeros_like(axis), axis),
        ang_child=torch.where(revolute, axis, torch.cross(lever_c, axis, dim=-1)),
        ang_parent=torch.where(revolute, axis, torch.cross(lever_p, axis, dim=-1)),
        axis=axis,
    )


def joint_rates(joints, directions, vel, omega):
    """Joint velocities [rad/s or m/s] from particle velocities, shape (..., n)."""
    rate = (directions.ang_child * child_rows(omega)).sum(-1) - (directions.ang_parent * parent_rows(joints, omega)).sum(-1)
    if all(joints.revolute):
        return rate
    return rate + (directions.lin * (child_rows(vel) - parent_rows(joints, vel))).sum(-1)


def wrap_angle(angle):
    """Angles wrapped to [-pi, pi] (gradient 1 everywhere)."""
    return angle - (2.0 * math.pi) * torch.round(angle / (2.0 * math.pi))


def relative_rotation(joints, quat):
    """Rotation of each child body relative to its joint frame at q = 0, shape (..., n, 4)."""
    zero_frame = quat_multiply(parent_rows(joints, quat), joints.rest_quat)
    return quat_multiply(quat_conjugate(zero_frame), child_rows(quat))


def joint_coordinates(joints, pos, quat, q_ref=None):
    """Joint positions from particle poses (paper Algorithm 2, robust over the full range).

    Revolute angles are the signed twist of the relative rotation about the joint axis,
    ``2 atan2(v . a, w)``, wrapped to [-pi, pi] (or, with ``q_ref``, to the branch nearest
    ``q_ref``, which keeps continuous joints continuous); no arcsin folding. Prismatic
    displacements are the anchor offset along the parent's joint axis.

    Args:
        joints: PBDJoints.
        pos: COM positions [m], shape (..., N, 3).
        quat: Orientations, shape (..., N, 4).
        q_ref: Optional reference joint positions, shape (..., n).

    Returns:
        Joint positions [rad or m], shape (..., n).
    """
    rel = relative_rotation(joints, quat)
    twist = 2.0 * torch.atan2((rel[..., 1:] * joints.axis_child).sum(-1), rel[..., 0])
    angle = wrap_angle(twist) if q_ref is None else q_ref + wrap_angle(twist - q_ref)
    if all(joints.revolute):
        return angle
    quat_p = parent_rows(joints, quat)
    anchor_c = child_rows(pos) + rotate(child_rows(quat), joints.anchor_child)
    anchor_p = parent_rows(joints, pos) + rotate(quat_p, joints.anchor_parent)
    slide = ((anchor_c - anchor_p) * rotate(quat_p, joints.axis_parent)).sum(-1)
    revolute = torch.tensor(joints.revolute, device=pos.device)
    return torch.where(revolute, angle, slide)
