"""Projection of the joint rows: Gauss-Seidel, Jacobi (the paper's) and a direct solve.

All three solve the XPBD update ``(S J M^-1 J^T + A) dlambda = -(S~ C + A lambda)`` of the
joint rows (see :mod:`.constraints`) for the joint impulses ``dlambda`` and move the
particles by ``M^-1 J^T dlambda``: Gauss-Seidel and Jacobi joint by joint with each
joint's exact 6x6 block, the direct solver for all joints at once (the exact linearized
projection of the whole tree; one LU factorization per substep, one solve per iteration).
All work on positions and rotation vectors accumulated since the substep start.
"""

import torch

from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.sim.pbd.constraints import (
    apply_displacements,
    joint_errors,
    orientations,
    row_errors,
    row_rhs,
)
from diffsim_ros.sim.pbd.frames import JointFrames

__all__ = ["project_gauss_seidel", "project_jacobi", "project_direct", "solve_direct"]


def _pair_frames(joints, j, xs, rots):
    """JointFrames of joint j from per-particle lists of positions and orientations."""
    p, c = joints.parent[j], joints.child[j]
    return JointFrames(
        pos_p=xs[p],
        pos_c=xs[c],
        rot_p=rots[p],
        rot_c=rots[c],
        vec_p=rots[p] @ joints.local_parent[j],
        vec_c=rots[c] @ joints.local_child[j],
    )


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
    inverse = torch.linalg.inv(blocks.local_block()).unbind(-3)
    resp_c, resp_p = blocks.resp_c.unbind(-3), blocks.resp_p.unbind(-3)
    xs, phis, rot0 = list(pos.unbind(-2)), list(phi.unbind(-2)), blocks.rot0.unbind(-3)
    rots = [orientations(r, p) for r, p in zip(rot0, phis)]
    lam = [torch.zeros_like(blocks.free[..., 0, :])] * joints.count
    for _ in range(iterations):
        for j, (p, c) in enumerate(zip(joints.parent, joints.child)):
            slide0 = None if blocks.slide0 is None else blocks.slide0[..., j]
            errors, displacement = row_errors(
                joints.rest_rot[j],
                _pair_frames(joints, j, xs, rots),
                phis[p],
                phis[c],
                blocks.free[..., j, :],
                slide0,
                joints.revolute[j],
            )
            step = -matvec(inverse[j], row_rhs(blocks, errors, displacement, lam[j], j))
            lam[j] = lam[j] + step
            for k, response in ((c, resp_c[j]), (p, resp_p[j])):
                if k == 0 and system.fixed_base:  # a fixed base never moves
                    continue
                delta = matvec(response, step)
                xs[k], phis[k] = xs[k] + delta[..., :3], phis[k] + delta[..., 3:]
                rots[k] = orientations(rot0[k], phis[k])
    return torch.stack(xs, dim=-2), torch.stack(phis, dim=-2)


