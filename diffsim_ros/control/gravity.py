"""Gravity compensation: the motor torque that holds the arm still, from the (calibrated) model.

The motor holding torque is ``g(q) - tau_spring(q)``: gravity of every body including the
payload, minus what the series-elastic springs already provide. It runs on
:class:`~diffsim_ros.dynamics.fast.FastDynamics` (compiled, microseconds per call).
"""

from diffsim_ros.control.errors import ControlError
from diffsim_ros.dynamics.fast import FastDynamics

__all__ = ["GravityCompensation", "holding_torques"]


def holding_torques(fast, q):
    """Motor torques [N·m] that hold configuration ``q`` [rad] at rest: g(q) - tau_spring(q), (n,).

    Args:
        fast: FastDynamics snapshot of the model.
        q: Joint positions [rad], shape (n,).
    """
    return fast.gravity_torques(q) - fast.spring_torques(q)


class GravityCompensation:
    """tau = scale * (g(q) - tau_spring(q)), on a snapshot of the model's parameters.

    Args:
        model: RobotModel (nominal or calibrated; payload and springs included).
        scale: Factor on the compensation (1 = full).

    Attributes:
        joint_names: Joint order of every input and output.
    """

    def __init__(self, model, scale=1.0):
        self.joint_names = tuple(model.joint_names)
        self.scale = float(scale)
        self.update_model(model)

    def update_model(self, model):
        """Use new parameter values (e.g. after an online calibration update)."""
        if tuple(model.joint_names) != self.joint_names:
            raise ControlError(f"model joints {list(model.joint_names)} differ from {list(self.joint_names)}")
        self.fast = FastDynamics.from_model(model)

    def reset(self):
        """Nothing to forget (stateless); part of the controller interface."""

    def compute(self, t, q, qd):
        """Torques [N·m], shape (n,), for time ``t`` [s], positions ``q`` [rad], velocities ``qd``."""
        return self.scale * holding_torques(self.fast, q)
