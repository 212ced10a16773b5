"""Torque estimation from a measured trajectory through a differentiable simulator.

Liu et al. (Eq. 26, §V-D): the torque applied during sample period t is the one that, put
through the simulator from the measured state at t, reproduces the measured state at t+1:

    tau_t = argmin  w_q |q_sim(t+1) - q(t+1)|^2 / s_q^2 + w_qd |qd_sim(t+1) - qd(t+1)|^2 / s_qd^2

with the three loss schemes (angle only, velocity only, both) and three initializations
(zero, the previous estimate, gravity compensation), solved with a bounded number of
Gauss-Newton iterations. The MPC variant optimizes ``horizon`` steps at once with the
torque-smoothness term ``|tau_k - tau_{k-1}|^2 / s_tau^2`` and keeps the first torque.

Time steps are independent for the zero and gravity initializations without smoothness,
so they are solved in one batch; "previous" and the smoothness term chain the steps and are
solved sequentially. Jacobians come from one batched reverse pass per iteration.

:class:`StreamingTorqueEstimator` solves the same problem (horizon 1) one joint state at a time
through the compiled rigid-body step, fast enough for the joint-state rate of a node.
"""

from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.dynamics.rnea import gravity_torques
from diffsim_ros.dynamics.springs import spring_torques
from diffsim_ros.sim.rigid_fast import FastRigidStep

__all__ = ["SCHEMES", "INITIALIZATIONS", "StreamingTorqueEstimator", "TorqueEstimationSettings", "TorqueEstimate",
           "estimate_torques"]

SCHEMES = ("angle", "velocity", "both")
INITIALIZATIONS = ("zero", "previous", "gravity")


@dataclass(frozen=True)
class TorqueEstimationSettings:
    """Settings of the torque estimator.

    Attributes:
        scheme: ``"angle"``, ``"velocity"`` or ``"both"``.
        initialization: ``"zero"``, ``"previous"`` or ``"gravity"``.
        iterations: Gauss-Newton iterations per time step (bounded work).
        horizon: Steps optimized together (1: Eq. 26; 3: the paper's MPC).
        smoothness_std: Torque change [N·m] worth one unit of cost; 0 disables the term.
        q_std: Joint-angle error [rad] worth one unit of cost.
        qd_std: Joint-velocity error [rad/s] worth one unit of cost.
        levenberg: Relative Levenberg damping of the normal equations.
    """

    scheme: str = "both"
    initialization: str = "gravity"
    iterations: int = 3
    horizon: int = 1
    smoothness_std: float = 0.0
    q_std: float = 1e-4
    qd_std: float = 2e-3
    levenberg: float = 1e-9

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"unknown scheme '{self.scheme}'; choose from {SCHEMES}")
        if self.initialization not in INITIALIZATIONS:
            raise ValueError(f"unknown initialization '{self.initialization}'; choose from {INITIALIZATIONS}")
        if self.iterations < 1 or self.horizon < 1:
            raise ValueError("iterations and horizon must be >= 1")

    @property
    def sequential(self):
        """Whether steps depend on each other's estimates."""
        return self.initialization == "previous" or self.smoothness_std > 0


@dataclass(frozen=True)
class TorqueEstimate:
    """Estimated torques [N·m], shape (T - horizon, n), and the final tracking residual RMS
    per joint in units of the scheme's tolerances, shape (n,)."""

    torques: np.ndarray
    residual_rms: np.ndarray


def _state_residual(q_sim, qd_sim, q_meas, qd_meas, settings):
    parts = []
    if settings.scheme in ("angle", "both"):
        parts.append((q_sim - q_meas) / settings.q_std)
    if settings.scheme in ("velocity", "both"):
        parts.append((qd_sim - qd_meas) / settings.qd_std)
    return torch.cat(parts, dim=-1).flatten(-2)  # (B, H * rows)


def _rollout_residual(sim, q0, qd0, tau, q_meas, qd_meas, settings):
    """Residual of every batch element, shape (B, R), for torques tau (B, H, n)."""
    q, qd = sim.rollout(q0, qd0, tau)
    return _state_residual(q, qd, q_meas, qd_meas, settings)


def _jacobian(sim, q0, qd0, tau, q_meas, qd_meas, settings):
    """(residual (B, R), Jacobian (B, R, H n)) from one batched reverse pass.

    Batch elements are independent, so the gradient of the batch sum of residual row r is
    row r of every element's Jacobian at once.
    """
    tau = tau.detach().requires_grad_(True)
    with torch.enable_grad():
        residual = _rollout_residual(sim, q0, qd0, tau, q_meas, qd_meas, settings)
        rows = residual.shape[-1]
        eye = torch.eye(rows, dtype=residual.dtype, device=residual.device)
        (grads,) = torch.autograd.grad(residual.sum(0), tau, grad_outputs=eye, is_grads_batched=True)
    return residual.detach(), grads.permute(1, 0, 2, 3).reshape(tau.shape[0], rows, -1)


