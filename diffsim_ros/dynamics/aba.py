"""Forward dynamics: the articulated-body algorithm (Featherstone), 6-D spatial form."""

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.kinematics import joint_placements, motion_subspace
from diffsim_ros.dynamics.passive import passive_torques
from diffsim_ros.dynamics.rnea import body_inertials
from diffsim_ros.dynamics.spatial import matvec, skew

__all__ = ["aba", "forward_dynamics"]


def _motion_transforms(rot, pos):
    """6x6 motion transforms parent -> child, ``[[E, 0], [-E [r]x, E]]``, shape (..., n, 6, 6)."""
    e = rot.transpose(-1, -2)
    lower_left = -e @ skew(pos)
    top = torch.cat([e, torch.zeros_like(e)], dim=-1)
    return torch.cat([top, torch.cat([lower_left, e], dim=-1)], dim=-2)


def _spatial_inertias(model):
    """Body spatial inertias about the frame origin, ``[[I_o, [h]x], [-[h]x, m 1]]``, (n, 6, 6)."""
    mass, h, inertia_o = body_inertials(model)
    hx = skew(h)
    eye = torch.eye(3, dtype=model.dtype, device=model.device)
    top = torch.cat([inertia_o, hx], dim=-1)
    return torch.cat([top, torch.cat([-hx, mass[:, None, None] * eye], dim=-1)], dim=-2)


def _cross_motion(v, m):
    """Spatial motion cross product ``v x m`` for 6-vectors [w; v]."""
    w, lin = v[..., :3], v[..., 3:]
    return torch.cat([torch.cross(w, m[..., :3], dim=-1), torch.cross(w, m[..., 3:], dim=-1) + torch.cross(lin, m[..., :3], dim=-1)], dim=-1)


def _cross_force(v, f):
    """Spatial force cross product ``v x* f`` for a motion [w; v] and a force [n; f]."""
    w, lin = v[..., :3], v[..., 3:]
    return torch.cat([torch.cross(w, f[..., :3], dim=-1) + torch.cross(lin, f[..., 3:], dim=-1), torch.cross(w, f[..., 3:], dim=-1)], dim=-1)


def _aba(model, q, qd, tau, armature=None):
    rot, pos = joint_placements(model, q)
    xs = _motion_transforms(rot, pos)
    s_ang, s_lin = motion_subspace(model)
    subspace = torch.cat([s_ang, s_lin], dim=-1)  # (n, 6)
    inertias = _spatial_inertias(model)
    n = model.nq
    batch = q.shape[:-1]

    vel, bias, art_inertia, art_force = [], [], [], []
    for i, parent in enumerate(model.parents):
        s_dq = subspace[i] * qd[..., i, None]
        v = s_dq if parent < 0 else matvec(xs[..., i, :, :], vel[parent]) + s_dq
        vel.append(v)
        bias.append(_cross_motion(v, s_dq))
        art_inertia.append(inertias[i].expand(*batch, 6, 6))
        art_force.append(_cross_force(v, matvec(inertias[i], v)))

    u_vec, d_inv, u_scalar = [None] * n, [None] * n, [None] * n
    for i in reversed(range(n)):
        u_vec[i] = matvec(art_inertia[i], subspace[i].expand(*batch, 6))
        d_i = (u_vec[i] * subspace[i]).sum(-1)
        d_i = d_i + model.params.armature[i]  # the rotor's reflected inertia acts on the joint's own axis
        d_inv[i] = 1.0 / (d_i if armature is None else d_i + armature[..., i])
        u_scalar[i] = tau[..., i] - (art_force[i] * subspace[i]).sum(-1)
        parent = model.parents[i]
        if parent >= 0:
            x_t = xs[..., i, :, :].transpose(-1, -2)
            reduced = art_inertia[i] - d_inv[i][..., None, None] * u_vec[i][..., :, None] * u_vec[i][..., None, :]
            pa = art_force[i] + matvec(reduced, bias[i]) + u_vec[i] * (d_inv[i] * u_scalar[i])[..., None]
            art_inertia[parent] = art_inertia[parent] + x_t @ reduced @ xs[..., i, :, :]
            art_force[parent] = art_force[parent] + matvec(x_t, pa)

    root = torch.cat([torch.zeros_like(model.gravity), -model.gravity]).expand(*batch, 6)
    acc, qdd = [None] * n, [None] * n
    for i, parent in enumerate(model.parents):
        a = matvec(xs[..., i, :, :], root if parent < 0 else acc[parent]) + bias[i]
        qdd[i] = d_inv[i] * (u_scalar[i] - (u_vec[i] * a).sum(-1))
        acc[i] = a + subspace[i] * qdd[i][..., None]
    return torch.stack(qdd, dim=-1)


def aba(model, q, qd, tau, armature=None):
    """Rigid-body forward dynamics ``qdd = M^-1 (tau - C qd - g)`` by the articulated-body algorithm.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).
        qd: Joint velocities [rad/s or m/s], shape (..., n).
        tau: Joint torques/forces [N·m or N], shape (..., n).
        armature: Optional diagonal joint-space inertia added to M [kg·m² or kg], shape
            (..., n), on top of the model's own ``params.armature``:
            ``qdd = (M + diag(model armature + armature))^-1 (tau - C qd - g)`` (e.g. ``h B`` of
            an implicit damping step).

    Returns:
        Joint accelerations, shape (..., n) (leading shapes broadcast).
    """
    q = joint_tensor(model, "q", q)
    qd = joint_tensor(model, "qd", qd)
    tau = joint_tensor(model, "tau", tau)
    if armature is None:
        q, qd, tau = torch.broadcast_tensors(q, qd, tau)
        return _aba(model, q, qd, tau)
    armature = joint_tensor(model, "armature", armature)
    q, qd, tau, armature = torch.broadcast_tensors(q, qd, tau, armature)
    return _aba(model, q, qd, tau, armature)


def forward_dynamics(model, q, qd, tau, passive=False, friction_velocity_scale=None):
    """Forward dynamics, optionally with the joint springs, damping and friction added to ``tau``.

    Args:
        model: RobotModel.
        q: Joint positions, shape (..., n).
        qd: Joint velocities, shape (..., n).
        tau: Applied joint torques [N·m], shape (..., n).
        passive: Add :func:`~diffsim_ros.dynamics.passive.passive_torques` (springs, damping,
            smoothed Coulomb friction). False reproduces Pinocchio's ``aba``.
        friction_velocity_scale: Coulomb smoothing velocity [rad/s] when ``passive``.

    Returns:
        Joint accelerations, shape (..., n).
    """
    q = joint_tensor(model, "q", q)
    qd = joint_tensor(model, "qd", qd)
    tau = joint_tensor(model, "tau", tau)
    if passive:
        kwargs = {} if friction_velocity_scale is None else {"friction_velocity_scale": friction_velocity_scale}
        tau = tau + passive_torques(model, q, qd, **kwargs)
    q, qd, tau = torch.broadcast_tensors(q, qd, tau)
    return _aba(model, q, qd, tau)
