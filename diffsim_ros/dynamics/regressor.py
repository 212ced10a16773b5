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
from diffsim_ros.dynamics.rnea import body_inertials, body_motions
from diffsim_ros.dynamics.spatial import skew
from diffsim_ros.model.inertia import inertia_from_vector

__all__ = ["INERTIAL_PARAMETERS", "inertial_parameters", "joint_torque_regressor", "link_parameters", "regressor_rnea",
           "regressor_torques"]

INERTIAL_PARAMETERS = ("m", "mcx", "mcy", "mcz", "ixx", "ixy", "iyy", "ixz", "iyz", "izz")
"""Names of a body's ten inertial parameters, in the regressor's column order."""


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
    motions = body_motions(model, q, qd, qdd, model.gravity, (rot, pos))
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


def _ordered(mass, h, inertia_o):
    """``(m, h, I_o)`` (..., ), (..., 3), (..., 3, 3) -> (..., 10) in :data:`INERTIAL_PARAMETERS` order."""
    i = inertia_o
    rotational = torch.stack([i[..., 0, 0], i[..., 0, 1], i[..., 1, 1], i[..., 0, 2], i[..., 1, 2], i[..., 2, 2]], -1)
    return torch.cat([mass[..., None], h, rotational], -1)


def inertial_parameters(model):
    """Every body's ten inertial parameters, payload included, shape (n, 10) (:data:`INERTIAL_PARAMETERS`)."""
    return _ordered(*body_inertials(model))


def link_parameters(mass, com, inertia):
    """Ten inertial parameters of links given as URDF inertials (differentiable).

    Args:
        mass: [kg], shape (...,).
        com: Centre of mass in the link frame [m], shape (..., 3).
        inertia: Inertia about the COM, link axes [kg·m²], shape (..., 6) ``[ixx ixy ixz iyy iyz izz]``.

    Returns:
        Shape (..., 10), :data:`INERTIAL_PARAMETERS` order (rotational inertia about the link origin).
    """
    eye = torch.eye(3, dtype=com.dtype, device=com.device)
    shift = mass[..., None, None] * ((com * com).sum(-1)[..., None, None] * eye - com[..., :, None] * com[..., None, :])
    return _ordered(mass, mass[..., None] * com, inertia_from_vector(inertia) + shift)


def regressor_torques(regressor, parameters):
    """Joint torques ``Y pi`` [N·m or N], shape (..., n), of a regressor (..., n, n, 10) and parameters (n, 10).

    One matrix-vector product (forward-mode tangents of ``parameters`` make it a matrix product).
    """
    flat = regressor.reshape(regressor.shape[:-2] + (-1,))
    return flat @ parameters.reshape(-1)


def regressor_rnea(regressor, model, qdd):
    """``rnea(model, q, qd, qdd)`` [N·m or N], shape (..., n), from the samples' regressor (..., n, n, 10):
    the inertial part ``Y pi`` and the joints' armature ``armature * qdd`` (linear too)."""
    return regressor_torques(regressor, inertial_parameters(model)) + model.params.armature * qdd
