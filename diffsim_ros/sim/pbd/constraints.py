"""Joint constraint blocks (XPBD): positional, angular and damping rows of every joint.

Each joint couples its parent (p) and child (c) particle with six rows, written for the
generalized displacement ``(dx, dtheta)`` of each particle (world axes):

* positional rows (paper Eq. 1-9): ``C_pos = (x_c + r_c) - (x_p + r_p)`` (joint anchors
  coincide);
* angular rows (paper Eq. 11-17): revolute joints keep their axes aligned,
  ``C_ang = a_p x a_c``; prismatic joints keep the rest orientation,
  ``C_ang = rotvec(q_c (q_p q_rest)^-1)``;
* the free direction ``d`` of the joint (``[0, a]`` revolute, ``[a, 0]`` prismatic) is not
  rigid: it carries the joint's viscous damping (plus the slope of the smoothed Coulomb
  friction) as an XPBD dashpot, ``C_d`` = joint displacement since the substep start,
  compliance ``1 / (h b)``. Solving it together with the rigid rows makes the damping
  implicit in the same projection that moves the joint, which keeps stiffly damped light
  links (Baxter's wrist) accurate.

The dashpot row is multiplied by ``beta = h b`` (row scaling S = Q + beta d d^T, Q = I - d d^T),
which gives every row a finite compliance (rigid rows ``alpha / h^2``, dashpot row 1) so
that b = 0 needs no special case and stays differentiable. The correction directions
(Jacobians) are evaluated at the substep start, as in SHAKE: this makes the scheme second
order, whereas the closest-point projection of plain PBD (directions at the predicted
poses) is first order and dissipative. The 6x6 joint blocks and their inverses are built
once per substep; errors are re-evaluated at every projection.
"""

from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import matvec, quat_conjugate, quat_multiply, quat_rotate, skew
from diffsim_ros.sim.pbd.frames import child_mats, child_rows, parent_mats, parent_rows, quat_exp, rotate

__all__ = [
    "orient",
    "rotation_since",
    "JointBlocks",
    "joint_blocks",
    "joint_errors",
    "joint_geometry",
    "pair_errors",
    "compliance_term",
    "scaled_errors",
    "row_velocities",
    "apply_impulses",
    "constraint_residuals",
]


def orient(quat0, phi):
    """Orientations ``exp(phi) quat0`` after world-frame rotation vectors ``phi`` [rad].

    The projections accumulate each particle's rotation since the substep start as one
    rotation vector: composing small rotations one after the other would add
    ``1/2 dtheta x phi`` per composition, an O(h^3) pose error that the velocity
    read-back turns into a first-order error.
    """
    return quat_multiply(quat_exp(phi), quat0)


def rotation_since(quat, quat0):
    """Small world-frame rotation vector [rad] from ``quat0`` to ``quat``, ``2 vec(q q0^-1)``.

    Sign-fixed (q and -q are the same rotation); accurate to O(angle^3).
    """
    delta = quat_multiply(quat, quat_conjugate(quat0))
    return torch.where(delta[..., :1] < 0, -2.0, 2.0) * delta[..., 1:]


@dataclass(frozen=True)
class JointBlocks:
    """Per-substep constants of the joint rows (batch shape (...), n joints, N particles)."""

    jac_c: torch.Tensor
    """Jacobian ``J_c`` of each joint's rows w.r.t. its child's (dx, dtheta), (..., n, 6, 6).

    The same matrices map particle velocities (v, omega) to joint-row velocities."""
    jac_p: torch.Tensor
    """Jacobian ``J_p`` w.r.t. its parent's (dx, dtheta), (..., n, 6, 6)."""
    resp_c: torch.Tensor
    """Child displacement per unit joint impulse, ``M_c^-1 J_c^T``, (..., n, 6, 6)."""
    resp_p: torch.Tensor
    """Parent displacement per unit joint impulse, ``M_p^-1 J_p^T``, (..., n, 6, 6)."""
    scale: torch.Tensor
    """Row scaling ``S = I + (beta - 1) d d^T``, (..., n, 6, 6)."""
    inv_block: torch.Tensor
    """Inverse of the local joint block ``S K + A``, (..., n, 6, 6)."""
    free: torch.Tensor
    """Free direction d of each joint (unit), (..., n, 6)."""
    beta: torch.Tensor
    """Dashpot row scale ``h (b + friction slope)`` [N·m·s²/rad or N·s²/m], (..., n)."""
    alpha: float
    """Rigid-row compliance over h^2 (0 = rigid)."""
    quat0: torch.Tensor
    """Orientations at the substep start, (..., N, 4) (dashpot reference)."""
    error0: torch.Tensor
    """Positional errors at the substep start, (..., n, 3) (prismatic dashpot reference)."""