def _smoothness_system(previous, tau, std):
    """Linear smoothness residual rows A tau_flat - b, as (A (Hn_prev_rows, Hn), b)."""
    horizon, n = tau.shape[-2], tau.shape[-1]
    diff = torch.zeros(horizon * n, horizon * n, dtype=tau.dtype, device=tau.device)
    for k in range(horizon):
        diff[k * n : (k + 1) * n, k * n : (k + 1) * n] = torch.eye(n, dtype=tau.dtype, device=tau.device)
        if k > 0:
            diff[k * n : (k + 1) * n, (k - 1) * n : k * n] = -torch.eye(n, dtype=tau.dtype, device=tau.device)
    offset = torch.zeros(tau.shape[0], horizon * n, dtype=tau.dtype, device=tau.device)
    offset[:, :n] = previous
    return diff / std, offset / std


def _gauss_newton(sim, q0, qd0, tau, q_meas, qd_meas, previous, settings):
    """``settings.iterations`` Gauss-Newton steps on torques tau (B, H, n)."""
    batch, horizon, n = tau.shape
    residual = None
    for _ in range(settings.iterations):
        residual, jac = _jacobian(sim, q0, qd0, tau, q_meas, qd_meas, settings)
        normal = jac.transpose(1, 2) @ jac
        gradient = (jac.transpose(1, 2) @ residual[..., None])[..., 0]
        if settings.smoothness_std > 0:
            a, b = _smoothness_system(previous, tau, settings.smoothness_std)
            flat = tau.reshape(batch, -1)
            lin = flat @ a.T - b
            normal = normal + a.T @ a
            gradient = gradient + lin @ a
        scale = normal.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(1e-30)
        damping = settings.levenberg * scale[:, None, None] * torch.eye(horizon * n, dtype=tau.dtype, device=tau.device)
        step = torch.linalg.solve(normal + damping, -gradient[..., None])[..., 0]
        tau = (tau.reshape(batch, -1) + step).reshape(batch, horizon, n)
    with torch.no_grad():
        residual = _rollout_residual(sim, q0, qd0, tau, q_meas, qd_meas, settings)
    return tau.detach(), residual


def _initial(settings, model, q, previous):
    if settings.initialization == "zero":
        return torch.zeros_like(q)
    if settings.initialization == "gravity":
        return gravity_torques(model, q) - spring_torques(model, q)
    return previous


def estimate_torques(simulator, q, qd, settings=TorqueEstimationSettings()):
    """Estimate the torque of every sample period of a measured trajectory.

    Args:
        simulator: JointSpaceSimulator whose ``dt`` is the sample period.
        q: Measured (filtered) joint positions [rad], shape (T, n).
        qd: Measured (filtered) joint velocities [rad/s], shape (T, n).
        settings: TorqueEstimationSettings.

    Returns:
        TorqueEstimate with ``torques[t]`` applied during [t, t+1), t < T - horizon.
    """
    model = simulator.model
    like = model.params.mass
    q = torch.as_tensor(np.asarray(q), dtype=like.dtype, device=like.device)
    qd = torch.as_tensor(np.asarray(qd), dtype=like.dtype, device=like.device)
    horizon = settings.horizon
    steps = q.shape[0] - horizon
    if steps < 1:
        raise ValueError(f"trajectory of {q.shape[0]} samples is too short for horizon {horizon}")
    index = torch.arange(steps, device=q.device)[:, None] + torch.arange(1, horizon + 1, device=q.device)[None, :]
    q_meas, qd_meas = q[index], qd[index]  # (steps, H, n)
    if not settings.sequential:
        init = _initial(settings, model, q[:steps], None).detach()
        tau = init[:, None, :].expand(steps, horizon, -1).clone()
        tau, residual = _gauss_newton(simulator, q[:steps], qd[:steps], tau, q_meas, qd_meas, None, settings)
        return TorqueEstimate(tau[:, 0].cpu().numpy(), _rms(residual, settings, model.nq))
    estimates, residuals = [], []
    previous = torch.zeros_like(q[:1])
    shifted = None
    for t in range(steps):
        if settings.initialization == "previous" and shifted is not None:
            tau = shifted
        else:
            init = _initial(settings, model, q[t : t + 1], previous).detach()
            tau = init[:, None, :].expand(1, horizon, -1).clone()
        tau, residual = _gauss_newton(
            simulator, q[t : t + 1], qd[t : t + 1], tau, q_meas[t : t + 1], qd_meas[t : t + 1], previous, settings
        )
        estimates.append(tau[0, 0])
        residuals.append(residual)
        previous = tau[:, 0]
        shifted = torch.cat([tau[:, 1:], tau[:, -1:]], dim=1)  # warm start: shift by one step
    return TorqueEstimate(torch.stack(estimates).cpu().numpy(), _rms(torch.cat(residuals), settings, model.nq))


