"""Joint geometry on particle poses: world levers and axes, joint coordinates and rates.

Shared by the force, constraint and joint-space mapping phases. Every joint stores its
body-frame vectors as the columns of a 3x3 matrix ``[lever, axis, reference]`` per side,
so one matrix product per side gives all of them in the world. Shapes: ``pos`` (..., N, 3)
and ``rot`` (..., N, 3, 3) for the N particles; per-joint results (..., n, ...).
"""

import math
from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import quat_to_matrix

__all__ = [
    "parent_rows",
    "child_rows",
    "parent_mats",
    "child_mats",
    "JointFrames",
    "joint_frames",
    "JointDirections",
    "joint_directions",
    "joint_rates",
    "frame_coordinates",
    "joint_coordinates",
    "quat_mul",
    "wrap_angle",
]


def quat_mul(a, b):
    """Hamilton product of (w, x, y, z) quaternions in vector form, (..., 4).

    Kept apart from :func:`~diffsim_ros.dynamics.spatial.quat_multiply` (component form, the
    same product): the compiled kernel (rotation matrices) is held to this torch reference at
    1e-9 through rollouts that amplify rounding, and the component form moved that difference
    to 1.1e-9 in one CI run.
    """
    wa, va, wb, vb = a[..., :1], a[..., 1:], b[..., :1], b[..., 1:]
    return torch.cat(
        [wa * wb - (va * vb).sum(-1, keepdim=True), wa * vb + wb * va + torch.cross(va, vb, dim=-1)], dim=-1
    )


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
class JointFrames:
    """World geometry of every joint at some particle poses (n joints)."""

    pos_p: torch.Tensor
    """Parent COM [m], (..., n, 3)."""
    pos_c: torch.Tensor
    """Child COM [m], (..., n, 3)."""
    rot_p: torch.Tensor
    """Parent orientation, (..., n, 3, 3)."""
    rot_c: torch.Tensor
    """Child orientation, (..., n, 3, 3)."""
    vec_p: torch.Tensor
    """Parent ``[lever to the joint anchor, axis, reference]`` in the world, (..., n, 3, 3)."""
    vec_c: torch.Tensor
    """Child ``[lever to the joint origin, axis, reference]`` in the world, (..., n, 3, 3)."""

    lever_p = property(lambda self: self.vec_p[..., 0], doc="Parent lever to the joint anchor [m], (..., n, 3).")
    lever_c = property(lambda self: self.vec_c[..., 0], doc="Child lever to the joint origin [m], (..., n, 3).")
    axis_p = property(lambda self: self.vec_p[..., 1], doc="Joint axis on the parent, world (..., n, 3).")
    axis_c = property(lambda self: self.vec_c[..., 1], doc="Joint axis on the child, world (..., n, 3).")

    def anchor_error(self):
        """Child anchor minus parent anchor [m], (..., n, 3)."""
        return self.pos_c + self.lever_c - self.pos_p - self.lever_p


def joint_frames(joints, pos, rot):
    """World geometry of every joint at particle poses ``pos`` (..., N, 3), ``rot`` (..., N, 3, 3)."""
    rot_p, rot_c = parent_mats(joints, rot), child_mats(rot)
    return JointFrames(
        pos_p=parent_rows(joints, pos),
        pos_c=child_rows(pos),
        rot_p=rot_p,
        rot_c=rot_c,
        vec_p=rot_p @ joints.local_parent,
        vec_c=rot_c @ joints.local_child,
    )


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


def joint_directions(joints, frames):
    """Jacobian rows of every joint from its :class:`JointFrames`.

    A prismatic joint's force acts at the child's anchor on both particles, so the pair of
    forces has no net moment.
    """
    axis = frames.axis_c
    if joints.all_revolute:
        return JointDirections(lin=torch.zeros_like(axis), ang_child=axis, ang_parent=axis)
    revolute = joints.revolute_mask[:, None]
    lever_p = frames.pos_c + frames.lever_c - frames.pos_p
    return JointDirections(
        lin=torch.where(revolute, torch.zeros_like(axis), axis),
        ang_child=torch.where(revolute, axis, torch.cross(frames.lever_c, axis, dim=-1)),
        ang_parent=torch.where(revolute, axis, torch.cross(lever_p, axis, dim=-1)),
    )


def joint_rates(joints, directions, vel, omega):
    """Joint velocities [rad/s or m/s] from particle velocities, shape (..., n)."""
    rate = (directions.ang_child * child_rows(omega)).sum(-1) - (directions.ang_parent * parent_rows(joints, omega)).sum(-1)
    if joints.all_revolute:
        return rate
    return rate + (directions.lin * (child_rows(vel) - parent_rows(joints, vel))).sum(-1)


def wrap_angle(angle):
    """Angles wrapped to [-pi, pi] (gradient 1 everywhere)."""
    return angle - (2.0 * math.pi) * torch.round(angle / (2.0 * math.pi))


def frame_coordinates(joints, frames, q_ref=None):
    """Joint positions from :class:`JointFrames` (paper Algorithm 2, robust over the full range).

    Revolute angles are the signed angle between the parent's and the child's reference
    vectors (perpendicular to the axis), ``atan2(a . (u_p x u_c), u_p . u_c)``, in
    [-pi, pi] or, with ``q_ref``, on the branch nearest ``q_ref`` (continuous joints stay
    continuous); no arcsin folding. Prismatic displacements are the anchor offset along the
    parent's axis.

    Returns:
        Joint positions [rad or m], shape (..., n).
    """
    ref_p, ref_c = frames.vec_p[..., 2], frames.vec_c[..., 2]
    sine = (frames.axis_c * torch.cross(ref_p, ref_c, dim=-1)).sum(-1)
    angle = torch.atan2(sine, (ref_p * ref_c).sum(-1))
    if q_ref is not None:
        angle = q_ref + wrap_angle(angle - q_ref)
    if joints.all_revolute:
        return angle
    slide = (frames.axis_p * frames.anchor_error()).sum(-1)
    return torch.where(joints.revolute_mask, angle, slide)


def joint_coordinates(joints, pos, quat, q_ref=None):
    """Joint positions [rad or m] of particle poses ``pos`` (..., N, 3), ``quat`` (..., N, 4)."""
    return frame_coordinates(joints, joint_frames(joints, pos, quat_to_matrix(quat)), q_ref)
