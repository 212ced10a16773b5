"""Joint constraint blocks (XPBD): positional, angular and damping/limit rows of every joint.

Each joint couples its parent (p) and child (c) particle with six rows, written for the
generalized displacement ``(dx, dtheta)`` of each particle (world axes):

* positional rows (paper Eq. 1-9): ``C_pos = (x_c + r_c) - (x_p + r_p)`` (joint anchors
  coincide; for a prismatic joint only across its axis);
* angular rows (paper Eq. 11-17): revolute joints keep their axes aligned,
  ``C_ang = a_p x a_c``; prismatic joints keep the rest orientation;
* the free direction ``d`` of the joint (``[0, a]`` revolute, ``[a, 0]`` prismatic) is not
  rigid: it carries the joint's viscous damping (plus the slope of the smoothed Coulomb
  friction) as an XPBD dashpot, ``C_d`` = joint displacement since the substep start,
  compliance ``1 / (h b)``. Solving it together with the rigid rows makes the damping
  implicit in the same projection that moves the joint, which keeps stiffly damped light
  links (Baxter's wrist) accurate. A joint's armature (rotor inertia ``a``, joint space, on
  no body) rides on the same row: its impulse over a substep is ``-a (rate_new - rate)``, so
  ``lambda = h impulse`` adds ``a`` to the row scale and ``a h rate`` to the offset. That is
  exact for an inertia (no time discretization of its own): the row then moves the joint
  as ``M + diag(a)`` would.

The dashpot row is multiplied by ``sigma = h b`` (row scaling S = Q + sigma d d^T, Q = I - d d^T),
which gives every row a finite compliance (rigid rows ``alpha / h^2``, dashpot row 1) so
that b = 0 needs no special case and stays differentiable. A joint whose predicted position
leaves its limits gets a rigid free row instead (scale 1, compliance 0, target = the
displacement that puts it on the limit), so limits are solved together with the joints.
A joint drive (stiffness K towards a target) adds ``h^2 K / 4`` to the row scale and an
offset: the implicit quarter of Newmark's average-acceleration spring.

The correction directions (Jacobians) are evaluated at the substep start, as in SHAKE: this
makes the scheme second order, whereas the closest-point projection of plain PBD
(directions at the predicted poses) is first order and dissipative. The per-joint blocks
are built once per substep; errors are re-evaluated at every projection.
"""

from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import quat_to_matrix, so3_exp
from diffsim_ros.sim.pbd.frames import child_mats, child_rows, joint_frames, parent_mats, parent_rows

__all__ = [
    "JointSide",
    "JointBlocks",
    "coupling_block",
    "joint_blocks",
    "free_direction",
    "orientations",
    "row_errors",
    "joint_errors",
    "row_rhs",
    "row_velocities",
    "compliance_matrix",
    "scaled_errors",
    "apply_displacements",
    "constraint_residuals",
]


@dataclass(frozen=True)
class JointSide:
    """One particle of every joint, as seen by the joint rows (n joints, or a selection).

    The rows' Jacobian w.r.t. this particle's generalized displacement ``(dx, dtheta)`` is
    ``sign [[I, -[r]x], [0, I]]`` and its response to a joint impulse ``(p, m)`` is
    ``sign (w p, A (r x p + m))``. Every block of the joint system is formed from these
    3-vectors and 3x3 matrices with cross products (batched 6x6 matrix products are slow).
    """

    sign: float
    """+1 for the child, -1 for the parent."""
    inv_mass: torch.Tensor
    """Inverse mass w [1/kg], (n,)."""
    inv_inertia: torch.Tensor
    """World inverse inertia A [1/(kg·m²)], (..., n, 3, 3)."""
    lever: torch.Tensor
    """Lever r from the particle's COM to the joint anchor [m], (..., n, 3)."""
    cross_inertia: torch.Tensor
    """``C = [r]x A``, (..., n, 3, 3) (``A [r]x = -C^T``)."""

    def response(self, impulse):
        """Generalized displacement ``(dx, dtheta)`` for joint impulses (..., n, 6) -> (..., n, 6)."""
        force, moment = impulse[..., :3], impulse[..., 3:]
        turn = torch.cross(self.lever, force, dim=-1) + moment
        linear = self.inv_mass[..., None] * force
        return self.sign * torch.cat([linear, (self.inv_inertia @ turn[..., None])[..., 0]], dim=-1)

    def row_velocity(self, vel, omega):
        """Row velocities ``sign (v + w x r, w)`` of particle velocities (..., n, 3) -> (..., n, 6)."""
        return self.sign * torch.cat([vel + torch.cross(omega, self.lever, dim=-1), omega], dim=-1)

    def select(self, index):
        """The same side restricted to the joints ``index`` (a list)."""
        return JointSide(
            self.sign,
            self.inv_mass[index],
            self.inv_inertia[..., index, :, :],
            self.lever[..., index, :],
            self.cross_inertia[..., index, :, :],
        )


