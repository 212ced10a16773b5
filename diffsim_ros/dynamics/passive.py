"""Passive joint elements: spring elements, viscous damping and Coulomb friction.

Each function returns the generalized force the element exerts *on* the joints, to be added
to the applied torque: ``M qdd + C qd + g = tau + passive_torques(q, qd)``.
"""

import math

import torch

from diffsim_ros.dynamics.checks import joint_tensor

__all__ = [
    "DEFAULT_FRICTION_VELOCITY_SCALE",
    "spring_lengths",
    "spring_potential_energy",
    "spring_torques",
    "damping_torques",
    "friction_torques",
    "passive_torques",
]

DEFAULT_FRICTION_VELOCITY_SCALE = 1e-2
"""Velocity [rad/s] over which the smoothed Coulomb friction reaches 76 % (tanh(1)) of its value."""


def _spring_angles(model, q):
    """Law-of-cosines angle ``pi - alpha1 - alpha2 + theta`` of every spring, shape (..., s)."""
    p = model.params
    theta = q[..., list(model.spring_joints)]
    return math.pi - p.spring_alpha1 - p.spring_offset + theta


def spring_lengths(model, q):
    """Spring lengths ``x(theta)`` [m], shape (..., s)."""
    q = joint_tensor(model, "q", q)
    p = model.params
    phi = _spring_angles(model, q)
    return torch.sqrt(p.spring_l1**2 + p.spring_l2**2 - 2.0 * p.spring_l1 * p.spring_l2 * torch.cos(phi))


def spring_potential_energy(model, q):
    """Total elastic energy ``sum 0.5 k (x - x_rest)^2`` [J], shape (...)."""
    p = model.params
    stretch = spring_lengths(model, q) - p.spring_rest_length
    return (0.5 * p.spring_stiffness * stretch**2).sum(-1)


def spring_torques(model, q):
    """Spring torques ``-dV/dtheta`` [N·m] on every joint (zero where there is no spring).

    Args:
        model: RobotModel.
        q: Joint positions [rad], shape (..., n).

    Returns:
        Shape (..., n).
    """
    q = joint_tensor(model, "q", q)
    p = model.params
    if not model.spring_joints:
        return torch.zeros_like(q)
    phi = _spring_angles(model, q)
    length = torch.sqrt(p.spring_l1**2 + p.spring_l2**2 - 2.0 * p.spring_l1 * p.spring_l2 * torch.cos(phi))
    dlength = p.spring_l1 * p.spring_l2 * torch.sin(phi) / length
    torque = -p.spring_stiffness * (length - p.spring_rest_length) * dlength
    index = torch.tensor(model.spring_joints, device=q.device)
    return torch.zeros_like(q).index_add(-1, index, torque.expand(*q.shape[:-1], len(model.spring_joints)))


def damping_torques(model, qd):
    """Viscous damping ``-b qd`` [N·m], shape (..., n)."""
    qd = joint_tensor(model, "qd", qd)
    return -model.params.damping * qd


def friction_torques(model, qd, friction_velocity_scale=DEFAULT_FRICTION_VELOCITY_SCALE):
    """Smoothed Coulomb friction ``-mu tanh(qd / v_s)`` [N·m], shape (..., n).

    The tanh keeps the torque differentiable and bounded by ``mu``; as ``v_s -> 0`` it tends
    to ``-mu sign(qd)``.
    """
    qd = joint_tensor(model, "qd", qd)
    return -model.params.friction * torch.tanh(qd / friction_velocity_scale)


def passive_torques(model, q, qd, friction_velocity_scale=DEFAULT_FRICTION_VELOCITY_SCALE):
    """Springs + damping + friction [N·m], shape (..., n)."""
    return (
        spring_torques(model, q)
        + damping_torques(model, qd)
        + friction_torques(model, qd, friction_velocity_scale)
    )
