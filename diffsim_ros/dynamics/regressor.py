"""The joint-torque regressor: rigid-body inverse dynamics as a linear map of the inertial parameters.

Inverse dynamics is linear in each body's ten inertial parameters (Atkeson et al. 1986;
Pinocchio's ``computeJointTorqueRegressor``)::

    rnea(q, qd, qdd) = sum_j Y(q, qd, qdd)[:, j, :] @ pi_j

with ``pi_j = [m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`` of body j, the
rotational inertia taken about the body frame's origin, in body axes (Pinocchio's order). The
regressor depends on the kinematics only (joint placements, axes, gravity, the samples), not on
masses, COMs, inertias or the payload. Identification therefore computes it once per recording
and gets the torques, and their exact derivatives with respect to every inertial parameter,
from one matrix product per evaluation, instead of differentiating the recursion each time.
"""

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.kinematics import joint_placements, motion_subspace
from diffsim_ros.dynamics.rnea import body_inertials
from diffsim_ros.dynamics.spatial import matvec, skew

__all__ = ["INERTIAL_PARAMETERS", "body_motions", "inertial_parameters", "joint_torque_regressor", "regressor_torques"]

INERTIAL_PARAMETERS = ("m", "mcx", "mcy", "mcz", "ixx", "ixy", "iyy", "ixz", "iyz", "izz")
"""Names of a body's ten inertial parameters, in the regressor's column order."""


def body_motions(model, q, qd, qdd, gravity):
    """Spatial velocity and acceleration of every body in its own frame (RNEA's forward pass).

    Args:
        model: RobotModel.
        q, qd, qdd: Joint positions, velocities, accelerations, shape (..., n), validated.
        gravity: Gravity [m/s²], shape (3,) (the root's acceleration is ``-gravity``), or None.

    Returns:
        ``(omega, vel, alpha, acc)``: lists of n tensors of shape (..., 3): angular velocity
        [rad/s], linear velocity of the frame origin [m/s], angular acceleration [rad/s²] and
        linear (spatial) acceleration [m/s²] of each body, body axes.
    """
    rot, pos = joint_placements(model, q)
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


def _symmetric_map(x):
    """``L(x)`` (..., 3, 6) with ``I x = L(x) [I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`` for symmetric I."""
    x0, x1, x2 = x.unbind(-1)
    zero = torch.zeros_like(x0)
    return torch.stack([torch.stack([x0, x1, zero, x2, zero, zero], -1),
                        torch.stack([zero, x0, x1, zero, x2, zero], -1),
                        torch.stack([zero, zero, zero, x0, x1, x2], -1)], -2)


def _body_regressor(w, v, al, a):
    """``(torque, force)`` maps (..., 3, 10) of a body's inertial parameters to its net spatial force.

    The body's force about its origin is ``n = I al + h x a + w x (I w + h x v) + v x (m v - h x w)``
    and ``f = m a - h x al + w x (m v - h x w)``, with ``h = m c``: linear in ``(m, h, I)``.
    """
    sw, sv, sal, sa = skew(w), skew(v), skew(al), skew(a)
    zero3 = torch.zeros_like(a)
    f_m = a + torch.cross(w, v, dim=-1)
    f_h = sal + sw @ sw
    n_h = -sa - sw @ sv + sv @ sw
    n_i = _symmetric_map(al) + sw @ _symmetric_map(w)
    torque = torch.cat([zero3[..., None], n_h, n_i], -1)
    force = torch.cat([f_m[..., None], f_h, torch.zeros_like(n_i)], -1)
    return torque, force


def joint_torque_regressor(model, q, qd, qdd):
    """``Y`` with ``rnea(model, q, qd, qdd) = (Y * inertial_parameters(model)).sum((-2, -1))``.

    Args:
        model: RobotModel (its kinematics and gravity; its inertial parameters are not read).
        q: Joint positions [rad or m], shape (..., n).
        qd: Joint velocities, shape (..., n).
        qdd: Joint accelerations, shape (..., n).

    Returns:
        Shape (..., n, n, 10): ``Y[..., i, j, k]`` is joint i's torque [N·m or N] per unit of
        body j's parameter k (:data:`INERTIAL_PARAMETERS`); zero where j is not moved by i.
    """
    q, qd, qdd = torch.broadcast_tensors(joint_tensor(model, "q", q), joint_tensor(model, "qd", qd),
                                         joint_tensor(model, "qdd", qdd))
    rot, pos = joint_placements(model, q)
    s_ang, s_lin = motion_subspace(model)
    motions = body_motions(model, q, qd, qdd, model.gravity)
    y = q.new_zeros(q.shape + (model.nq, len(INERTIAL_PARAMETERS)))
    for j in range(model.nq):
        torque, force = _body_regressor(*(m[j] for m in motions))
        i = j
        while i >= 0:  # body j's force, moved up the chain to every joint that carries it
            y[..., i, j, :] = (s_ang[i][:, None] * torque).sum(-2) + (s_lin[i][:, None] * force).sum(-2)
            parent = model.parents[i]
            if parent >= 0:
                rot_i = rot[..., i, :, :]
                force = rot_i @ force
                torque = rot_i @ torque + torch.cross(pos[..., i, :, None].expand_as(force), force, dim=-2)
            i = parent
    return y


def inertial_parameters(model):
    """Every body's ten inertial parameters, payload included, shape (n, 10) (:data:`INERTIAL_PARAMETERS`)."""
    mass, h, inertia_o = body_inertials(model)
    i = inertia_o
    rotational = torch.stack([i[:, 0, 0], i[:, 0, 1], i[:, 1, 1], i[:, 0, 2], i[:, 1, 2], i[:, 2, 2]], -1)
    return torch.cat([mass[:, None], h, rotational], -1)


def regressor_torques(regressor, parameters):
    """Joint torques ``Y pi`` [N·m or N], shape (..., n), of a regressor (..., n, n, 10) and parameters (n, 10).

    One matrix-vector product (forward-mode tangents of ``parameters`` make it a matrix product).
    """
    flat = regressor.reshape(regressor.shape[:-2] + (-1,))
    return flat @ parameters.reshape(-1)
