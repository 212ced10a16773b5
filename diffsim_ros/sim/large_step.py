"""Large time steps: an L-stable implicit Runge-Kutta integrator on the compiled dynamics and derivatives.

The rigid and PBD steps of this package are (semi-)explicit in the stiffness and blow up on
the Baxter arm at dt = 0.05-0.1 s. This integrator is the two-stage, stiffly accurate,
L-stable SDIRK method of Alexander (1977) (order 2, ``gamma = 1 - 1/sqrt(2)``): for
``x = (q, v)`` and ``f(x) = (v, a(q, v, tau))`` with ``a`` the forward dynamics including
springs, damping and smoothed Coulomb friction,

    Y_1 = x + dt gamma f(Y_1),    Y_2 = x + dt (1 - gamma) f(Y_1) + dt gamma f(Y_2),    x+ = Y_2.

Each stage ``Y = b + c f(Y)`` (``c = dt gamma``) is solved by Newton's method on the velocity
only (``q = b_q + c v``): ``R(v) = v - b_v - c a(b_q + c v, v)`` with the exact Jacobian
``I - c (c da/dq + da/dv)`` from the compiled analytic derivatives
(:mod:`~diffsim_ros.sim.rigid_fast`). L-stability damps the stiff modes (Baxter's light wrist
links under joint damping and friction) in one step instead of ringing, so steps of 0.1 s
stay bounded; accuracy is second order in dt (benchmarks/RESULTS.md, "large-step").
"""

import math

import numpy as np

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.derivatives import lu_factor, lu_solve_columns
from diffsim_ros.sim.rigid_fast import FastRigidStep, implicit_substep, step_work, unpack_model

__all__ = ["SDIRKStep"]

GAMMA = 1.0 - math.sqrt(0.5)


@njit(cache=True)
def _residual(model, work, b_q, b_v, tau, c, v, q, jacobians, out, scratch):
    """``out = R(v) = v - b_v - c a(b_q + c v, v)`` (q filled); returns its largest entry, or -1 when singular."""
    n = v.shape[0]
    q_out, qd_out = scratch[0], scratch[1]
    for j in range(n):
        q[j] = b_q[j] + c * v[j]
    if not implicit_substep(model, work, q, v, tau, 0.0, jacobians, n < 0, q_out, qd_out):  # no parameters (a runtime False)
        return -1.0
    acc, largest = work[3][4], 0.0
    for j in range(n):
        out[j] = v[j] - b_v[j] - c * acc[j]
        largest = max(largest, abs(out[j]))
    return largest if math.isfinite(largest) else math.inf


@njit(cache=True)
def _stage(model, work, b_q, b_v, tau, c, q, v, tolerance, max_newton):
    """Solve ``Y = b + c f(Y)`` into ``q``, ``v`` (n,) by damped Newton (backtracking on the largest residual).

    Returns the Newton iterations, -1 on a singular system, -2 without convergence.
    """
    n = q.shape[0]
    jac, pivots, rhs = np.empty((n, n)), np.empty(n, dtype=np.int64), np.empty((n, 1))
    residual, trial, q_trial, scratch = np.empty(n), np.empty(n), np.empty(n), np.empty((2, n))
    # with and without the Jacobian as runtime values: numba compiles a function once per literal
    # argument value (and the rigid step's substep, shared with the rigid simulator, for runtime flags)
    with_jacobian, without = n >= 0, n < 0
    v[:] = b_v
    for iteration in range(1, max_newton + 1):
        norm = _residual(model, work, b_q, b_v, tau, c, v, q, with_jacobian, residual, scratch)
        if norm < 0:
            return -1
        derivatives = work[3][2]  # da/d(q, v, tau) at (q, v)
        for j in range(n):
            rhs[j, 0] = -residual[j]
            for k in range(n):
                jac[j, k] = -c * (c * derivatives[j, k] + derivatives[j, n + k])
            jac[j, j] += 1.0
        if not lu_factor(jac, pivots):
            return -1
        lu_solve_columns(jac, pivots, rhs)
        alpha = 1.0
        for _ in range(30):  # the smoothed friction is steep: full steps can overshoot its knee
            for j in range(n):
                trial[j] = v[j] + alpha * rhs[j, 0]
            trial_norm = _residual(model, work, b_q, b_v, tau, c, trial, q_trial, without, residual, scratch)
            if 0.0 <= trial_norm < (1.0 - 1e-4 * alpha) * norm or trial_norm <= tolerance:
                break
            alpha *= 0.5
        largest = 0.0
        for j in range(n):
            largest = max(largest, abs(trial[j] - v[j]))
            v[j] = trial[j]
            q[j] = q_trial[j]
        if largest < tolerance:
            return iteration
    return -2


