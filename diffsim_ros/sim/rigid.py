"""The rigid-body reference simulator: exact joint-space dynamics, implicit Euler or RK4."""

import torch

from diffsim_ros.dynamics.aba import aba, forward_dynamics
from diffsim_ros.dynamics.passive import DEFAULT_FRICTION_VELOCITY_SCALE, passive_torques
from diffsim_ros.dynamics.springs import spring_damping_split
from diffsim_ros.sim.base import JointSpaceSimulator

__all__ = ["RigidBodySimulator"]


class RigidBodySimulator(JointSpaceSimulator):
    """Exact rigid-body dynamics integrated in joint space: the reference simulator.

    ``"implicit_euler"`` (default) is semi-implicit Euler with the velocity-dependent passive
    terms (viscous damping, the slope of the smoothed Coulomb friction and the diagonal of the
    spring elements' damping) taken implicitly,
    ``(M + h B) qd+ = M qd + h (tau - nle + tau_passive)``, like MuJoCo's implicit damping:
    Baxter's joint damping on its light wrist links has time constants far below any
    practical step, so explicit schemes diverge there. ``"rk4"`` is explicit and suited to
    models without stiff damping.

    Args:
        model: RobotModel.
        dt: Control period [s].
        substeps: Integration substeps per control period.
        integrator: ``"implicit_euler"`` or ``"rk4"``.
        passive: Include springs, damping and smoothed Coulomb friction.
    """

    INTEGRATORS = ("implicit_euler", "rk4")

    def __init__(self, model, dt, substeps=1, integrator="implicit_euler", passive=True):
        super().__init__(model, dt)
        if integrator not in self.INTEGRATORS:
            raise ValueError(f"unknown integrator '{integrator}'; choose from {self.INTEGRATORS}")
        if int(substeps) < 1:
            raise ValueError(f"substeps must be >= 1, got {substeps}")
        self.substeps = int(substeps)
        self.integrator = integrator
        self.passive = passive

    def _implicit_euler(self, q, qd, tau, h):
        # (M + h B) is M with an armature h B: the articulated-body algorithm solves it in O(n)
        # without forming M (faster than RNEA + CRBA + a dense solve in torch).
        model = self.model
        if self.passive:
            slope = model.params.damping + model.params.friction / DEFAULT_FRICTION_VELOCITY_SCALE * (
                1.0 - torch.tanh(qd / DEFAULT_FRICTION_VELOCITY_SCALE) ** 2
            )
            if model.torsion_joints or model.point_springs:  # the diagonal of the springs' damping
                slope = slope + spring_damping_split(model, q, qd)[1]
            qdd = aba(model, q, qd, tau + passive_torques(model, q, qd), armature=h * slope)
        else:
            qdd = aba(model, q, qd, tau)
        qd = qd + h * qdd
        return q + h * qd, qd

    def _rk4(self, q, qd, tau, h):
        def accel(q_, qd_):
            return forward_dynamics(self.model, q_, qd_, tau, passive=self.passive)

        k1v, k1a = qd, accel(q, qd)
        k2v, k2a = qd + 0.5 * h * k1a, accel(q + 0.5 * h * k1v, qd + 0.5 * h * k1a)
        k3v, k3a = qd + 0.5 * h * k2a, accel(q + 0.5 * h * k2v, qd + 0.5 * h * k2a)
        k4v, k4a = qd + h * k3a, accel(q + h * k3v, qd + h * k3a)
        return q + h / 6.0 * (k1v + 2 * k2v + 2 * k3v + k4v), qd + h / 6.0 * (k1a + 2 * k2a + 2 * k3a + k4a)

    def joint_step(self, q, qd, tau):
        h = self.dt / self.substeps
        advance = self._implicit_euler if self.integrator == "implicit_euler" else self._rk4
        for _ in range(self.substeps):
            q, qd = advance(q, qd, tau, h)
        return q, qd
