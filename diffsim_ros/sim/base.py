"""Joint-space simulator interface shared by every simulator, and the rigid-body reference.

Identification, torque maps and MPC work through :class:`JointSpaceSimulator`, so they can
select the PBD simulator or the exact rigid-body integrator without changing code.
"""

import abc

import torch

from diffsim_ros.dynamics.aba import aba, forward_dynamics
from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.passive import DEFAULT_FRICTION_VELOCITY_SCALE, passive_torques, spring_damping_split
from diffsim_ros.sim.checkpointing import checkpoint_block

__all__ = ["JointSpaceSimulator", "RigidBodySimulator"]


class JointSpaceSimulator(abc.ABC):
    """A differentiable simulator seen in joint space.

    Attributes:
        model: RobotModel (owns dtype and device; parameters may require grad).
        dt: Control period [s]: one :meth:`joint_step` advances time by ``dt``.
    """

    def __init__(self, model, dt):
        if not dt > 0:
            raise ValueError(f"dt must be positive, got {dt}")
        self.model = model
        self.dt = float(dt)

    @abc.abstractmethod
    def joint_step(self, q, qd, tau):
        """Advance one control period with ``tau`` held constant.

        Args:
            q: Joint positions [rad or m], shape (..., n).
            qd: Joint velocities, shape (..., n).
            tau: Applied joint torques [N·m or N], shape (..., n).

        Returns:
            ``(q_next, qd_next)``, each shape (..., n).
        """

    def with_model(self, model):
        """Same simulator settings on another model (e.g. with candidate parameters)."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.model = model
        return clone

    def _rollout_inputs(self, q0, qd0, tau_seq):
        """Validated ``(q0, qd0, tau_seq)`` tensors of a rollout (joints named on bad values)."""
        q0 = joint_tensor(self.model, "q0", q0)
        qd0 = joint_tensor(self.model, "qd0", qd0)
        tau_seq = joint_tensor(self.model, "tau_seq", tau_seq)
        if tau_seq.ndim < 2:
            raise ValueError(f"tau_seq must have shape (..., T, n), got {tuple(tau_seq.shape)}")
        return q0, qd0, tau_seq

    def rollout(self, q0, qd0, tau_seq, checkpoint_every=None):
        """Simulate a torque sequence.

        Args:
            q0: Initial positions, shape (..., n).
            qd0: Initial velocities, shape (..., n).
            tau_seq: Torques, shape (..., T, n); step t applies ``tau_seq[..., t, :]``.
            checkpoint_every: If set, recompute every block of this many steps in the backward
                pass instead of storing it (memory O(T / k + k) instead of O(T)).

        Returns:
            ``(q, qd)``, each shape (..., T, n): the states after each step.
        """
        q, qd, tau_seq = self._rollout_inputs(q0, qd0, tau_seq)
        steps = tau_seq.shape[-2]
        block = steps if not checkpoint_every else int(checkpoint_every)
        qs, qds = [], []
        for start in range(0, steps, block):
            chunk = tau_seq[..., start : start + block, :]
            if checkpoint_every and torch.is_grad_enabled():
                bq, bqd = checkpoint_block(self, type(self)._block, q, qd, chunk)
            else:
                bq, bqd = self._block(q, qd, chunk)
            qs.append(bq)
            qds.append(bqd)
            q, qd = bq[..., -1, :], bqd[..., -1, :]
        return torch.cat(qs, dim=-2), torch.cat(qds, dim=-2)

    def _block(self, q, qd, tau_block):
        qs, qds = [], []
        for t in range(tau_block.shape[-2]):
            q, qd = self.joint_step(q, qd, tau_block[..., t, :])
            qs.append(q)
            qds.append(qd)
        return torch.stack(qs, dim=-2), torch.stack(qds, dim=-2)


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
