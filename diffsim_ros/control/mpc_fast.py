"""The MPC of :mod:`.mpc` solved in compiled code: Gauss-Newton steps by a Riccati recursion.

Same problem, same cost, same iteration as :class:`~diffsim_ros.control.mpc.ModelPredictiveController`
(the differentiable torch reference): each call takes at most ``max_iterations`` Gauss-Newton
steps on the torques of the next H steps, clips them to the effort limits after every step and
starts from one of the paper's three initializations (``zero``, ``previous`` = warm start,
``gravity``). Only the linear algebra differs. The rollout and its exact step Jacobians
``A_k = d x_{k+1} / d x_k``, ``B_k = d x_{k+1} / d tau_k`` come from the compiled rigid step
(:class:`~diffsim_ros.sim.rigid_fast.FastRigidStep`, analytic derivatives), and the
Gauss-Newton step is the solution of the linearized problem by a backward Riccati pass
(O(H n^3) instead of the dense O(H^3 n^3) normal equations). The torque-smoothness term
couples consecutive torques, so the Riccati state is the state deviation augmented by the
previous torque deviation, ``z_k = (dx_k, du_{k-1})``.

The Levenberg damping is added to each stage's torque Hessian, relative to its mean diagonal
(the torch reference scales by the whole normal matrix; at the default 1e-9 the two steps
agree to rounding).

Through PBD, :class:`FastPBDModelPredictiveController` runs the same solver with the compiled
PBD step and its exact Jacobians (vector forward-mode tangents beside one run of the compiled
kernel, :mod:`diffsim_ros.sim.pbd.fast_tangents`). :func:`make_mpc` picks the fastest controller a
simulator allows.
"""

import math

import numpy as np

from diffsim_ros._compiled import njit
from diffsim_ros.control.errors import ControlError
from diffsim_ros.control.mpc import MPCSettings, ModelPredictiveController
from diffsim_ros.dynamics.derivatives import lu_factor, lu_solve_columns, rnea_values_into
from diffsim_ros.dynamics.fast import spring_torques_into
from diffsim_ros.sim.rigid import RigidBodySimulator
from diffsim_ros.sim.pbd import PBDSimulator
from diffsim_ros.sim.pbd.fast import FastPBD, kernel_options, work_area
from diffsim_ros.sim.pbd.fast_tangents import step_tangents_with, tangent_area
from diffsim_ros.sim.rigid_fast import FastRigidStep, step_into, step_work, unpack_model

__all__ = ["FastModelPredictiveController", "FastPBDModelPredictiveController", "compiled_mpc_supports", "make_mpc"]

_OK, _SINGULAR, _NONFINITE, _BAD_STATE = 0, 1, 2, 3


@njit(cache=True, inline="always")
def _rollout(model, work, rigid, pbd, x0, u, xs, a_mats, b_mats):
    """States ``xs`` (H + 1, 2n) from ``x0`` under ``u`` (H, n), with ``A_k``, ``B_k``; returns a status.

    ``rigid`` True and ``pbd`` None: the rigid step of ``model``; ``rigid`` None and ``pbd``
    ``(fk, phys, springs, options)``: a compiled PBD step (always with its Jacobians,
    fast_tangents.py; ``A_0`` is not formed: zeros stand in, since it only multiplies
    ``dx_0 = 0``). Each step is guarded by an argument that is None for the other: numba drops a
    branch at compile time only on an argument typed None, so ``pbd is None`` alone would
    compile the rigid step into the PBD solver too (its kernel family: 434 s of CPU on a fresh
    install with it, 329 s without). Inlined into :func:`_solve`: the PBD step's compiled code is
    then linked into one library, not two.
    """
    n = u.shape[1]
    xs[0] = x0
    q_out, qd_out = np.empty(n), np.empty(n)
    empty = np.empty((0, 0))
    # True and False as runtime values for the flags below: numba compiles a function once per
    # literal argument value, and the steps are compiled for runtime flags where Python calls them
    true, false = n >= 0, n < 0
    if pbd is not None:  # work areas for the whole rollout; B alone at the first step (its start state is given)
        pbd_work, torque_only, full = work_area(n, x0), tangent_area(n, false), tangent_area(n, true)
        a_mats[0, :, :] = 0.0
    for k in range(u.shape[0]):
        if rigid is not None:
            if not step_into(model, work, xs[k, :n], xs[k, n:], u[k], true, false, q_out, qd_out, a_mats[k], b_mats[k], empty):  # A, B; no parameters
                return _SINGULAR
        if pbd is not None:
            fk, phys, springs, options = pbd
            tangents = torque_only if k == 0 else full
            step_tangents_with(fk, phys, springs, options, pbd_work, tangents, xs[k, :n], xs[k, n:], u[k], q_out, qd_out, a_mats[k], b_mats[k])
        xs[k + 1, :n] = q_out
        xs[k + 1, n:] = qd_out
        for i in range(n):
            if not (math.isfinite(q_out[i]) and math.isfinite(qd_out[i])):
                return _NONFINITE
    return _OK


