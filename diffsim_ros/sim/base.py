"""Joint-space simulator interface shared by every simulator.

Identification, torque maps and MPC work through :class:`JointSpaceSimulator`, so they can
select the PBD simulator or the exact rigid-body integrator without changing code.
"""

import abc

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.sim.checkpointing import checkpoint_block

__all__ = ["JointSpaceSimulator"]


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
