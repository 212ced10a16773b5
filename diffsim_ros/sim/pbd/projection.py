"""Projection of the joint rows: Gauss-Seidel, Jacobi (the paper's) and a direct solve.

All three solve the XPBD update ``(S J M^-1 J^T + A) dlambda = -(S~ C + A lambda)`` of the
joint rows (see :mod:`.constraints`) for the joint impulses ``dlambda``: Gauss-Seidel and
Jacobi joint by joint with each joint's exact 6x6 block, the direct solver for all joints
at once (the exact linearized projection of the whole tree, one dense solve).
"""

import torch

from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.sim.pbd.constraints import (
    apply_impulses,
    compliance_term,
    joint_errors,
    joint_geometry,
    orient,
    pair_errors,
    scaled_errors,
)
from diffsim_ros.sim.pbd.frames import joint_coordinates

__all__ = ["project_gauss_seidel", "project_jacobi", "project_direct", "solve_direct", "project_limits"]


def _joint_update(blocks, errors, displacement, lam, index=None):
    """Multiplier step and particle displacements of joint rows (joint ``index``, or all).

    Returns:
        ``(dlambda, delta_child, delta_parent)``: shapes (..., 6) each (or (..., n, 6)).
    """
    free, beta, inverse = blocks.free, blocks.beta, blocks.inv_block
    resp_c, resp_p = blocks.resp_c, blocks.resp_p
    if index is not None:
        free, beta, inverse = free[..., index, :], beta[..., index], inverse[..., index, :, :]
        resp_c, resp_p = resp_c[..., index, :, :], resp_p[..., index, :, :]
    rhs = scaled_errors(free, beta, errors, displacement) + compliance_term(free, blocks.alpha, lam)
    step = -matvec(inverse, rhs)
    return step, matvec(resp_c, step), matvec(resp_p, step)


def project_gauss_seidel(system, blocks, pos, phi, iterations):
    """Gauss-Seidel: joints one after the other (base to tip), each with its exact block.

    Args:
        system: PBDSystem.
        blocks: JointBlocks of this substep.
        pos: Predicted COM positions [m], shape (..., N, 3).
        phi: Predicted rotation vectors since the substep start [rad], shape (..., N, 3).
        iterations: Sweeps over all joints.

    Returns:
        ``(pos, phi)`` after projection.
    """
    joints = system.joints
    xs, phis, q0s = list(pos.unbind(-2)), list(phi.unbind(-2)), list(blocks.quat0.unbind(-2))
    qs = [orient(q0, p) for q0, p in zip(q0s, phis)]
    lam = [torch.zeros_like(blocks.free[..., 0, :])] * joints.count
    for _ in range(iterations):
        for j, (p, c) in enumerate(zip(joints.parent, joints.child)):
            error0 = None if blocks.error0 is None else blocks.error0[..., j, :]
            errors, displacement = pair_errors(
                joint_geometry(joints, j),
                joints.revolute[j],
                (xs[p], qs[p], phis[p]),
                (xs[c], qs[c], phis[c]),
                blocks.free[..., j, :],
                error0,
            )
            step, delta_c, delta_p = _joint_update(blocks, errors, displacement, lam[j], j)
            lam[j] = lam[j] + step
            xs[c], phis[c] = xs[c] + delta_c[..., :3], phis[c] + delta_c[..., 3:]
            qs[c] = orient(q0s[c], phis[c])
            if p > 0:  # the fixed base never moves
                xs[p], phis[p] = xs[p] + delta_p[..., :3], phis[p] + delta_p[..., 3:]
                qs[p] = orient(q0s[p], phis[p])
    return torch.stack(xs, dim=-2), torch.stack(phis, dim=-2)


def project_jacobi(system, blocks, pos, phi, iterations, relaxation=1.0):
    """Jacobi (the paper's solver): every joint from the same poses, averaged per particle.

    Each iteration computes every joint's block update at the current poses (vectorized
    over joints) and moves each particle by ``relaxation / (its number of joints)`` times
    the sum of its joints' displacements (constraint averaging).

    Args:
        system: PBDSystem.
        blocks: JointBlocks of this substep.
        pos: Predicted COM positions [m], shape (..., N, 3).
        phi: Predicted rotation vectors since the substep start [rad], shape (..., N, 3).
        iterations: Jacobi iterations.
        relaxation: Over-relaxation factor.

    Returns:
        ``(pos, phi)`` after projection.
    """
    joints = system.joints
    share = relaxation / joints.constraint_count.clamp_min(1.0)
    weight_c, weight_p = share[joints.child_index, None], share[joints.parent_index, None]
    lam = torch.zeros_like(blocks.free)
    for _ in range(iterations):
        errors, displacement = joint_errors(system, blocks, pos, phi)
        step, delta_c, delta_p = _joint_update(blocks, errors, displacement, lam)
        lam = lam + weight_c * step
        pos, phi = apply_impulses(system, pos, phi, weight_c * delta_c, weight_p * delta_p)
    return pos, phi