def _side(sign, inv_mass, inv_inertia, lever):
    cross = torch.cross(lever[..., :, None].expand_as(inv_inertia), inv_inertia, dim=-2)  # column-wise r x A
    return JointSide(sign, inv_mass, inv_inertia, lever, cross)


def coupling_block(a, b):
    """``J_a M^-1 J_b^T`` of two sides on the same particle, (..., k, 6, 6).

    ``sign_a sign_b [[w I + [r_a]x C_b^T, -C_a], [-C_b^T, A]]`` with ``C = [r]x A``.
    """
    c_b_t = b.cross_inertia.transpose(-1, -2)
    eye = torch.eye(3, dtype=c_b_t.dtype, device=c_b_t.device)
    top_left = a.inv_mass[..., None, None] * eye + torch.cross(a.lever[..., :, None].expand_as(c_b_t), c_b_t, dim=-2)
    top = torch.cat([top_left, -a.cross_inertia], dim=-1)
    bottom = torch.cat([-c_b_t, a.inv_inertia], dim=-1)
    return (a.sign * b.sign) * torch.cat([top, bottom], dim=-2)


@dataclass(frozen=True)
class JointBlocks:
    """Per-substep constants of the joint rows (batch shape (...), n joints, N particles)."""

    child: JointSide
    """The child particle of every joint."""
    parent: JointSide
    """The parent particle of every joint."""
    free: torch.Tensor
    """Free direction d of each joint (unit), (..., n, 6)."""
    row_scale: torch.Tensor
    """Free-row scale sigma: ``h (b + friction slope) + armature`` for a dashpot, 1 at a limit, (..., n)."""
    row_compliance: torch.Tensor
    """Free-row compliance: 1 for a dashpot, 0 at a limit, (..., n)."""
    offset: torch.Tensor
    """Free-row offset ``sigma x target``: ``armature h rate`` for a dashpot, the displacement onto
    the limit at a limit, plus ``-h^2 K/4 (q - target)`` for a drive, (..., n)."""
    alpha: float
    """Rigid-row compliance over h^2 (0 = rigid)."""
    rot0: torch.Tensor
    """Orientations at the substep start, (..., N, 3, 3)."""
    slide0: torch.Tensor | None
    """Prismatic joint positions at the substep start [m], (..., n) (None without prismatic joints)."""

    def scale_rows(self, block, index=None):
        """``S block`` with the row scaling ``S = I + (sigma - 1) d d^T`` (a rank-one update)."""
        free, scale = self.free, self.row_scale
        if index is not None:
            free, scale = free[..., index, :], scale[..., index]
        along = (free[..., :, None] * block).sum(-2)  # d^T block
        return block + ((scale - 1.0)[..., None] * free)[..., :, None] * along[..., None, :]

    def local_block(self):
        """The joint's own block ``S (J_c M_c^-1 J_c^T + J_p M_p^-1 J_p^T) + A``, (..., n, 6, 6)."""
        coupling = coupling_block(self.child, self.child) + coupling_block(self.parent, self.parent)
        return self.scale_rows(coupling) + compliance_matrix(self.free, self.alpha, self.row_compliance)

    def responses(self, impulse):
        """Child and parent displacements ``(dx, dtheta)`` for joint impulses, each (..., n, 6)."""
        return self.child.response(impulse), self.parent.response(impulse)


def free_direction(joints, axis):
    """d = [0, a] for revolute joints, [a, 0] for prismatic joints, shape (..., n, 6)."""
    zero = torch.zeros_like(axis)
    if joints.all_revolute:
        return torch.cat([zero, axis], dim=-1)
    revolute = joints.revolute_mask[:, None]
    return torch.cat([torch.where(revolute, zero, axis), torch.where(revolute, axis, zero)], dim=-1)


def compliance_matrix(free, alpha, row_compliance):
    """Row compliance ``alpha (I - d d^T) + epsilon d d^T``, shape (..., n, 6, 6)."""
    outer = free[..., :, None] * free[..., None, :]
    eye = torch.eye(6, dtype=free.dtype, device=free.device)
    return alpha * (eye - outer) + row_compliance[..., None, None] * outer