@njit(cache=True)
def _sdirk_step(model, work, q, v, tau, dt, tolerance, max_newton, q_out, v_out):
    """One SDIRK step into ``q_out``, ``v_out``; returns the Newton iterations or a negative failure code."""
    n = q.shape[0]
    c = dt * GAMMA
    q1, v1, b_q, b_v = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    first = _stage(model, work, q, v, tau, c, q1, v1, tolerance, max_newton)
    if first < 0:
        return first
    for j in range(n):  # dt (1 - gamma) f(Y_1), with f(Y_1) = (Y_1 - x) / c
        b_q[j] = q[j] + (1.0 - GAMMA) / GAMMA * (q1[j] - q[j])
        b_v[j] = v[j] + (1.0 - GAMMA) / GAMMA * (v1[j] - v[j])
    second = _stage(model, work, b_q, b_v, tau, c, q_out, v_out, tolerance, max_newton)
    return second if second < 0 else first + second


@njit(cache=True)
def _rollout(floats, ints, q0, v0, torques, dt, tolerance, max_newton, qs, vs):
    """States after each step (T, n) under ``torques`` (T, n); returns (steps done, status)."""
    model = unpack_model(floats, ints)
    n = q0.shape[0]
    work = step_work(n, ints[1] * 6 + ints[2] * 3 + ints[3] * 9, 0)
    q, v = q0.copy(), v0.copy()
    for k in range(torques.shape[0]):
        status = _sdirk_step(model, work, q, v, torques[k], dt, tolerance, max_newton, qs[k], vs[k])
        if status < 0:
            return k, status
        q[:] = qs[k]
        v[:] = vs[k]
    return torques.shape[0], 0


class SDIRKStep:
    """L-stable two-stage SDIRK integration of a RobotModel snapshot for large steps (float64 numpy).

    Args:
        model: RobotModel (its current parameter values are copied; rebuild after changes).
        dt: Step [s] (stable at 0.1 s on the Baxter arm).
        passive: Include springs, damping and smoothed Coulomb friction.
        tolerance: Newton stops when the velocity update is below this [rad/s].
        max_newton: Most Newton iterations per stage.
    """

    def __init__(self, model, dt, passive=True, tolerance=1e-10, max_newton=30):
        if not dt > 0:
            raise ValueError(f"dt must be positive, got {dt}")
        if not tolerance > 0 or int(max_newton) < 1:
            raise ValueError("tolerance must be positive and max_newton >= 1")
        self._compiled = FastRigidStep(model, dt, passive=passive, parameters=())
        self.nq, self.dt, self.tolerance, self.max_newton = model.nq, float(dt), float(tolerance), int(max_newton)

    def _vectors(self, q0, qd0, torques):
        q0, qd0 = (self._compiled._vector(name, x) for name, x in (("q", q0), ("qd", qd0)))
        torques = np.ascontiguousarray(torques, dtype=np.float64)
        if torques.ndim != 2 or torques.shape[1] != self.nq:
            raise ValueError(f"torques must have shape (T, {self.nq}), got {torques.shape}")
        return q0, qd0, torques

    def rollout(self, q0, qd0, torques):
        """Positions and velocities after each step, (T, n) each, from ``(q0, qd0)`` under ``torques`` (T, n) [N·m].

        Raises:
            ArithmeticError: A stage's Newton iteration diverged or met a singular system
                (the message names the step).
        """
        q0, qd0, torques = self._vectors(q0, qd0, torques)
        qs, vs = np.empty_like(torques), np.empty_like(torques)
        c = self._compiled
        done, status = _rollout(c.floats, c.ints, q0, qd0, torques, self.dt, self.tolerance, self.max_newton, qs, vs)
        if status < 0:
            why = "a singular Newton system" if status == -1 else f"no convergence in {self.max_newton} Newton iterations"
            raise ArithmeticError(f"SDIRK step {done} (t = {done * self.dt:g} s) failed: {why}")
        return qs, vs

    def step(self, q, qd, tau):
        """The state ``(q+, qd+)`` after one step under ``tau`` [N·m], (n,) each."""
        qs, vs = self.rollout(q, qd, np.asarray(tau, dtype=np.float64)[None])
        return qs[0], vs[0]