def _dense_rows(joints, child_part, parent_part, count):
    """Dense (..., n, 6, N, 6) matrix with per-joint child/parent 6x6 blocks."""
    eye = torch.eye(count, dtype=child_part.dtype, device=child_part.device)
    onehot_c, onehot_p = eye[list(joints.child)], eye[list(joints.parent)]  # (n, N)
    return (
        child_part[..., :, :, None, :] * onehot_c[:, None, :, None]
        + parent_part[..., :, :, None, :] * onehot_p[:, None, :, None]
    )


def solve_direct(system, blocks, rhs):
    """Joint impulses of all joints at once: ``(S J M^-1 J^T + A) dlambda = -rhs``.

    Args:
        system: PBDSystem.
        blocks: JointBlocks.
        rhs: Scaled row errors plus compliance terms, shape (..., n, 6).

    Returns:
        ``(dlambda (..., n, 6), particle displacements (dx, dtheta) (..., N, 6))``.
    """
    joints = system.joints
    n, count = joints.count, joints.count + 1
    rows = _dense_rows(joints, blocks.scale @ blocks.jac_c, blocks.scale @ blocks.jac_p, count)
    rows = rows.flatten(-2).flatten(-3, -2)  # (..., 6n, 6N)
    resp = _dense_rows(joints, blocks.resp_c.transpose(-1, -2), blocks.resp_p.transpose(-1, -2), count)
    resp = resp.flatten(-2).flatten(-3, -2).transpose(-1, -2)  # (..., 6N, 6n)
    outer = blocks.free[..., :, None] * blocks.free[..., None, :]
    comp = blocks.alpha * (torch.eye(6, dtype=rhs.dtype, device=rhs.device) - outer) + outer
    eye_n = torch.eye(n, dtype=rhs.dtype, device=rhs.device)
    comp = (comp[..., :, :, None, :] * eye_n[:, None, :, None]).flatten(-2).flatten(-3, -2)
    step = -torch.linalg.solve(rows @ resp + comp, rhs.flatten(-2))
    delta = (resp @ step[..., None])[..., 0]
    return step.unflatten(-1, (n, 6)), delta.unflatten(-1, (count, 6))


def project_direct(system, blocks, pos, phi, iterations):
    """Direct solver: the exact linearized projection of all joints, one dense solve each iteration.

    Builds the 6n x 6n system of all joint rows from the per-joint blocks and solves it
    with LU, so every row is satisfied to first order at once (no Gauss-Seidel/Jacobi
    convergence error); ``iterations`` quasi-Newton iterations handle the nonlinearity.

    Args:
        system: PBDSystem.
        blocks: JointBlocks of this substep.
        pos: Predicted COM positions [m], shape (..., N, 3).
        phi: Predicted rotation vectors since the substep start [rad], shape (..., N, 3).
        iterations: Newton iterations.

    Returns:
        ``(pos, phi)`` after projection.
    """
    lam = torch.zeros_like(blocks.free)
    for _ in range(iterations):
        errors, displacement = joint_errors(system, blocks, pos, phi)
        rhs = scaled_errors(blocks.free, blocks.beta, errors, displacement) + compliance_term(blocks.free, blocks.alpha, lam)
        step, delta = solve_direct(system, blocks, rhs)
        lam = lam + step
        pos, phi = pos + delta[..., :3], phi + delta[..., 3:]
    return pos, phi


def project_limits(system, blocks, pos, phi):
    """Push joints that left their position limits back onto them (hard, one pass).

    The violation ``q - clamp(q, lower, upper)`` is zero inside the limits, so the pass
    does nothing (with zero gradient) for joints within range. All joints are projected at
    once from the same poses (limits of adjacent joints are rarely active together).

    Returns:
        ``(pos, phi)`` after projection.
    """
    joints = system.joints
    q = joint_coordinates(joints, pos, orient(blocks.quat0, phi))
    violation = q - torch.minimum(torch.maximum(q, joints.lower), joints.upper)
    free = blocks.free
    move_c, move_p = matvec(blocks.resp_c, free), matvec(blocks.resp_p, free)
    inv_gen = (free * (matvec(blocks.jac_c, move_c) + matvec(blocks.jac_p, move_p))).sum(-1)
    impulse = (-violation / inv_gen)[..., None]
    return apply_impulses(system, pos, phi, impulse * move_c, impulse * move_p)