@njit(cache=True)
def _cost(xs, u, weight, target, hold, previous, w_smooth, w_effort):
    """The MPC cost (sum of squared scaled residuals) of states ``xs`` and torques ``u``."""
    total = 0.0
    horizon, n = u.shape
    for k in range(horizon):
        for i in range(2 * n):
            r = weight[i] * (xs[k + 1, i] - target[k, i])
            total += r * r
        for i in range(n):
            before = previous[i] if k == 0 else u[k - 1, i]
            d, e = (u[k, i] - before) * w_smooth, (u[k, i] - hold[i]) * w_effort
            total += d * d + e * e
    return total


@njit(cache=True)
def _value_update(k, u, previous, xs, target, w2, a, a_k, q_ux, rhs, pa, p_xx, p_xp, p_pp, s_x, s_x_new, s_p):
    """The value function of ``z_k`` from stage k's solution ``rhs`` (in place; see :func:`_riccati`)."""
    m, n = p_xx.shape[0], p_pp.shape[0]
    # value function of z_k: P_xx = A' P_xx A + Q_ux' K_x (+ W^2 for k > 0), P_xp = Q_ux' K_p, ...
    for i in range(m):
        for j in range(m):
            acc = 0.0
            for l in range(m):
                acc += p_xx[i, l] * a_k[l, j]
            pa[i, j] = acc
    for i in range(m):
        acc = 0.0
        for l in range(m):
            acc += a_k[l, i] * s_x[l]
        for l in range(n):
            acc += q_ux[l, i] * rhs[l, 0]
        s_x_new[i] = acc
    for i in range(m):
        for j in range(i, m):
            acc = 0.0
            for l in range(m):
                acc += a_k[l, i] * pa[l, j]
            for l in range(n):
                acc += q_ux[l, i] * rhs[l, 1 + j]
            p_xx[i, j] = acc  # pa holds P_xx A: P_xx may be overwritten
        for j in range(n):
            acc = 0.0
            for l in range(n):
                acc += q_ux[l, i] * rhs[l, 1 + m + j]
            p_xp[i, j] = acc
    for i in range(m):
        for j in range(i):
            p_xx[i, j] = p_xx[j, i]
    for i in range(n):
        before = previous[i] if k == 0 else u[k - 1, i]
        s_p[i] = -a * rhs[i, 0] - a * (u[k, i] - before)
        for j in range(n):
            p_pp[i, j] = (a if i == j else 0.0) - a * rhs[i, 1 + m + j]
    if k > 0:  # tracking of x_k
        for i in range(m):
            p_xx[i, i] += w2[i]
            s_x_new[i] += w2[i] * (xs[k, i] - target[k - 1, i])


