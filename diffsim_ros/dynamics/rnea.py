"""Inverse dynamics: recursive Newton-Euler and the torques derived from it.

Equation of motion (rigid body part, Pinocchio's convention)::

    M(q) qdd + C(q, qd) qd + g(q) = tau

``rnea`` returns the left-hand side. Joint springs, damping and friction are separate terms
(:mod:`diffsim_ros.dynamics.passive`); a payload, when set, is part of the rigid body.
"""

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.kinematics import body_placements, joint_placements, motion_subspace
from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.model.inertia import inertia_from_vector

__all__ = [
    "body_inertials",
    "body_motions",
    "rnea",
    "gravity_torques",
    "nonlinear_effects",
    "coriolis_torques",
]


def body_inertials(model):
    """Spatial inertia terms of every body about its frame origin, payload included.

    Returns:
        ``(mass, h, inertia_o)``: mass [kg] shape (n,), first moment ``h = m c`` [kg·m] shape
        (n, 3), rotational inertia about the body origin [kg·m²] shape (n, 3, 3); body axes.
    """
    p = model.params
    mass = p.mass
    h = p.mass[:, None] * p.com
    eye = torch.eye(3, dtype=model.dtype, device=model.device)

    def point_inertia(m, c):
        return m[..., None, None] * ((c * c).sum(-1)[..., None, None] * eye - c[..., :, None] * c[..., None, :])

    inertia_o = inertia_from_vector(p.inertia) + point_inertia(p.mass, p.com)
    frame = model.frame(model.payload_frame)
    c_pay = matvec(frame.placement[:3, :3], p.payload_com) + frame.placement[:3, 3]
    one_hot = torch.zeros(model.nq, dtype=model.dtype, device=model.device)
    one_hot[frame.body] = 1.0
    m_pay = p.payload_mass * one_hot
    mass = mass + m_pay
    h = h + m_pay[:, None] * c_pay
    inertia_o = inertia_o + one_hot[:, None, None] * point_inertia(p.payload_mass, c_pay)
    return mass, h, inertia_o


def _apply_inertia(mass, h, inertia_o, omega, vel):
    """Spatial inertia times spatial motion: ``(I_o w + h x v, m v - h x w)``."""
    torque = matvec(inertia_o, omega) + torch.cross(h.expand_as(vel), vel, dim=-1)
    force = mass[..., None] * vel - torch.cross(h.expand_as(omega), omega, dim=-1)
    return torque, force


def body_motions(model, q, qd, qdd, gravity, placements=None):
    """Spatial velocity and acceleration of every body in its own frame (RNEA's forward pass).

    Args:
        model: RobotModel.
        q, qd, qdd: Joint positions, velocities, accelerations, shape (..., n), validated.
        gravity: Gravity [m/s²], shape (3,) (the root's acceleration is ``-gravity``), or None.
        placements: ``joint_placements(model, q)`` when the caller has them.

    Returns:
        ``(omega, vel, alpha, acc)``: lists of n tensors of shape (..., 3): angular velocity
        [rad/s], linear velocity of the frame origin [m/s], angular acceleration [rad/s²] and
        linear (spatial) acceleration [m/s²] of each body, body axes.
    """
    rot, pos = joint_placements(model, q) if placements is None else placements
    e = rot.transpose(-1, -2)  # parent -> child coordinates
    s_ang, s_lin = motion_subspace(model)
    zeros = torch.zeros_like(pos[..., 0, :])
    root_acc = zeros if gravity is None else zeros - gravity
    omegas, vels, alphas, accs = [], [], [], []
    for i, parent in enumerate(model.parents):
        e_i, r_i = e[..., i, :, :], pos[..., i, :]
        dq, ddq = qd[..., i, None], qdd[..., i, None]
        if parent < 0:
            w_p, v_p, al_p, a_p = zeros, zeros, zeros, root_acc
        else:
            w_p, v_p, al_p, a_p = omegas[parent], vels[parent], alphas[parent], accs[parent]
        sa_dq, sl_dq = s_ang[i] * dq, s_lin[i] * dq
        w = matvec(e_i, w_p) + sa_dq
        v = matvec(e_i, v_p + torch.cross(w_p, r_i, dim=-1)) + sl_dq
        al = matvec(e_i, al_p) + s_ang[i] * ddq + torch.cross(w, sa_dq, dim=-1)
        a = (matvec(e_i, a_p + torch.cross(al_p, r_i, dim=-1)) + s_lin[i] * ddq + torch.cross(w, sl_dq, dim=-1)
             + torch.cross(v, sa_dq, dim=-1))
        omegas.append(w)
        vels.append(v)
        alphas.append(al)
        accs.append(a)
    return omegas, vels, alphas, accs