def joint_blocks(system, frames0, rot0, inv_inertia_w, damping, rate, compliance, h, limit=None, drive=None):
    """Per-substep joint-row constants, Jacobians at the substep start (SHAKE directions).

    Args:
        system: PBDSystem.
        frames0: JointFrames at the substep start.
        rot0: Orientations at the substep start, (..., N, 3, 3).
        inv_inertia_w: World inverse inertias, shape (..., N, 3, 3).
        damping: Implicit damping coefficient of every joint (viscous + friction slope)
            [N·m·s/rad or N·s/m], shape (..., n).
        rate: Joint rates the substep starts from [rad/s or m/s], shape (..., n): what the
            joints' armature keeps moving at.
        compliance: Rigid-row XPBD compliance [m/N, rad/(N·m)].
        h: Substep [s].
        limit: Optional ``(active, target)``, each (..., n): joints held on a limit this
            substep and the displacement that puts them there [rad or m].
        drive: Optional ``(stiffness, error)``, each (..., n): the implicit drive stiffness
            [N·m/rad or N/m] and the drive error ``q - target`` at the substep start.

    Returns:
        JointBlocks.
    """
    joints, bodies = system.joints, system.bodies
    # The parent's lever reaches the child's anchor: the same point as its own anchor for a
    # revolute joint, the point of the axis the slider is at for a prismatic one.
    child = _side(1.0, bodies.inv_mass[1:], child_mats(inv_inertia_w), frames0.lever_c)
    lever_p = frames0.pos_c + frames0.lever_c - frames0.pos_p
    parent = _side(-1.0, bodies.inv_mass[joints.parent_index], parent_mats(joints, inv_inertia_w), lever_p)
    free = free_direction(joints, frames0.axis_c)
    # Always present (zero armature adds exact zeros): the armature stays differentiable at 0.
    row_scale = h * damping + joints.armature
    offset = joints.armature * (h * rate)
    if drive is not None:
        stiffness, error = drive
        row_scale = row_scale + (h * h) * stiffness
        offset = offset - (h * h) * stiffness * error
    row_compliance = torch.ones_like(row_scale)
    if limit is not None:
        active = limit[0]
        offset = torch.where(active, limit[1], offset)
        row_scale = torch.where(active, torch.ones_like(row_scale), row_scale)
        row_compliance = torch.where(active, torch.zeros_like(row_compliance), row_compliance)
    slide0 = None
    if not joints.all_revolute:
        slide0 = (frames0.axis_p * frames0.anchor_error()).sum(-1)
    # the local names are JointBlocks' fields, in order
    return JointBlocks(child, parent, free, row_scale, row_compliance, offset, float(compliance) / (h * h), rot0, slide0)


def orientations(rot0, phi):
    """Orientations ``exp(phi) rot0`` after world-frame rotation vectors ``phi`` [rad].

    The projections accumulate each particle's rotation since the substep start as one
    rotation vector: composing small rotations one after the other would add
    ``1/2 dtheta x phi`` per composition, an O(h^3) pose error that the velocity
    read-back turns into a first-order error.
    """
    return so3_exp(phi) @ rot0


def _skew_part(mat):
    """``vee((M - M^T) / 2)``: the rotation vector of a rotation close to identity, (..., 3)."""
    return 0.5 * torch.stack(
        [mat[..., 2, 1] - mat[..., 1, 2], mat[..., 0, 2] - mat[..., 2, 0], mat[..., 1, 0] - mat[..., 0, 1]], dim=-1
    )


def row_errors(rest_rot, frames, phi_p, phi_c, free, slide0, revolute):
    """Rigid errors ``[C_pos, C_ang]`` and free-row displacement ``C_d`` of joint rows.

    Works for one joint (``frames`` fields (..., k), ``revolute`` a Python bool) or all
    joints ((..., n, k), ``revolute`` a bool mask, or a Python bool when all joints have
    the same type).

    Args:
        rest_rot: Joint frame(s) at q = 0 in the parent body frame, (3, 3) or (n, 3, 3).
        frames: JointFrames at the current poses.
        phi_p: Parent rotation since the substep start [rad], (..., 3).
        phi_c: Child rotation since the substep start [rad], (..., 3).
        free: Free direction(s) d, shape (..., 6).
        slide0: Prismatic position(s) at the substep start [m] (None for revolute joints).
        revolute: True/False for a single joint or a uniform set, else a mask (n,).

    Returns:
        ``(errors (..., 6), displacement (...))``. For prismatic joints the positional error
        is taken across the parent's *current* axis (a slider on a turning link must stay on
        the turned axis) and the displacement is the change of slide.
    """
    pos_error = frames.anchor_error()
    hinge = torch.cross(frames.axis_p, frames.axis_c, dim=-1)
    turn = (free[..., 3:] * (phi_c - phi_p)).sum(-1)
    if revolute is True:
        return torch.cat([pos_error, hinge], dim=-1), turn
    slide = (frames.axis_p * pos_error).sum(-1)
    across = pos_error - frames.axis_p * slide[..., None]
    lock = _skew_part(frames.rot_c @ (frames.rot_p @ rest_rot).transpose(-1, -2))
    if revolute is False:
        return torch.cat([across, lock], dim=-1), slide - slide0
    mask = revolute[:, None]
    errors = torch.cat([torch.where(mask, pos_error, across), torch.where(mask, hinge, lock)], dim=-1)
    return errors, torch.where(revolute, turn, slide - slide0)