def _jacobians(lever_p, lever_c):
    """Unscaled 6x6 Jacobians of the joint rows w.r.t. child and parent (dx, dtheta)."""
    eye = torch.eye(3, dtype=lever_c.dtype, device=lever_c.device).expand(*lever_c.shape[:-1], 3, 3)
    zero = torch.zeros_like(eye)

    def jac(lever, sign):
        top = torch.cat([eye, -skew(lever)], dim=-1)
        bottom = torch.cat([zero, eye], dim=-1)
        return sign * torch.cat([top, bottom], dim=-2)

    return jac(lever_c, 1.0), jac(lever_p, -1.0)


def _free_direction(joints, axis):
    """d = [0, a] for revolute joints, [a, 0] for prismatic joints, shape (..., n, 6)."""
    zero = torch.zeros_like(axis)
    if all(joints.revolute):
        return torch.cat([zero, axis], dim=-1)
    revolute = torch.tensor(joints.revolute, device=axis.device)[:, None]
    return torch.cat([torch.where(revolute, zero, axis), torch.where(revolute, axis, zero)], dim=-1)


def _inverse_mass6(bodies, inv_inertia_w):
    """``diag(1/m I3, I_w^-1)`` per particle, shape (..., N, 6, 6)."""
    eye = torch.eye(3, dtype=inv_inertia_w.dtype, device=inv_inertia_w.device)
    lin = (bodies.inv_mass[:, None, None] * eye).expand(*inv_inertia_w.shape)
    zero = torch.zeros_like(inv_inertia_w)
    return torch.cat([torch.cat([lin, zero], dim=-1), torch.cat([zero, inv_inertia_w], dim=-1)], dim=-2)


def _compliance(free, alpha):
    """Row compliance ``alpha (I - d d^T) + d d^T`` (dashpot row scaled to 1), (..., n, 6, 6)."""
    outer = free[..., :, None] * free[..., None, :]
    eye = torch.eye(6, dtype=free.dtype, device=free.device)
    return alpha * (eye - outer) + outer


def joint_blocks(system, state0, inv_inertia_w, damping, compliance, h):
    """Per-substep joint-row constants, Jacobians at the substep start (SHAKE directions).

    Args:
        system: PBDSystem.
        state0: PBDState at the substep start (Jacobians and dashpot reference).
        inv_inertia_w: World inverse inertias, shape (..., N, 3, 3).
        damping: Implicit damping coefficient of every joint (viscous + friction slope)
            [N·m·s/rad or N·s/m], shape (..., n).
        compliance: Rigid-row XPBD compliance [m/N, rad/(N·m)].
        h: Substep [s].

    Returns:
        JointBlocks.
    """
    joints = system.joints
    quat_p, quat_c = parent_rows(joints, state0.quat), child_rows(state0.quat)
    jac_c, jac_p = _jacobians(rotate(quat_p, joints.anchor_parent), rotate(quat_c, joints.anchor_child))
    free = _free_direction(joints, rotate(quat_c, joints.axis_child))
    beta = h * damping
    eye6 = torch.eye(6, dtype=state0.pos.dtype, device=state0.pos.device)
    scale = eye6 + (beta - 1.0)[..., None, None] * (free[..., :, None] * free[..., None, :])
    inv_mass6 = _inverse_mass6(system.bodies, inv_inertia_w)
    resp_c = child_mats(inv_mass6) @ jac_c.transpose(-1, -2)
    resp_p = parent_mats(joints, inv_mass6) @ jac_p.transpose(-1, -2)
    alpha = float(compliance) / (h * h)
    block = scale @ (jac_c @ resp_c + jac_p @ resp_p) + _compliance(free, alpha)
    error0 = None
    if not all(joints.revolute):
        error0 = _positional_error(joints, state0.pos, state0.quat)
    return JointBlocks(
        jac_c=jac_c,
        jac_p=jac_p,
        resp_c=resp_c,
        resp_p=resp_p,
        scale=scale,
        inv_block=torch.linalg.inv(block),
        free=free,
        beta=beta,
        alpha=alpha,
        quat0=state0.quat,
        error0=error0,
    )


def _positional_error(joints, pos, quat):
    return (
        child_rows(pos)
        + rotate(child_rows(quat), joints.anchor_child)
        - parent_rows(joints, pos)
        - rotate(parent_rows(joints, quat), joints.anchor_parent)
    )