@njit(cache=True)
def _riccati(xs, u, a_mats, b_mats, weight, target, hold, previous, w_smooth, w_effort, levenberg, gains, feedback):
    """Backward pass of the linearized problem: ``du_k = gains[k] + feedback[k] @ (dx_k, du_{k-1})``.

    The value function of ``z_k = (dx_k, du_{k-1})`` is ``0.5 z' P z + s' z`` with blocks
    ``P_xx (2n, 2n)``, ``P_xp (2n, n)``, ``P_pp (n, n)``. Plain loops: as fast as numba's
    matrix products at these sizes, and much quicker to compile. Returns False when a stage
    Hessian is singular.
    """
    horizon, n = u.shape
    m = 2 * n
    a, b = w_smooth * w_smooth, w_effort * w_effort
    p_xx, p_xp, p_pp = np.zeros((m, m)), np.zeros((m, n)), np.zeros((n, n))
    s_x, s_p = np.zeros(m), np.zeros(n)
    pb, q_uu, q_ux = np.empty((m, n)), np.empty((n, n)), np.empty((n, m))
    pa, s_x_new = np.empty((m, m)), np.empty(m)
    w2 = weight * weight
    for i in range(m):  # terminal tracking cost
        p_xx[i, i] = w2[i]
        s_x[i] = w2[i] * (xs[horizon, i] - target[horizon - 1, i])
    pivots = np.empty(n, dtype=np.int64)
    rhs = np.empty((n, 1 + m + n))
    for k in range(horizon - 1, -1, -1):
        a_k, b_k = a_mats[k], b_mats[k]
        for i in range(m):  # pb = P_xx B + P_xp
            for j in range(n):
                acc = p_xp[i, j]
                for l in range(m):
                    acc += p_xx[i, l] * b_k[l, j]
                pb[i, j] = acc
        trace = 0.0
        for i in range(n):  # Q_uu = B' P_xx B + B' P_xp + P_xp' B + P_pp (symmetric) + stage terms
            for j in range(i, n):
                acc = p_pp[i, j]
                for l in range(m):
                    acc += b_k[l, i] * pb[l, j] + p_xp[l, i] * b_k[l, j]
                q_uu[i, j] = acc
                q_uu[j, i] = acc
            q_uu[i, i] += a + b
            trace += q_uu[i, i]
        mu = levenberg * max(trace / n, 1.0)
        for i in range(n):  # rhs = -(q_u, Q_ux, Q_up) with Q_ux = pb' A and Q_up = -a I
            q_uu[i, i] += mu
            before = previous[i] if k == 0 else u[k - 1, i]
            acc = s_p[i] + a * (u[k, i] - before) + b * (u[k, i] - hold[i])
            for l in range(m):
                acc += b_k[l, i] * s_x[l]
            rhs[i, 0] = -acc
            for j in range(m):
                acc = 0.0
                for l in range(m):
                    acc += pb[l, i] * a_k[l, j]
                q_ux[i, j] = acc
                rhs[i, 1 + j] = -acc
            for j in range(n):
                rhs[i, 1 + m + j] = a if i == j else 0.0
        if not lu_factor(q_uu, pivots):
            return False
        lu_solve_columns(q_uu, pivots, rhs)
        for i in range(n):
            gains[k, i] = rhs[i, 0]
            for j in range(m + n):
                feedback[k, i, j] = rhs[i, 1 + j]
        _value_update(k, u, previous, xs, target, w2, a, a_k, q_ux, rhs, pa, p_xx, p_xp, p_pp, s_x, s_x_new, s_p)
        s_x[:] = s_x_new
    return True


@njit(cache=True)
def _linear_forward(xs, u, a_mats, b_mats, gains, feedback, step, lin_xs):
    """The Gauss-Newton step ``step`` (H, n) and the linearized states ``lin_xs`` (H + 1, 2n)."""
    horizon, n = u.shape
    m = 2 * n
    z, dx = np.zeros(m + n), np.empty(m)
    lin_xs[0] = xs[0]
    for k in range(horizon):
        for i in range(n):
            acc = gains[k, i]
            for j in range(m + n):
                acc += feedback[k, i, j] * z[j]
            step[k, i] = acc
        for i in range(m):
            acc = 0.0
            for j in range(m):
                acc += a_mats[k, i, j] * z[j]
            for j in range(n):
                acc += b_mats[k, i, j] * step[k, j]
            dx[i] = acc
        for i in range(m):
            z[i] = dx[i]
            lin_xs[k + 1, i] = xs[k + 1, i] + dx[i]
        for i in range(n):
            z[m + i] = step[k, i]


@njit(cache=True)
def _holding_into(model, work, q, hold):
    """Motor torques that hold ``q`` at rest, ``g(q) - tau_spring(q)`` (control.gravity.holding_torques)."""
    fk, (mass, hm, inertia), up, springs = model[0], model[1], model[2], model[3]
    n = q.shape[0]
    rw, zeros, elastic, slope, grad = work[0], np.zeros(n), np.empty(n), np.empty(n), np.empty(n)
    rnea_values_into(fk, mass, hm, inertia, up, q, zeros, zeros, rw, hold)
    spring_torques_into(springs, fk, q, zeros, elastic, slope, (rw.rot_local, rw.pos_local, rw.rot_world, rw.pos_world), grad)
    for j in range(n):
        hold[j] -= elastic[j]