def _rnea(model, q, qd, qdd, gravity):
    """Recursive Newton-Euler in body frames; ``gravity`` (3,) or None for no gravity."""
    rot, pos = joint_placements(model, q)
    s_ang, s_lin = motion_subspace(model)
    mass, h, inertia_o = body_inertials(model)
    torques, forces = [], []
    for i, (w, v, al, a) in enumerate(zip(*body_motions(model, q, qd, qdd, gravity, (rot, pos)))):
        n_a, f_a = _apply_inertia(mass[i], h[i], inertia_o[i], al, a)
        n_v, f_v = _apply_inertia(mass[i], h[i], inertia_o[i], w, v)
        torques.append(n_a + torch.cross(w, n_v, dim=-1) + torch.cross(v, f_v, dim=-1))
        forces.append(f_a + torch.cross(w, f_v, dim=-1))

    tau = [None] * model.nq
    for i in reversed(range(model.nq)):
        tau[i] = (torques[i] * s_ang[i]).sum(-1) + (forces[i] * s_lin[i]).sum(-1)
        parent = model.parents[i]
        if parent >= 0:
            f_parent = matvec(rot[..., i, :, :], forces[i])
            n_parent = matvec(rot[..., i, :, :], torques[i])
            forces[parent] = forces[parent] + f_parent
            torques[parent] = torques[parent] + n_parent + torch.cross(pos[..., i, :], f_parent, dim=-1)
    return torch.stack(tau, dim=-1)


def rnea(model, q, qd, qdd):
    """Rigid-body inverse dynamics ``(M(q) + diag(armature)) qdd + C(q, qd) qd + g(q)``.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).
        qd: Joint velocities [rad/s or m/s], shape (..., n).
        qdd: Joint accelerations [rad/s² or m/s²], shape (..., n).

    Returns:
        Joint torques/forces [N·m or N], shape (..., n) (leading shapes broadcast).
    """
    q = joint_tensor(model, "q", q)
    qd = joint_tensor(model, "qd", qd)
    qdd = joint_tensor(model, "qdd", qdd)
    q, qd, qdd = torch.broadcast_tensors(q, qd, qdd)
    return _rnea(model, q, qd, qdd, model.gravity) + model.params.armature * qdd


def nonlinear_effects(model, q, qd):
    """Bias torques ``C(q, qd) qd + g(q)`` [N·m], shape (..., n)."""
    q = joint_tensor(model, "q", q)
    qd = joint_tensor(model, "qd", qd)
    q, qd = torch.broadcast_tensors(q, qd)
    return _rnea(model, q, qd, torch.zeros_like(qd), model.gravity)


def coriolis_torques(model, q, qd):
    """Coriolis and centrifugal torques ``C(q, qd) qd`` [N·m], shape (..., n)."""
    q = joint_tensor(model, "q", q)
    qd = joint_tensor(model, "qd", qd)
    q, qd = torch.broadcast_tensors(q, qd)
    return _rnea(model, q, qd, torch.zeros_like(qd), None)


def gravity_torques(model, q):
    """Generalized gravity ``g(q)`` [N·m]: the joint torques that hold ``q`` against gravity.

    Vectorized over bodies (no recursion): ``g_j = z_j . ((sum_k m_k c_k - M_j p_j) x (-g))``
    over the bodies k that joint j moves, which is much faster than RNEA when batched.

    Args:
        model: RobotModel.
        q: Joint positions, shape (..., n).

    Returns:
        Shape (..., n).
    """
    q = joint_tensor(model, "q", q)
    rot, pos = body_placements(model, q)
    mass, h, _ = body_inertials(model)
    s_ang, s_lin = motion_subspace(model)
    first_moment = mass[:, None] * pos + matvec(rot, h)  # world m_k c_k, (..., n, 3)
    support_t = model.support.transpose(0, 1)  # [j, k]
    moment_sub = support_t @ first_moment  # sum over bodies moved by j
    mass_sub = support_t @ mass  # (n,)
    up = -model.gravity
    lever = moment_sub - mass_sub[:, None] * pos
    rev = (matvec(rot, s_ang) * torch.cross(lever, up.expand_as(lever), dim=-1)).sum(-1)
    pris = (matvec(rot, s_lin) * up).sum(-1) * mass_sub
    return rev + pris