def _rms(residual, settings, n):
    per_joint = residual.reshape(residual.shape[0], -1, n)
    return per_joint.square().mean(dim=(0, 1)).sqrt().cpu().numpy()


class StreamingTorqueEstimator:
    """Liu et al.'s torque estimate (Eq. 26, horizon 1), one joint state at a time, compiled.

    Each new sample ``(t1, q1, qd1)`` gives the torque applied since the previous one
    ``(t0, q0, qd0)``: the torque whose implicit-Euler step of the current model (passive terms
    included, :class:`~diffsim_ros.sim.rigid_fast.FastRigidStep`) from ``(q0, qd0)`` over
    ``t1 - t0`` best reproduces ``(q1, qd1)`` in the settings' scheme and tolerances. The
    step is affine in the torque, so Gauss-Newton from the previous estimate is exact after
    one iteration; ``settings.iterations`` bounds the work all the same. Sample periods may
    vary from sample to sample (the step takes each one).

    Args:
        model: RobotModel (its parameter values are copied: call :meth:`set_model` after an update).
        settings: TorqueEstimationSettings: ``scheme``, ``iterations``, ``q_std``, ``qd_std`` and
            ``levenberg`` are used; ``horizon`` must be 1 and ``smoothness_std`` 0.
        substeps: Substeps per sample period.
        max_period: [s] A longer gap between samples (or a stamp that does not increase)
            restarts the estimate at the new sample instead of bridging the gap.

    Attributes:
        residual_rms: RMS of the last fit's residual in units of the scheme's tolerances.
    """

    def __init__(self, model, settings=TorqueEstimationSettings(), substeps=1, max_period=0.1):
        if settings.horizon != 1 or settings.smoothness_std > 0:
            raise ValueError("the streaming torque estimator solves horizon 1 without the smoothness term")
        if not max_period > 0:
            raise ValueError(f"max_period must be positive, got {max_period}")
        self.settings, self.substeps, self.max_period = settings, int(substeps), float(max_period)
        rows = [settings.scheme in ("angle", "both"), settings.scheme in ("velocity", "both")]
        self._rows = np.repeat(rows, model.nq)
        self._weights = np.repeat([1.0 / settings.q_std, 1.0 / settings.qd_std], model.nq)[self._rows]
        self.set_model(model)
        self.reset()

    def set_model(self, model):
        """Estimate with these parameter values from the next sample on."""
        self._step = FastRigidStep(model, self.max_period, self.substeps, parameters=())

    def reset(self):
        """Forget the previous sample and estimate."""
        self._last, self._tau, self.residual_rms = None, None, float("nan")

    def add(self, t, q, qd):
        """The torque [N·m], (n,), applied from the previous sample to this one, or None for the first.

        Args:
            t: Sample time [s]. q: Positions [rad], (n,). qd: Velocities [rad/s], (n,).
        """
        q, qd = np.asarray(q, dtype=np.float64), np.asarray(qd, dtype=np.float64)
        last, self._last = self._last, (float(t), q, qd)
        if last is None or not 0.0 < t - last[0] <= self.max_period:
            self._tau = None
            return None
        step = self._step.with_dt(t - last[0])
        target = np.concatenate([q, qd])[self._rows]
        tau = np.zeros(len(q)) if self._tau is None else self._tau
        for _ in range(self.settings.iterations):
            result = step.jacobians(last[1], last[2], tau)
            residual = self._weights * (np.concatenate([result.q, result.qd])[self._rows] - target)
            jac = self._weights[:, None] * result.d_torque[self._rows]
            normal = jac.T @ jac
            normal[np.diag_indices_from(normal)] *= 1.0 + self.settings.levenberg
            tau = tau - np.linalg.solve(normal, jac.T @ residual)
        q_new, qd_new = step.step(last[1], last[2], tau)
        final = self._weights * (np.concatenate([q_new, qd_new])[self._rows] - target)
        self._tau, self.residual_rms = tau, float(np.sqrt(np.mean(final**2)))
        return tau
