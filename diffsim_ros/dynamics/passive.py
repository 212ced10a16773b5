"""Passive joint elements: viscous damping, Coulomb friction, and their sum with the springs (:mod:`.springs`).

Each function returns the generalized force the element exerts *on* the joints, to be added
to the applied torque: ``M qdd + C qd + g = tau + passive_torques(q, qd)``.
"""

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.springs import spring_torques

__all__ = [
    "DEFAULT_FRICTION_VELOCITY_SCALE",
    "damping_torques",
    "friction_torques",
    "passive_torques",
]

DEFAULT_FRICTION_VELOCITY_SCALE = 1e-2
"""Velocity [rad/s] over which the smoothed Coulomb friction reaches 76 % (tanh(1)) of its value."""


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
    """Springs (with their damping) + joint damping + friction [N·m], shape (..., n)."""
    return (
        spring_torques(model, q, qd)
        + damping_torques(model, qd)
        + friction_torques(model, qd, friction_velocity_scale)
    )
