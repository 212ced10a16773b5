"""Joint-space mass matrix, vectorized over bodies through their Jacobians."""

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.kinematics import body_placements, motion_subspace
from diffsim_ros.dynamics.rnea import body_inertials
from diffsim_ros.dynamics.spatial import matvec, skew

__all__ = ["mass_matrix", "crba"]


def mass_matrix(model, q):
    """Joint-space inertia matrix ``M(q)`` with the joints' armature on its diagonal (Pinocchio's
    ``crba``, full symmetric matrix).

    Computed from the kinetic energy of each body about its frame origin,
    ``M = sum_k m Jv^T Jv + Jw^T I_o Jw + Jw^T [h]x Jv - Jv^T [h]x Jw`` (world axes), which
    stays exact for massless bodies and needs no recursion: all bodies in a few batched ops.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).

    Returns:
        M [kg·m² / kg], shape (..., n, n), symmetric positive definite.
    """
    q = joint_tensor(model, "q", q)
    rot, pos = body_placements(model, q)
    mass, h, inertia_o = body_inertials(model)
    s_ang, s_lin = motion_subspace(model)
    z_ang = matvec(rot, s_ang)  # (..., n_j, 3)
    z_lin = matvec(rot, s_lin)
    support = model.support[..., None]  # (k, j, 1)
    lever = pos[..., :, None, :] - pos[..., None, :, :]  # (..., k, j, 3): p_k - p_j
    z_ang_kj = z_ang[..., None, :, :].expand_as(lever)
    j_lin = support * (torch.cross(z_ang_kj, lever, dim=-1) + z_lin[..., None, :, :])
    j_ang = support * z_ang_kj
    h_world = matvec(rot, h)
    inertia_world = rot @ inertia_o @ rot.transpose(-1, -2)
    m = torch.einsum("...kia,...kja,k->...ij", j_lin, j_lin, mass)
    m = m + torch.einsum("...kia,...kab,...kjb->...ij", j_ang, inertia_world, j_ang)
    coupling = torch.einsum("...kia,...kab,...kjb->...ij", j_ang, skew(h_world), j_lin)
    return m + coupling + coupling.transpose(-1, -2) + torch.diag_embed(model.params.armature)


crba = mass_matrix