def project_jacobi(system, blocks, pos, phi, iterations, relaxation=1.0):
    """Jacobi (the paper's solver): every joint from the same poses, averaged.

    Each iteration computes every joint's block update at the current poses (vectorized
    over joints) and applies it scaled by ``relaxation / k``, k the largest number of
    joints acting on either of its two particles (constraint averaging). Scaling each
    joint's impulse, rather than each particle's sum, keeps both particles' moves along
    that joint's correction directions, so the iteration converges to the same point as
    the direct solve.

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
    count = joints.constraint_count * system.bodies.dynamic  # the fixed base never moves
    share = relaxation / torch.maximum(count[joints.child_index], count[joints.parent_index])[:, None]
    inverse = torch.linalg.inv(blocks.local_block())
    lam = torch.zeros_like(blocks.free)
    for _ in range(iterations):
        errors, displacement = joint_errors(system, blocks, pos, phi)
        step = -share * matvec(inverse, row_rhs(blocks, errors, displacement, lam))
        lam = lam + step
        pos, phi = apply_displacements(system, pos, phi, matvec(blocks.resp_c, step), matvec(blocks.resp_p, step))
    return pos, phi


def _factor_direct(system, blocks):
    """LU factors of the 6n x 6n system of all joint rows.

    Block (j, j) is the joint's own block; block (j, k) couples two joints through the
    particle they share, ``S_j J_j M^-1 J_k^T``. Only those blocks are formed.
    """
    joints = system.joints
    n = joints.count
    diagonal = blocks.local_block()
    shape = diagonal.shape[:-3]
    blocks_flat = diagonal.new_zeros(*shape, n * n, 6, 6)
    index = torch.arange(n, device=diagonal.device) * (n + 1)
    blocks_flat = blocks_flat.index_add(-3, index, diagonal)
    if joints.couplings:
        rows, row_side, cols, col_side = (list(t) for t in zip(*joints.couplings))
        jac = torch.stack([blocks.scale @ blocks.jac_c, blocks.scale @ blocks.jac_p], dim=-3)  # (..., n, 2, 6, 6)
        resp = torch.stack([blocks.resp_c, blocks.resp_p], dim=-3)
        coupling = jac[..., rows, row_side, :, :] @ resp[..., cols, col_side, :, :]
        position = torch.tensor(rows, device=diagonal.device) * n + torch.tensor(cols, device=diagonal.device)
        blocks_flat = blocks_flat.index_add(-3, position, coupling)
    matrix = blocks_flat.unflatten(-3, (n, n)).transpose(-3, -2).reshape(*shape, 6 * n, 6 * n)
    return torch.linalg.lu_factor(matrix)


def _solve_factored(system, blocks, factors, rhs):
    """Impulses (..., n, 6) and per-joint child/parent displacements for row rhs (..., n, 6)."""
    lu, pivots = factors
    step = -torch.linalg.lu_solve(lu, pivots, rhs.flatten(-2)[..., None])[..., 0].unflatten(-1, rhs.shape[-2:])
    return step, matvec(blocks.resp_c, step), matvec(blocks.resp_p, step)


def solve_direct(system, blocks, rhs):
    """Joint impulses of all joints at once: ``(S J M^-1 J^T + A) dlambda = -rhs``.

    Args:
        system: PBDSystem.
        blocks: JointBlocks.
        rhs: Scaled row errors plus compliance terms, shape (..., n, 6).

    Returns:
        ``(dlambda, delta_child, delta_parent)``, each (..., n, 6): the impulses and the
        generalized displacements ``(dx, dtheta)`` they give each joint's two particles.
    """
    return _solve_factored(system, blocks, _factor_direct(system, blocks), rhs)


def project_direct(system, blocks, pos, phi, iterations):
    """Direct solver: the exact linearized projection of all joints at once.

    Builds the 6n x 6n system of all joint rows from the per-joint blocks and factorizes it
    once per substep, so every row is satisfied to first order at once (no Gauss-Seidel or
    Jacobi convergence error); ``iterations`` quasi-Newton iterations (same factors, errors
    re-evaluated) handle the nonlinearity.

    Args:
        system: PBDSystem.
        blocks: JointBlocks of this substep.
        pos: Predicted COM positions [m], shape (..., N, 3).
        phi: Predicted rotation vectors since the substep start [rad], shape (..., N, 3).
        iterations: Newton iterations.

    Returns:
        ``(pos, phi)`` after projection.
    """
    factors = _factor_direct(system, blocks)
    lam = torch.zeros_like(blocks.free)
    for _ in range(iterations):
        errors, displacement = joint_errors(system, blocks, pos, phi)
        step, delta_c, delta_p = _solve_factored(system, blocks, factors, row_rhs(blocks, errors, displacement, lam))
        lam = lam + step
        pos, phi = apply_displacements(system, pos, phi, delta_c, delta_p)
    return pos, phi