def pair_errors(geometry, revolute, parent, child, free, error0=None):
    """Rigid errors ``[C_pos, C_ang]`` and dashpot displacement ``C_d`` of joint rows.

    Works for one joint (tensors (..., k)) or all joints at once ((..., n, k)).

    Args:
        geometry: ``(anchor_parent, anchor_child, axis_parent, axis_child, rest_quat)`` of
            the joint(s), body axes.
        revolute: Python bool (one joint, or all joints of one type) or bool tensor (n,).
        parent: ``(pos, quat, phi)`` of the parent particle(s), phi = rotation vector since
            the substep start.
        child: ``(pos, quat, phi)`` of the child particle(s).
        free: Free direction(s) d, shape (..., 6).
        error0: Positional error(s) at the substep start (needed for prismatic joints).

    Returns:
        ``(errors (..., 6), displacement (...))``.
    """
    anchor_p, anchor_c, axis_p, axis_c, rest = geometry
    (x_p, q_p, phi_p), (x_c, q_c, phi_c) = parent, child
    pos_error = x_c + rotate(q_c, anchor_c) - x_p - rotate(q_p, anchor_p)
    hinge = torch.cross(rotate(q_p, axis_p), rotate(q_c, axis_c), dim=-1)
    displacement = (free[..., 3:] * (phi_c - phi_p)).sum(-1)
    if revolute is True:
        return torch.cat([pos_error, hinge], dim=-1), displacement
    lock = rotation_since(q_c, quat_multiply(q_p, rest))
    slide = (free[..., :3] * (pos_error - error0)).sum(-1)
    if revolute is False:
        return torch.cat([pos_error, lock], dim=-1), slide
    ang_error = torch.where(revolute[:, None], hinge, lock)
    return torch.cat([pos_error, ang_error], dim=-1), torch.where(revolute, displacement, slide)


def _type_flag(joints, device):
    """True / False when all joints are revolute / prismatic, else the bool mask (n,)."""
    if all(joints.revolute) or not any(joints.revolute):
        return joints.revolute[0]
    return torch.tensor(joints.revolute, device=device)


def joint_geometry(joints, j=None):
    """``(anchor_parent, anchor_child, axis_parent, axis_child, rest_quat)`` of joint j (or all)."""
    parts = (joints.anchor_parent, joints.anchor_child, joints.axis_parent, joints.axis_child, joints.rest_quat)
    return parts if j is None else tuple(t[j] for t in parts)


def joint_errors(system, blocks, pos, phi):
    """:func:`pair_errors` of all joints at once: ``(errors (..., n, 6), displacement (..., n))``.

    Args:
        system: PBDSystem.
        blocks: JointBlocks of the substep.
        pos: COM positions [m], shape (..., N, 3).
        phi: Rotation vectors since the substep start [rad], shape (..., N, 3).
    """
    joints = system.joints
    revolute = _type_flag(joints, pos.device)
    quat = orient(blocks.quat0, phi)
    parent = (parent_rows(joints, pos), parent_rows(joints, quat), parent_rows(joints, phi))
    child = (child_rows(pos), child_rows(quat), child_rows(phi))
    return pair_errors(joint_geometry(joints), revolute, parent, child, blocks.free, blocks.error0)


def scaled_errors(free, beta, errors, displacement):
    """Row errors ``Q E + beta C_d d`` (rigid part without its free component), (..., 6)."""
    along = (free * errors).sum(-1, keepdim=True)
    return errors + free * ((beta * displacement)[..., None] - along)


def row_velocities(system, blocks, vel, omega):
    """Joint-row velocities ``J_c (v_c, w_c) + J_p (v_p, w_p)`` of all joints, (..., n, 6)."""
    joints = system.joints
    twist = torch.cat([vel, omega], dim=-1)
    return (blocks.jac_c @ child_rows(twist)[..., None])[..., 0] + (
        blocks.jac_p @ parent_rows(joints, twist)[..., None]
    )[..., 0]


def compliance_term(free, alpha, lam):
    """``A lambda`` for the row compliance of :func:`_compliance`, shape of ``lam``."""
    along = free * (free * lam).sum(-1, keepdim=True)
    return alpha * (lam - along) + along


def apply_impulses(system, pos, phi, delta_c, delta_p):
    """Add generalized displacements to the particles (summed per particle).

    Args:
        system: PBDSystem.
        pos: COM positions [m], shape (..., N, 3).
        phi: Rotation vectors since the substep start [rad], shape (..., N, 3).
        delta_c: Child displacements ``(dx, dtheta)`` of every joint, shape (..., n, 6).
        delta_p: Parent displacements, shape (..., n, 6).

    Returns:
        ``(pos, phi)``.
    """
    joints = system.joints
    count = joints.count + 1
    zeros = delta_c.new_zeros(*delta_c.shape[:-2], count, 6)
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
    free = _free_direction(joints, rotate(child_rows(quat), joints.axis_child))
    zero = torch.zeros_like(child_rows(pos))
    parent = (parent_rows(joints, pos), parent_rows(joints, quat), zero)
    child = (child_rows(pos), child_rows(quat), zero)
    errors, _ = pair_errors(joint_geometry(joints), _type_flag(joints, pos.device), parent, child, free, zero)
    along = free[..., :3] * (free[..., :3] * errors[..., :3]).sum(-1, keepdim=True)
    return torch.linalg.vector_norm(errors[..., :3] - along, dim=-1), torch.linalg.vector_norm(errors[..., 3:], dim=-1)
