"""Model-predictive torque control through the differentiable simulator (Liu et al., §V-D).

Each call optimizes the torques of the next ``horizon`` simulator steps (paper: 3) so that
the simulated states follow the reference, and returns the first. The cost (each term a
residual divided by its tolerance, squared and summed):

- tracking: ``(q_k - q_ref(t + k dt)) / position_tolerance`` and the same for velocities,
  k = 1..H, the states from rolling the simulator out;
- smoothness (the paper's torque-smoothness term): ``(tau_k - tau_{k-1}) / smoothness_tolerance``
  with ``tau_{-1}`` the previously returned command;
- regularization: ``(tau_k - h(q)) / effort_tolerance``, h the holding torque.

It is solved by Gauss-Newton with a small Levenberg damping: the Jacobian of the rollout
with respect to all H x n torques comes from autograd through the simulator in one batched
reverse pass (one batch copy per output row, dropped once its step is done); the smoothness and
regularization terms are linear and enter in closed form. Torques are clipped to the
effort limits after every step. At most ``max_iterations`` iterations run per call
(bounded work), starting from one of the paper's three initializations: ``"zero"``,
``"previous"`` (the last solution shifted by the elapsed steps: warm start) or
``"gravity"`` (the holding torque).

The Jacobian costs about three rollouts. With ``jacobian_every = N > 1`` it is refreshed on
every N-th call only; the calls in between take Gauss-Newton steps with the last Jacobian
and a fresh residual from a plain rollout (a "level-B" real-time iteration: the residual,
hence the current state and reference, is always exact; only the step direction is
approximate). The torque-to-state sensitivity changes slowly with the configuration, so
this trades little tracking for a several-fold higher rate.
"""

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.gravity import holding_torques
from diffsim_ros.control.vectors import to_numpy
from diffsim_ros.dynamics.fast import FastDynamics

__all__ = ["INITIALIZATIONS", "MPCInfo", "MPCSettings", "ModelPredictiveController"]

INITIALIZATIONS = ("zero", "previous", "gravity")


