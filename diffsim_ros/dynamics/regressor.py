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

The regressor is computed by one compiled kernel (numba, :func:`regressor_array`, kernel family
``rigid``): microseconds per sample where torch paid milliseconds of dispatch per call, which the
streaming estimator pays ten times a second; :func:`joint_torque_regressor` is its torch face.
"""

import numpy as np
import torch

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.derivatives import rnea_values_into, rnea_work
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.dynamics.rnea import body_inertials
from diffsim_ros.model.inertia import inertia_from_vector

__all__ = ["INERTIAL_PARAMETERS", "inertial_parameters", "joint_torque_regressor", "link_parameters", "regressor_array",
           "regressor_rnea", "regressor_torques"]

INERTIAL_PARAMETERS = ("m", "mcx", "mcy", "mcz", "ixx", "ixy", "iyy", "ixz", "iyz", "izz")
"""Names of a body's ten inertial parameters, in the regressor's column order."""
_I6 = ((0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2))  # the order of a symmetric inertia's six entries


@njit(cache=True)
def _body_columns(w, v, al, a, torque, force):
    """Maps (3, 10) of a body's inertial parameters to its net torque about its origin and its force, body axes.

    With ``h = m c``: ``n = I al + h x a + w x (I w + h x v) + v x (m v - h x w)`` and
    ``f = m a - h x al + w x (m v - h x w)``, linear in ``(m, h, I)``; for the ``h`` columns
    ``skew(x) skew(y) = y x^T - (x . y) 1``.
    """
    torque[:, :] = 0.0
    force[:, :] = 0.0
    force[0, 0] = a[0] + w[1] * v[2] - w[2] * v[1]
    force[1, 0] = a[1] + w[2] * v[0] - w[0] * v[2]
    force[2, 0] = a[2] + w[0] * v[1] - w[1] * v[0]
    ww = w[0] * w[0] + w[1] * w[1] + w[2] * w[2]
    for r in range(3):
        for c in range(3):
            force[r, 1 + c] = w[r] * w[c] - (ww if r == c else 0.0)  # skew(al) + skew(w)^2
            torque[r, 1 + c] = w[r] * v[c] - v[r] * w[c]  # - skew(a) - skew(w) skew(v) + skew(v) skew(w)
    force[0, 2] -= al[2]
    force[0, 3] += al[1]
    force[1, 1] += al[2]
    force[1, 3] -= al[0]
    force[2, 1] -= al[1]
    force[2, 2] += al[0]
    torque[0, 2] += a[2]
    torque[0, 3] -= a[1]
    torque[1, 1] -= a[2]
    torque[1, 3] += a[0]
    torque[2, 1] += a[1]
    torque[2, 2] -= a[0]
    for k in range(6):  # I al + w x (I w), with I x = L(x) [I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]
        r, c = _I6[k]
        e_al = (al[c], al[r])
        e_w = (w[c], w[r])
        torque[r, 4 + k] += e_al[0]
        lw0, lw1, lw2 = 0.0, 0.0, 0.0  # L(w)[:, k]
        if r == 0:
            lw0 += e_w[0]
        elif r == 1:
            lw1 += e_w[0]
        else:
            lw2 += e_w[0]
        if r != c:
            torque[c, 4 + k] += e_al[1]
            if c == 1:
                lw1 += e_w[1]
            else:
                lw2 += e_w[1]
        torque[0, 4 + k] += w[1] * lw2 - w[2] * lw1
        torque[1, 4 + k] += w[2] * lw0 - w[0] * lw2
        torque[2, 4 + k] += w[0] * lw1 - w[1] * lw0


@njit(cache=True)
def _move_to_parent(rot, pos, torque, force):
    """Columns (3, 10) of a body's torque and force expressed about its parent's origin, parent axes."""
    for k in range(torque.shape[1]):
        f0 = rot[0, 0] * force[0, k] + rot[0, 1] * force[1, k] + rot[0, 2] * force[2, k]
        f1 = rot[1, 0] * force[0, k] + rot[1, 1] * force[1, k] + rot[1, 2] * force[2, k]
        f2 = rot[2, 0] * force[0, k] + rot[2, 1] * force[1, k] + rot[2, 2] * force[2, k]
        t0 = rot[0, 0] * torque[0, k] + rot[0, 1] * torque[1, k] + rot[0, 2] * torque[2, k]
        t1 = rot[1, 0] * torque[0, k] + rot[1, 1] * torque[1, k] + rot[1, 2] * torque[2, k]
        t2 = rot[2, 0] * torque[0, k] + rot[2, 1] * torque[1, k] + rot[2, 2] * torque[2, k]
        force[0, k], force[1, k], force[2, k] = f0, f1, f2
        torque[0, k] = t0 + pos[1] * f2 - pos[2] * f1
        torque[1, k] = t1 + pos[2] * f0 - pos[0] * f2
        torque[2, k] = t2 + pos[0] * f1 - pos[1] * f0


@njit(cache=True)
def _regressor_into(fk, up, q, qd, qdd, out):
    """Regressor of samples ``q, qd, qdd`` (N, n) into ``out`` (N, n, n, 10).

    Per sample one compiled RNEA forward sweep with zero inertials gives the body motions
    (:func:`~diffsim_ros.dynamics.derivatives.rnea_values_into`); every body's ten columns are
    then moved up the chain to the joints that carry them.
    """
    parents, _, _, axis, is_revolute = fk
    n = q.shape[1]
    work = rnea_work(n)
    mass, h, inertia, tau = np.zeros(n), np.zeros((n, 3)), np.zeros((n, 3, 3)), np.empty(n)
    torque, force = np.empty((3, 10)), np.empty((3, 10))
    out[:] = 0.0
    for s in range(q.shape[0]):
        rnea_values_into(fk, mass, h, inertia, up, q[s], qd[s], qdd[s], work, tau)
        for j in range(n):
            _body_columns(work.omega[j], work.vel[j], work.alpha[j], work.acc[j], torque, force)
            i = j
            while i >= 0:
                carried = torque if is_revolute[i] else force
                for k in range(10):
                    out[s, i, j, k] = axis[i, 0] * carried[0, k] + axis[i, 1] * carried[1, k] + axis[i, 2] * carried[2, k]
                if parents[i] >= 0:
                    _move_to_parent(work.rot_local[i], work.pos_local[i], torque, force)
                i = parents[i]


def regressor_array(fast, q, qd, qdd):
    """The joint-torque regressor on numpy samples (what :func:`joint_torque_regressor` computes).

    Args:
        fast: :class:`~diffsim_ros.dynamics.fast.FastDynamics` snapshot of the model (its
            kinematics and gravity are read; its inertials are not).
        q, qd, qdd: Joint positions [rad or m], velocities, accelerations, broadcastable to (..., n).

    Returns:
        float64, shape (..., n, n, 10), as :func:`joint_torque_regressor`.
    """
    n = fast.nq
    q, qd, qdd = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (q, qd, qdd)))
    if q.shape[-1:] != (n,):
        raise ValueError(f"expected joint vectors of shape (..., {n}), got {q.shape}")
    rows = [np.ascontiguousarray(x.reshape(-1, n)) for x in (q, qd, qdd)]
    out = np.empty((rows[0].shape[0], n, n, len(INERTIAL_PARAMETERS)))
    _regressor_into(fast.fk, fast.up, *rows, out)
    return out.reshape(q.shape + (n, len(INERTIAL_PARAMETERS)))


def joint_torque_regressor(model, q, qd, qdd):
    """``Y`` with ``rnea(model, q, qd, qdd) = (Y * inertial_parameters(model)).sum((-2, -1))``.

    Compiled (:func:`regressor_array`): the regressor is data, computed once per recording or
    chunk of samples, and not differentiable in its inputs (inputs that require a gradient
    while gradients are recorded are refused).

    Args:
        model: RobotModel (its kinematics and gravity; its inertial parameters are not read).
        q: Joint positions [rad or m], shape (..., n).
        qd: Joint velocities, shape (..., n).
        qdd: Joint accelerations, shape (..., n).

    Returns:
        Shape (..., n, n, 10), dtype and device of ``q``: ``Y[..., i, j, k]`` is joint i's torque
        [N·m or N] per unit of body j's parameter k (:data:`INERTIAL_PARAMETERS`); zero where j is
        not moved by i.

    Raises:
        ValueError: An input or the joint origins require a gradient while gradients are recorded.
    """
    q, qd, qdd = torch.broadcast_tensors(joint_tensor(model, "q", q), joint_tensor(model, "qd", qd),
                                         joint_tensor(model, "qdd", qdd))
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, qd, qdd, model.params.joint_origin_xyz)):
        raise ValueError("joint_torque_regressor is compiled and not differentiable: call it on data under "
                         "torch.no_grad() (differentiate dynamics.rnea for gradients in the kinematics)")
    y = regressor_array(FastDynamics.from_model(model), *(x.detach().cpu().numpy() for x in (q, qd, qdd)))
    return torch.from_numpy(y).to(dtype=q.dtype, device=q.device)


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


def regressor_rnea(regressor, model, qdd, parameters=None):
    """``rnea(model, q, qd, qdd)`` [N·m or N], shape (..., n), from the samples' regressor (..., n, n, 10):
    the inertial part ``Y pi`` and the joints' armature ``armature * qdd`` (linear too).

    ``parameters``: ``inertial_parameters(model)`` (n, 10) when the caller already holds them.
    """
    parameters = inertial_parameters(model) if parameters is None else parameters
    return regressor_torques(regressor, parameters) + model.params.armature * qdd