@njit(cache=True)
def _solve(floats, ints, rigid, pbd, x0, u, init, previous, weight, target, limit, w_smooth, w_effort, levenberg,
           max_iterations, step_tolerance, report):
    """Bounded Gauss-Newton from ``u`` (H, n), updated in place.

    Args:
        floats, ints: A :class:`~diffsim_ros.sim.rigid_fast.FastRigidStep`'s buffers (the
            holding torque; the prediction too when ``pbd`` is None).
        rigid, pbd: True and None: predict with the rigid step; None and the compiled PBD
            predictor (see :func:`_rollout`).
        init: 0: start from ``u``; 1: zero torques; 2: the holding torque.
        previous: The last command (n,), or an empty array before the first (the holding torque).
        target: Reference states (H, 2n) at steps 1..H (unscaled; ``weight`` (2n,) scales).
        report: (4,) receives (iterations, initial cost, predicted cost, status).
    """
    model = unpack_model(floats, ints)
    horizon, n = u.shape
    m = 2 * n
    work = step_work(n, ints[1] * 6 + ints[2] * 3 + ints[3] * 9, 0)
    for i in range(m):
        if not math.isfinite(x0[i]):
            report[3] = _BAD_STATE
            return
    hold = np.empty(n)
    _holding_into(model, work, x0[:n], hold)
    if init > 0:
        for k in range(horizon):
            for i in range(n):
                u[k, i] = 0.0 if init == 1 else hold[i]
    if previous.shape[0] == 0:
        previous = hold
    xs, lin_xs = np.empty((horizon + 1, m)), np.empty((horizon + 1, m))
    a_mats, b_mats = np.empty((horizon, m, m)), np.empty((horizon, m, n))
    gains, feedback = np.empty((horizon, n)), np.empty((horizon, n, m + n))
    step = np.empty((horizon, n))
    report[3] = _OK
    for iteration in range(1, max_iterations + 1):
        report[0] = iteration
        status = _rollout(model, work, rigid, pbd, x0, u, xs, a_mats, b_mats)
        if status != _OK:
            report[3] = status
            return
        if iteration == 1:
            report[1] = _cost(xs, u, weight, target, hold, previous, w_smooth, w_effort)
        if not _riccati(xs, u, a_mats, b_mats, weight, target, hold, previous, w_smooth, w_effort, levenberg, gains, feedback):
            report[3] = _SINGULAR
            return
        _linear_forward(xs, u, a_mats, b_mats, gains, feedback, step, lin_xs)
        stepped = u + step
        report[2] = _cost(lin_xs, stepped, weight, target, hold, previous, w_smooth, w_effort)
        largest = 0.0
        for k in range(horizon):
            for i in range(n):
                value = min(max(stepped[k, i], -limit[i]), limit[i])
                largest = max(largest, abs(value - u[k, i]))
                u[k, i] = value
        if not largest >= step_tolerance:  # also stops on NaN
            return


def compiled_mpc_supports(simulator):
    """Whether the compiled solver can predict with ``simulator`` (the rigid implicit-Euler step)."""
    # exact type: a subclass may override joint_step, which the compiled step would ignore
    return type(simulator) is RigidBodySimulator and simulator.integrator == "implicit_euler"


