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
    coupling_block,
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
            impulse = step[..., None, :]
            moves = blocks.child.select([j]).response(impulse), blocks.parent.select([j]).response(impulse)
            for k, delta in zip((c, p), moves):
                if k == 0 and system.fixed_base:  # a fixed base never moves
                    continue
                delta = delta[..., 0, :]
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
        pos, phi = apply_displacements(system, pos, phi, *blocks.responses(step))
    return pos, phi


def _couplings(blocks, pairs):
    """Off-diagonal blocks ``S_j J_j M^-1 J_k^T`` of ``(j, side_j, k, side_k)`` pairs, side 0 = child.

    Pairs with the same sides are computed together, as one batched block computation.
    """
    sides = (blocks.child, blocks.parent)
    out = [None] * len(pairs)
    for side_j in (0, 1):
        for side_k in (0, 1):
            group = [i for i, pair in enumerate(pairs) if pair[1] == side_j and pair[3] == side_k]
            if not group:
                continue
            rows = [pairs[i][0] for i in group]
            block = coupling_block(sides[side_j].select(rows), sides[side_k].select([pairs[i][2] for i in group]))
            block = blocks.scale_rows(block, rows)
            for position, i in enumerate(group):
                out[i] = block[..., position, :, :]
    return torch.stack(out, dim=-3)


def _factor_chain(system, blocks):
    """Block-tridiagonal (Thomas) factors of a serial chain's joint system.

    ``G_0 = A_00``, ``G_j = A_jj - A_j,j-1 G_j-1^-1 A_j-1,j``; only 6x6 blocks, linear in n
    (the dense LU of the whole 6n x 6n system is cubic and memory bound when batched).
    """
    n = system.joints.count
    diagonal = blocks.local_block().unbind(-3)
    if n == 1:
        return ("chain", [torch.linalg.inv(diagonal[0])], [], [])
    upper = _couplings(blocks, [(j, 0, j + 1, 1) for j in range(n - 1)]).unbind(-3)  # A_j,j+1
    lower = _couplings(blocks, [(j + 1, 1, j, 0) for j in range(n - 1)]).unbind(-3)  # A_j+1,j
    inverses, multipliers = [torch.linalg.inv(diagonal[0])], []
    for j in range(1, n):
        multiplier = lower[j - 1] @ inverses[-1]  # A_j,j-1 G_j-1^-1
        multipliers.append(multiplier)
        inverses.append(torch.linalg.inv(diagonal[j] - multiplier @ upper[j - 1]))
    return ("chain", inverses, multipliers, upper)


def _factor_direct(system, blocks):
    """Factors of the 6n x 6n system of all joint rows (block-tridiagonal or dense LU).

    Block (j, j) is the joint's own block; block (j, k) couples two joints through the
    particle they share, ``S_j J_j M^-1 J_k^T``. Only those blocks are formed.
    """
    joints = system.joints
    if joints.serial and system.fixed_base:
        return _factor_chain(system, blocks)
    n = joints.count
    diagonal = blocks.local_block()
    shape = diagonal.shape[:-3]
    blocks_flat = diagonal.new_zeros(*shape, n * n, 6, 6)
    index = torch.arange(n, device=diagonal.device) * (n + 1)
    blocks_flat = blocks_flat.index_add(-3, index, diagonal)
    if joints.couplings:
        position = torch.tensor([j * n + k for j, _, k, _ in joints.couplings], device=diagonal.device)
        blocks_flat = blocks_flat.index_add(-3, position, _couplings(blocks, joints.couplings))
    matrix = blocks_flat.unflatten(-3, (n, n)).transpose(-3, -2).reshape(*shape, 6 * n, 6 * n)
    return ("dense",) + tuple(torch.linalg.lu_factor(matrix))


def _solve_chain(factors, rhs):
    """Forward elimination and back substitution with :func:`_factor_chain` factors."""
    _, inverses, multipliers, upper = factors
    rows = rhs.unbind(-2)
    forward = [rows[0]]
    for j in range(1, len(rows)):
        forward.append(rows[j] - matvec(multipliers[j - 1], forward[-1]))
    solution = [matvec(inverses[-1], forward[-1])]
    for j in range(len(rows) - 2, -1, -1):
        solution.append(matvec(inverses[j], forward[j] - matvec(upper[j], solution[-1])))
    return torch.stack(solution[::-1], dim=-2)


def _solve_factored(system, blocks, factors, rhs):
    """Impulses (..., n, 6) and per-joint child/parent displacements for row rhs (..., n, 6)."""
    if factors[0] == "chain":
        step = -_solve_chain(factors, rhs)
    else:
        _, lu, pivots = factors
        step = -torch.linalg.lu_solve(lu, pivots, rhs.flatten(-2)[..., None])[..., 0].unflatten(-1, rhs.shape[-2:])
    return (step, *blocks.responses(step))


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
    once per substep (block-tridiagonal elimination for a serial chain, dense LU for a
    branched tree), so every row is satisfied to first order at once (no Gauss-Seidel or
    Jacobi convergence error); ``iterations`` quasi-Newton iterations (same factors, errors
    re-evaluated) handle the nonlinearity.

    Arguments and result as :func:`project_jacobi`, with ``iterations`` the Newton iterations.
    """
    factors = _factor_direct(system, blocks)
    lam = torch.zeros_like(blocks.free)
    for _ in range(iterations):
        errors, displacement = joint_errors(system, blocks, pos, phi)
        step, delta_c, delta_p = _solve_factored(system, blocks, factors, row_rhs(blocks, errors, displacement, lam))
        lam = lam + step
        pos, phi = apply_displacements(system, pos, phi, delta_c, delta_p)
    return pos, phi
