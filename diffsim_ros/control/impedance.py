"""Joint impedance control (Liu et al., Eq. 28), with the model term analytic or from a torque map.

    tau = D (qd_d - qd) + K (q_d - q) + scale * model_term

with the model term

- ``"analytic"``: ``M(q) qdd_d + S(q, qd) qd + g(q) - tau_spring(q)``, i.e. the compiled RNEA
  at ``(q, qd, qdd_d)`` minus the springs' torque;
- ``"map"``: the net torque of a :class:`~diffsim_ros.control.torque_map.TorqueMap` that
  takes each joint from ``(q, qd)`` to the reference one map step ahead, ``q_d(t + dt)``;
- ``"gravity"``: ``g(q) - tau_spring(q)`` only (PD plus gravity compensation);
- ``"none"``: zero (PD only).

The paper uses ``scale`` = 1 in simulation and 0.6 on the real robot.
"""

import numpy as np

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.gravity import holding_torques
from diffsim_ros.control.vectors import per_joint
from diffsim_ros.dynamics.fast import FastDynamics

__all__ = ["MODEL_TERMS", "JointImpedanceController"]

MODEL_TERMS = ("analytic", "map", "gravity", "none")


class JointImpedanceController:
    """Per-joint impedance around a reference, plus a scaled model term.

    Args:
        model: RobotModel (the map, if any, must have been built for it).
        stiffness: K [N·m/rad], scalar, (n,) or ``{joint: value}``.
        damping: D [N·m·s/rad], same forms.
        reference: Callable ``reference(t) -> (q_d, qd_d, qdd_d)``, each (n,) [rad, rad/s, rad/s²]
            (see :mod:`diffsim_ros.control.references`).
        model_term: One of :data:`MODEL_TERMS`.
        model_scale: Factor on the model term.
        torque_map: TorqueMap, required for ``model_term="map"``.

    Raises:
        ControlError: Negative gains, an unknown model term, or a missing map.
        TorqueMapError: A map built for another model.
    """

    def __init__(self, model, stiffness, damping, reference, model_term="analytic", model_scale=1.0, torque_map=None):
        self.joint_names = tuple(model.joint_names)
        self.stiffness = per_joint(stiffness, self.joint_names, "impedance stiffness", 0.0)
        self.damping = per_joint(damping, self.joint_names, "impedance damping", 0.0)
        if np.any(self.stiffness < 0) or np.any(self.damping < 0):
            raise ControlError("impedance stiffness and damping must be >= 0")
        if model_term not in MODEL_TERMS:
            raise ControlError(f"unknown model term '{model_term}'; choose from {MODEL_TERMS}")
        if model_term == "map" and torque_map is None:
            raise ControlError("model_term='map' needs a torque_map")
        self.reference = reference
        self.model_term = model_term
        self.model_scale = float(model_scale)
        self.torque_map = torque_map
        self.update_model(model)

    def update_model(self, model):
        """Use new parameter values; a torque map must match them (else TorqueMapError)."""
        if tuple(model.joint_names) != self.joint_names:
            raise ControlError(f"model joints {list(model.joint_names)} differ from {list(self.joint_names)}")
        if self.torque_map is not None:
            self.torque_map.check_model(model)
        self.fast = FastDynamics.from_model(model)
        self._zero = np.zeros(len(self.joint_names))

    def reset(self):
        """Nothing to forget (stateless); part of the controller interface."""

    def model_torques(self, t, q, qd):
        """The unscaled model term [N·m], shape (n,), at time ``t`` [s]."""
        if self.model_term == "none":
            return self._zero
        if self.model_term == "gravity":
            return holding_torques(self.fast, q)
        if self.model_term == "analytic":
            _, _, qdd_d = self.reference(t)
            return self.fast.rnea(q, qd, qdd_d) - self.fast.spring_torques(q)
        q_next, _, _ = self.reference(t + self.torque_map.dt)
        return self.torque_map.torques(self.fast, q, qd, q_next)

    def compute(self, t, q, qd):
        """Torques [N·m], shape (n,), for time ``t`` [s], positions ``q`` [rad], velocities ``qd`` [rad/s]."""
        q = np.asarray(q, dtype=np.float64)
        qd = np.asarray(qd, dtype=np.float64)
        q_d, qd_d, _ = self.reference(t)
        feedback = self.stiffness * (q_d - q) + self.damping * (qd_d - qd)
        return feedback + self.model_scale * self.model_torques(t, q, qd)