class FastModelPredictiveController(ModelPredictiveController):
    """:class:`~diffsim_ros.control.mpc.ModelPredictiveController` solved in compiled code.

    Same arguments, settings, initializations, warm start, diagnostics (``last``) and failure
    behaviour; ``settings.jacobian_every`` is ignored (exact Jacobians on every call cost less
    than a torch rollout).

    Args:
        simulator: RigidBodySimulator with the ``"implicit_euler"`` integrator (its model,
            ``dt``, substeps and passive terms are the prediction model).
        reference: Callable ``reference(t) -> (q_d, qd_d, qdd_d)``.
        settings: MPCSettings.

    Raises:
        ControlError: Another simulator (FastPBDModelPredictiveController predicts with PBD).
    """

    def __init__(self, simulator, reference, settings=MPCSettings()):
        self._check_simulator(simulator)
        super().__init__(simulator, reference, settings)
        self._warm_up()

    @staticmethod
    def _check_simulator(simulator):
        if not compiled_mpc_supports(simulator):
            raise ControlError(
                f"the compiled MPC predicts with the rigid implicit-Euler simulator, not {type(simulator).__name__}; "
                "use ModelPredictiveController for other simulators"
            )

    def _predictors(self):
        """``(rigid, pbd)`` of :func:`_solve`: the rigid step of ``self.step``."""
        return True, None

    def _warm_up(self):
        """Compile (or load from numba's cache) the solver now, not in the first control cycle."""
        s, n = self.settings, len(self.joint_names)
        _solve(self.step.floats, self.step.ints, *self._predictors(), np.zeros(2 * n), np.zeros((s.horizon, n)), 2, self._no_command,
               self._weight, np.zeros((s.horizon, 2 * n)), self._limit, 1.0, 1.0, 0.0, 1, 0.0, np.zeros(4))

    def _rigid_step(self):
        """The compiled rigid step of the prediction (and of the holding torque)."""
        return FastRigidStep.from_simulator(self.simulator, parameters=())

    def update_model(self, model):
        super().update_model(model)
        self.step = self._rigid_step()
        s = self.settings
        self._weight = np.concatenate([np.full(model.nq, 1.0 / s.position_tolerance), np.full(model.nq, 1.0 / s.velocity_tolerance)])
        self._limit = np.ascontiguousarray(self.effort_limit, dtype=np.float64)
        self._target = np.empty((s.horizon, 2 * model.nq))  # reference states, filled on every call
        self._no_command = np.empty(0)

    def _optimize(self, t, q, qd):
        s, n = self.settings, len(self.joint_names)
        warm = self._warm_start(t) if s.initialization == "previous" else None
        init = 0 if warm is not None else (1 if s.initialization == "zero" else 2)
        u = warm if warm is not None else np.empty((s.horizon, n))
        previous = self._no_command if self._previous_command is None else self._previous_command
        target, dt = self._target, self.simulator.dt
        for k in range(s.horizon):
            q_d, qd_d, _ = self.reference(t + (k + 1) * dt)
            target[k, :n], target[k, n:] = q_d, qd_d
        report = np.zeros(4)
        _solve(self.step.floats, self.step.ints, *self._predictors(), np.concatenate([q, qd]), u, init, previous, self._weight, target,
               self._limit, 1.0 / s.smoothness_tolerance, 1.0 / s.effort_tolerance, s.levenberg,
               s.max_iterations, s.step_tolerance, report)
        status = int(report[3])
        if status == _BAD_STATE:
            raise ValueError(f"non-finite joint state q={q.tolist()} qd={qd.tolist()}")
        if status == _SINGULAR:
            raise ArithmeticError("singular system in the compiled MPC (joint-space inertia or stage Hessian)")
        if status == _NONFINITE:
            raise ArithmeticError("the prediction diverged (non-finite state)")
        iterations = int(report[0])
        return u, iterations, iterations, float(report[1]), float(report[2])


class FastPBDModelPredictiveController(FastModelPredictiveController):
    """The compiled MPC predicting with the compiled PBD step and its exact Jacobians.

    The Riccati Gauss-Newton solver of :class:`FastModelPredictiveController` (same settings,
    initializations, warm start, box limits, smoothness term, diagnostics and failures)
    with per-step ``A_k``, ``B_k`` of the PBD step by forward-mode tangents beside one run of the
    compiled kernel (:mod:`diffsim_ros.sim.pbd.fast_tangents`: the derivative of the computed step
    to rounding, as autograd through the torch PBD step gives it). The holding torque is the
    model's (as the torch controller's).

    Args:
        simulator: PBDSimulator the compiled kernel supports (``fast_rollout_supported()``).
        reference, settings: As :class:`~diffsim_ros.control.mpc.ModelPredictiveController`.

    Raises:
        ControlError: Another simulator, or a PBD set-up the compiled kernel does not cover.
    """

    @staticmethod
    def _check_simulator(simulator):
        if not isinstance(simulator, PBDSimulator) or simulator.fast_rollout_supported() is not None:
            why = simulator.fast_rollout_supported() if isinstance(simulator, PBDSimulator) else type(simulator).__name__
            raise ControlError(f"the compiled PBD MPC needs a PBDSimulator the compiled kernel supports ({why})")

    def _rigid_step(self):
        # the holding torque only: model terms, no integration
        return FastRigidStep(self.simulator.model, self.simulator.dt, 1, True, parameters=())

    def update_model(self, model):
        super().update_model(model)
        self.pbd = FastPBD.from_model(model)
        options = kernel_options(self.simulator.dt, self.simulator.settings)
        self._pbd_args = (self.pbd.fk, self.pbd.phys, self.pbd.springs, options)

    def _predictors(self):
        return None, self._pbd_args


def make_mpc(simulator, reference, settings=MPCSettings()):
    """The fastest MPC for ``simulator``: the compiled Riccati solver for the rigid implicit-Euler
    step (:func:`compiled_mpc_supports`), the same solver with the compiled PBD step and its
    exact Jacobians for a supported PBDSimulator, else the torch reference."""
    if compiled_mpc_supports(simulator):
        return FastModelPredictiveController(simulator, reference, settings)
    if isinstance(simulator, PBDSimulator) and simulator.fast_rollout_supported() is None:
        return FastPBDModelPredictiveController(simulator, reference, settings)
    return ModelPredictiveController(simulator, reference, settings)