@dataclass(frozen=True)
class MPCSettings:
    """MPC settings.

    Attributes:
        horizon: Optimized simulator steps H.
        max_iterations: Most Gauss-Newton iterations (Jacobian evaluations) per call.
        initialization: ``"zero"``, ``"previous"`` or ``"gravity"``.
        position_tolerance: Position error [rad] worth one unit of cost.
        velocity_tolerance: Velocity error [rad/s] worth one unit of cost.
        smoothness_tolerance: Torque change [N·m] between steps worth one unit of cost.
        effort_tolerance: Deviation [N·m] from the holding torque worth one unit of cost.
        step_tolerance: Stop when the largest torque update is below this [N·m].
        levenberg: Levenberg damping added to the normal equations (relative to their scale).
        jacobian_every: Refresh the rollout Jacobian on every N-th call (1: every call).
    """

    horizon: int = 3
    max_iterations: int = 2
    initialization: str = "previous"
    position_tolerance: float = 1e-3
    velocity_tolerance: float = 2e-2
    smoothness_tolerance: float = 5.0
    effort_tolerance: float = 100.0
    step_tolerance: float = 1e-3
    levenberg: float = 1e-9
    jacobian_every: int = 1

    def validate(self):
        """Raise ControlError naming the first unusable setting (NaN fails every comparison)."""
        for name in ("horizon", "max_iterations", "jacobian_every"):
            if not getattr(self, name) >= 1:
                raise ControlError(f"MPC {name} must be >= 1, got {getattr(self, name)!r}")
        if self.initialization not in INITIALIZATIONS:
            raise ControlError(f"unknown MPC initialization '{self.initialization}'; choose from {INITIALIZATIONS}")
        for name in ("position_tolerance", "velocity_tolerance", "smoothness_tolerance", "effort_tolerance"):
            if not 0 < getattr(self, name) < math.inf:
                raise ControlError(f"MPC {name} must be a positive number, got {getattr(self, name)!r}")
        for name in ("step_tolerance", "levenberg"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ControlError(f"MPC {name} must be a finite number >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class MPCInfo:
    """Diagnostics of the last :meth:`ModelPredictiveController.compute` call.

    Attributes:
        iterations: Gauss-Newton iterations.
        jacobians: Jacobian evaluations (0 when the last one was reused).
        initial_cost: Cost of the initialization.
        predicted_cost: Cost predicted by the last Gauss-Newton model.
        seconds: Wall time of the call [s].
        torques: Optimized torque sequence [N·m], (H, n) (None after a failure).
        failure: Why no command was produced ("" on success).
    """

    iterations: int
    jacobians: int
    initial_cost: float
    predicted_cost: float
    seconds: float
    torques: np.ndarray | None
    failure: str = ""


class ModelPredictiveController:
    """Receding-horizon torque optimization through a JointSpaceSimulator.

    Args:
        simulator: JointSpaceSimulator; its ``dt`` is the MPC step and its model (dtype,
            device, parameters) the prediction model.
        reference: Callable ``reference(t) -> (q_d, qd_d, qdd_d)`` (see ``references``).
        settings: MPCSettings.

    Attributes:
        last: :class:`MPCInfo` of the last call (None before the first).
    """

    def __init__(self, simulator, reference, settings=MPCSettings()):
        settings.validate()
        self.simulator = simulator
        self.reference = reference
        self.settings = settings
        self.joint_names = tuple(simulator.model.joint_names)
        self.update_model(simulator.model)
        self.reset()

    def update_model(self, model):
        """Predict with new parameter values (same structure)."""
        if tuple(model.joint_names) != self.joint_names:
            raise ControlError(f"model joints {list(model.joint_names)} differ from {list(self.joint_names)}")
        self.simulator = self.simulator.with_model(model)
        self.fast = FastDynamics.from_model(model)
        self.effort_limit = to_numpy(model.effort_limit)
        self._jacobian = None  # linearized on the old parameters

    def reset(self):
        """Forget the warm start and the previous command."""
        self._solution = None
        self._solution_time = None
        self._previous_command = None
        self._jacobian = None
        self._calls = 0
        self.last = None

    # ------------------------------------------------------------------ problem pieces
    def _tensor(self, x):
        model = self.simulator.model
        return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=model.dtype, device=model.device)

    def _targets(self, t):
        """Reference states at t + k dt, k = 1..H, scaled: (H * 2n,) numpy."""
        s, dt = self.settings, self.simulator.dt
        rows = []
        for k in range(1, s.horizon + 1):
            q_d, qd_d, _ = self.reference(t + k * dt)
            rows.append(np.concatenate([q_d / s.position_tolerance, qd_d / s.velocity_tolerance]))
        return np.concatenate(rows)

    def _scaled(self, q, qd):
        """Predicted state in cost units: ``(q / position_tolerance, qd / velocity_tolerance)``, (..., 2n)."""
        s = self.settings
        return torch.cat([q / s.position_tolerance, qd / s.velocity_tolerance], dim=-1)

    def _rollout_fn(self, q, qd):
        """Map flattened torques (..., H n) to scaled predicted states (..., H 2n)."""
        s, n = self.settings, len(self.joint_names)

        def rollout(flat):
            torques = flat.reshape(*flat.shape[:-1], s.horizon, n)
            states = []
            q_k, qd_k = q, qd
            for k in range(s.horizon):
                q_k, qd_k = self.simulator.joint_step(q_k, qd_k, torques[..., k, :])
                states.append(self._scaled(q_k, qd_k))
            return torch.cat(states, dim=-1)

        return rollout

    def _rollout_jacobian(self, q, qd, flat):
        """Scaled predicted states (H 2n,) and their Jacobian (H 2n, H n) w.r.t. the torques.

        One reverse pass over batch copies, one copy per output row (as
        :func:`~diffsim_ros.control.jacobians.rowwise_jacobian`), using causality: the copies
        that differentiate step k's outputs are dropped after step k, so the batch shrinks
        from H 2n to 2n along the horizon.
        """
        s, n = self.settings, len(self.joint_names)
        width = 2 * n
        copies = flat.detach().expand(s.horizon * width, flat.shape[-1]).clone().requires_grad_(True)
        torques = copies.reshape(-1, s.horizon, n)
        q_k, qd_k = q.expand(copies.shape[0], n), qd.expand(copies.shape[0], n)
        values, picked = [], []
        with torch.enable_grad():
            for k in range(s.horizon):
                q_k, qd_k = self.simulator.joint_step(q_k, qd_k, torques[k * width :, k, :])
                out = self._scaled(q_k, qd_k)
                values.append(out[0])
                picked.append(torch.diagonal(out[:width]).sum())  # copy k 2n + r differentiates row r
                q_k, qd_k = q_k[width:], qd_k[width:]
            (grad,) = torch.autograd.grad(torch.stack(picked).sum(), copies)
        return torch.cat(values).detach(), grad

    def initial_torques(self, t, q, initialization=None):
        """Initial torque sequence [N·m], (H, n), at time ``t`` [s] and positions ``q`` [rad].

        Args:
            initialization: Override of ``settings.initialization``; ``"previous"`` falls back
                to ``"gravity"`` before the first solution.
        """
        s = self.settings
        initialization = initialization or s.initialization
        if initialization == "zero":
            return np.zeros((s.horizon, len(self.joint_names)))
        warm = self._warm_start(t) if initialization == "previous" else None
        if warm is not None:
            return warm
        hold = holding_torques(self.fast, np.asarray(q, dtype=np.float64))
        return np.repeat(hold[None], s.horizon, axis=0)

    def _warm_start(self, t):
        """The last solution shifted by the steps elapsed until ``t`` [s], (H, n); None before the first."""
        if self._solution is None:
            return None
        shift = int(round((t - self._solution_time) / self.simulator.dt))
        shift = min(max(shift, 0), self.settings.horizon)
        tail = np.repeat(self._solution[-1:], shift, axis=0)
        return np.concatenate([self._solution[shift:], tail], axis=0)

    def cost(self, t, q, qd, torques):
        """The MPC cost of a torque sequence (H, n) [N·m] from state ``(q, qd)`` at ``t`` [s]."""
        q = np.asarray(q, dtype=np.float64)
        u = np.asarray(torques, dtype=np.float64).reshape(-1)
        lin_a, lin_b = self._linear_terms(holding_torques(self.fast, q))
        with torch.no_grad():
            predicted = to_numpy(self._rollout_fn(self._tensor(q), self._tensor(qd))(self._tensor(u)))
        r, r_lin = predicted - self._targets(t), lin_a @ u - lin_b
        return float(r @ r + r_lin @ r_lin)

    def _linear_terms(self, hold):
        """Smoothness and regularization as ``(A (m, H n), b (m,))``: residual = A u - b."""
        s, n = self.settings, hold.shape[0]
        size = s.horizon * n
        eye = np.eye(size)
        diff = eye.copy()
        diff[n:, :-n] -= np.eye(size - n)
        previous = hold if self._previous_command is None else self._previous_command
        b_diff = np.zeros(size)
        b_diff[:n] = previous
        a = np.concatenate([diff / s.smoothness_tolerance, eye / s.effort_tolerance])
        b = np.concatenate([b_diff / s.smoothness_tolerance, np.tile(hold, s.horizon) / s.effort_tolerance])
        return a, b

    # ------------------------------------------------------------------ the cycle
    def compute(self, t, q, qd):
        """Optimized torques [N·m], shape (n,), for the state ``(q [rad], qd [rad/s])`` at ``t`` [s].

        Returns None (and forgets the warm start) when the simulator fails or produces
        non-finite values; pass that on to ``SafetyLayer.filter``, which then stops
        commanding. ``last.failure`` says why.
        """
        start = time.perf_counter()
        q = np.asarray(q, dtype=np.float64)
        qd = np.asarray(qd, dtype=np.float64)
        try:
            solution, iterations, jacobians, initial_cost, predicted = self._optimize(t, q, qd)
        except (ValueError, RuntimeError, ArithmeticError) as err:  # simulator errors, singular systems
            return self._fail(f"{type(err).__name__}: {err}", start)
        if not np.all(np.isfinite(solution)):
            return self._fail("non-finite torques", start)
        self._solution, self._solution_time = solution, t
        self._previous_command = solution[0].copy()
        self.last = MPCInfo(iterations, jacobians, initial_cost, predicted, time.perf_counter() - start, solution.copy())
        return solution[0].copy()

    def _fail(self, reason, start):
        self.reset()
        self.last = MPCInfo(0, 0, math.nan, math.nan, time.perf_counter() - start, None, failure=reason)
        return None

    def _optimize(self, t, q, qd):
        """Bounded Gauss-Newton: ``(torques (H, n), iterations, jacobians, initial cost, predicted cost)``."""
        s = self.settings
        hold = holding_torques(self.fast, q)
        u = self.initial_torques(t, q).reshape(-1)
        lin_a, lin_b = self._linear_terms(hold)
        target = self._targets(t)
        rollout = self._rollout_fn(self._tensor(q), self._tensor(qd))
        limit = np.tile(self.effort_limit, s.horizon)
        refresh = self._jacobian is None or self._calls % s.jacobian_every == 0
        self._calls += 1
        initial_cost = predicted = None
        iterations = jacobians = 0
        for iterations in range(1, s.max_iterations + 1):
            if refresh:
                value, jac = self._rollout_jacobian(self._tensor(q), self._tensor(qd), self._tensor(u))
                self._jacobian = jac = to_numpy(jac)
                jacobians += 1
            else:
                with torch.no_grad():
                    value, jac = rollout(self._tensor(u)), self._jacobian
            r = to_numpy(value) - target
            r_lin = lin_a @ u - lin_b
            initial_cost = float(r @ r + r_lin @ r_lin) if initial_cost is None else initial_cost
            step, predicted = _gauss_newton_step(jac, r, lin_a, r_lin, s.levenberg)
            u_new = np.clip(u + step, -limit, limit)
            converged = np.abs(u_new - u).max() < s.step_tolerance
            u = u_new
            if converged:
                break
        return u.reshape(s.horizon, -1), iterations, jacobians, initial_cost, predicted


def _gauss_newton_step(jac, r, lin_a, r_lin, levenberg):
    """Levenberg-damped Gauss-Newton step and the cost its linear model predicts."""
    normal = jac.T @ jac + lin_a.T @ lin_a
    gradient = jac.T @ r + lin_a.T @ r_lin
    damping = levenberg * max(np.trace(normal) / normal.shape[0], 1.0)
    step = -np.linalg.solve(normal + damping * np.eye(normal.shape[0]), gradient)
    predicted_r = r + jac @ step
    predicted_lin = r_lin + lin_a @ step
    return step, float(predicted_r @ predicted_r + predicted_lin @ predicted_lin)