def _type_flag(joints):
    """True / False when all joints are revolute / prismatic, else the bool mask (n,)."""
    if joints.all_revolute or not any(joints.revolute):
        return joints.revolute[0]
    return joints.revolute_mask


def joint_errors(system, blocks, pos, phi):
    """:func:`row_errors` of all joints: ``(errors (..., n, 6), displacement (..., n))``.

    Args:
        system: PBDSystem.
        blocks: JointBlocks of the substep.
        pos: COM positions [m], shape (..., N, 3).
        phi: Rotation vectors since the substep start [rad], shape (..., N, 3).
    """
    joints = system.joints
    frames = joint_frames(joints, pos, orientations(blocks.rot0, phi))
    return row_errors(
        joints.rest_rot, frames, parent_rows(joints, phi), child_rows(phi), blocks.free, blocks.slide0, _type_flag(joints)
    )


def scaled_errors(free, row_scale, errors, displacement):
    """Row errors ``Q E + sigma C_d d`` (rigid part without its free component), (..., 6)."""
    along = (free * errors).sum(-1, keepdim=True)
    return errors + free * ((row_scale * displacement)[..., None] - along)


def row_rhs(blocks, errors, displacement, lam, index=None):
    """Right-hand side ``S~ C + A lambda`` of the joint rows (joint ``index``, or all).

    Args:
        blocks: JointBlocks.
        errors: Rigid errors, shape (..., 6) or (..., n, 6).
        displacement: Free-row displacements since the substep start, shape (...) or (..., n).
        lam: Accumulated multipliers, shape of ``errors``.
        index: Joint index when ``errors`` belong to one joint.
    """
    free, scale, comp, offset = blocks.free, blocks.row_scale, blocks.row_compliance, blocks.offset
    if index is not None:
        free, scale, comp, offset = free[..., index, :], scale[..., index], comp[..., index], offset[..., index]
    along = free * (free * lam).sum(-1, keepdim=True)
    compliance = blocks.alpha * (lam - along) + comp[..., None] * along
    return scaled_errors(free, scale, errors, displacement) - free * offset[..., None] + compliance


def row_velocities(system, blocks, vel, omega):
    """Joint-row velocities ``J_c (v_c, w_c) + J_p (v_p, w_p)`` of all joints, (..., n, 6)."""
    joints = system.joints
    child = blocks.child.row_velocity(child_rows(vel), child_rows(omega))
    return child + blocks.parent.row_velocity(parent_rows(joints, vel), parent_rows(joints, omega))


def apply_displacements(system, pos, phi, delta_c, delta_p):
    """Add per-joint generalized displacements ``(dx, dtheta)`` to the particles.

    Args:
        system: PBDSystem.
        pos: COM positions [m], shape (..., N, 3).
        phi: Rotation vectors since the substep start [rad], shape (..., N, 3).
        delta_c: Child displacements of every joint, shape (..., n, 6).
        delta_p: Parent displacements, shape (..., n, 6).

    Returns:
        ``(pos, phi)``.
    """
    joints = system.joints
    zeros = delta_c.new_zeros(*delta_c.shape[:-2], joints.count + 1, 6)
    delta = zeros.index_add(-2, joints.child_index, delta_c).index_add(-2, joints.parent_index, delta_p)
    return pos + delta[..., :3], phi + delta[..., 3:]


def constraint_residuals(system, pos, quat):
    """Violation of every joint's rigid rows (diagnostics; no gradient needed).

    Args:
        system: PBDSystem.
        pos: COM positions [m], shape (..., N, 3).
        quat: Orientations, shape (..., N, 4).

    Returns:
        ``(positional [m], angular [rad])``, each shape (..., n): anchor separation (across
        the axis for prismatic joints) and axis misalignment (orientation error for
        prismatic joints).
    """
    joints = system.joints
    frames = joint_frames(joints, pos, quat_to_matrix(quat))
    zero = torch.zeros_like(frames.pos_c)
    free = free_direction(joints, frames.axis_c)
    slide = None if joints.all_revolute else (frames.axis_p * frames.anchor_error()).sum(-1)
    errors, _ = row_errors(joints.rest_rot, frames, zero, zero, free, slide, _type_flag(joints))
    return torch.linalg.vector_norm(errors[..., :3], dim=-1), torch.linalg.vector_norm(errors[..., 3:], dim=-1)

