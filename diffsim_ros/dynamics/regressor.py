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

The regressor is computed by one compiled kernel (numba, kernel family ``rigid``):
:func:`~diffsim_ros.dynamics.derivatives.regressor_into`, which the rigid step's parameter
Jacobians (:mod:`~diffsim_ros.sim.rigid_fast`) call too; :func:`regressor_array` stacks it over
samples, microseconds per sample where torch paid milliseconds of dispatch per call, which the
streaming estimator pays ten times a second; :func:`joint_torque_regressor` is its torch face.
"""

import numpy as np
import torch

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.derivatives import INERTIAL_PARAMETERS, regressor_into, rnea_values_into, rnea_work
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.dynamics.rnea import body_inertials
from diffsim_ros.model.inertia import inertia_from_vector

__all__ = ["INERTIAL_PARAMETERS", "inertial_parameters", "inertial_vector", "joint_torque_regressor", "link_parameters",
           "regressor_array", "regressor_rnea", "regressor_torques"]


@njit(cache=True)
def _regressor_into(fk, up, q, qd, qdd, out):
    """Regressor of samples ``q, qd, qdd`` (N, n) into ``out`` (N, n, n, 10).

    Per sample one compiled RNEA sweep gives the body motions (its inertials are zero: the
    regressor does not depend on them); every body's ten columns come from the one regressor
    kernel, :func:`~diffsim_ros.dynamics.derivatives.regressor_into`.
    """
    n = q.shape[1]
    work = rnea_work(n)
    mass, h, inertia, tau = np.zeros(n), np.zeros((n, 3)), np.zeros((n, 3, 3)), np.empty(n)
    every_body = np.ones(n, dtype=np.int64)
    for s in range(q.shape[0]):
        rnea_values_into(fk, mass, h, inertia, up, q[s], qd[s], qdd[s], work, tau)
        regressor_into(fk, work, every_body, out[s])


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


def inertial_vector(mass, h, inertia_o):
    """Ten inertial parameters (..., 10), :data:`INERTIAL_PARAMETERS` order, of ``(m, h, I_o)``.

    Args:
        mass: [kg], shape (...,).
        h: First moment ``m c`` [kg·m], shape (..., 3).
        inertia_o: Symmetric rotational inertia about the body origin [kg·m²], shape (..., 3, 3).
    """
    i = inertia_o
    rotational = torch.stack([i[..., 0, 0], i[..., 0, 1], i[..., 1, 1], i[..., 0, 2], i[..., 1, 2], i[..., 2, 2]], -1)
    return torch.cat([mass[..., None], h, rotational], -1)


def inertial_parameters(model):
    """Every body's ten inertial parameters, payload included, shape (n, 10) (:data:`INERTIAL_PARAMETERS`)."""
    return inertial_vector(*body_inertials(model))


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
    return inertial_vector(mass, mass[..., None] * com, inertia_from_vector(inertia) + shift)


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
