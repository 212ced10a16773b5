"""Exact Jacobians of the compiled PBD step with respect to joint state and torque.

The compiled step (:mod:`.fast`) is differentiated in forward mode by the complex step: the
same kernel runs on complex128 arrays with one input's imaginary part set to ``h = 1e-30``,
and the imaginary part of every output is ``h`` times that output's derivative along the
input. Unlike a finite difference there is no subtraction, so no cancellation: the error is
``O(h^2)`` relative (1e-60 here), i.e. the result is the derivative of the computed step to
rounding -- of the step as it is computed (``iterations`` projection sweeps per substep
with the substep's one factorization, the closing velocity projection, the active limit set
decided on the values), the same function autograd differentiates through the torch step. What makes this hold in the kernel: every branch, pivot and active
set decision reads real parts only, and the non-polynomial functions are complex-analytic
(numpy's ``sqrt``, ``sin``, ``cos``) or extended to first order, ``f(x + i y) = f(x) + i y
f'(x)``, exact to ``O(y^2)`` like the complex step itself (``_atan2``, ``_rodrigues``, ``_tanh``).

The kernel runs once per input direction, ``3 n`` runs for
``A = d(q+, qd+)/d(q, qd)`` (2n, 2n) and ``B = d(q+, qd+)/d tau`` (2n, n), ``n`` for ``B``
alone (an MPC's first step, whose start state is given); a complex run costs about 1.5
plain runs. The tests hold both to the torch PBD step's
autograd Jacobians and to central finite differences (test/test_pbd_fast_jacobians.py).
:mod:`.fast_tangents` computes the same Jacobians in one run, all directions at once (the
MPC's; ``method="tangents"`` of :func:`pbd_step_jacobians`); this module is its reference.
"""

import numpy as np

from diffsim_ros._compiled import njit
from diffsim_ros.sim.pbd.fast import FASTMATH, joint_step_into, kernel_options, work_area
from diffsim_ros.sim.pbd.fast_tangents import step_tangents_into

__all__ = ["COMPLEX_STEP", "pbd_step_jacobians", "step_jacobians_into"]

COMPLEX_STEP = 1e-30
"""Imaginary step h of the complex-step derivative (any h with h^2 below rounding and h x
the largest derivative far from underflow gives the same Jacobian)."""


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def step_jacobians_into(fk, phys, springs, settings, q, qd, tau, with_state, q_next, qd_next, a, b):
    """One PBD step and its exact Jacobians (complex step, one kernel run per input direction).

    Serial: on numba's threads (2 cores shared with other jobs) it ran 9x slower, and a
    parallel kernel called from the MPC solver cannot be cached.

    Args:
        fk, phys, springs: The arrays of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD`.
        settings: ``(dt [s], substeps, iterations, compliance, limits)``.
        q, qd, tau: Joint positions [rad], velocities [rad/s], torques [N·m], each (n,).
        with_state: Whether to fill ``a`` (2n runs) as well as ``b`` (n runs); without it
            ``a`` is left untouched (an MPC's first step: its start state is fixed).
        q_next, qd_next: (n,) receive the state after the step.
        a: (2n, 2n) receives ``d(q+, qd+)/d(q, qd)`` (rows and columns ordered q then qd).
        b: (2n, n) receives ``d(q+, qd+)/d tau`` [rad/(N·m), rad/(s·N·m)].
    """
    n = q.shape[0]
    zq = np.zeros(n, np.complex128)
    w, targets = work_area(n, zq), np.empty(n, np.complex128)
    zqd, ztau, zq_out, zqd_out = np.zeros_like(zq), np.zeros_like(zq), np.zeros_like(zq), np.zeros_like(zq)
    h = COMPLEX_STEP
    for d in range(0 if with_state else 2 * n, 3 * n):
        for i in range(n):
            zq[i], zqd[i], ztau[i] = q[i], qd[i], tau[i]
        if d < n:
            zq[d] += 1j * h
        elif d < 2 * n:
            zqd[d - n] += 1j * h
        else:
            ztau[d - 2 * n] += 1j * h
        targets[:] = np.nan
        joint_step_into(fk, phys, springs, settings, w, targets, zq, zqd, ztau, zq_out, zqd_out)
        for i in range(n):
            if d < 2 * n:
                a[i, d], a[n + i, d] = zq_out[i].imag / h, zqd_out[i].imag / h
            else:
                b[i, d - 2 * n], b[n + i, d - 2 * n] = zq_out[i].imag / h, zqd_out[i].imag / h
    for i in range(n):  # every run's real parts are the step itself (to rounding)
        q_next[i], qd_next[i] = zq_out[i].real, zqd_out[i].real


def pbd_step_jacobians(pbd, q, qd, tau, dt, settings, with_state=True, method="complex_step"):
    """One step of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD` snapshot and its exact Jacobians.

    Args:
        pbd: FastPBD.
        q, qd, tau: Joint positions [rad], velocities [rad/s] and torques [N·m], each (n,).
        dt: Control period [s].
        settings: SolverSettings (substeps, iterations, compliance, limits; direct solver).
        with_state: False: only ``B`` (n directions instead of 3n), ``A`` is None.
        method: ``"complex_step"`` (one complex kernel run per direction, :func:`step_jacobians_into`)
            or ``"tangents"`` (one run with all directions in vector forward mode,
            :func:`~diffsim_ros.sim.pbd.fast_tangents.step_tangents_into`; same derivative, faster).

    Returns:
        ``(q_next, qd_next, A, B)``: the state after the step, each (n,); ``A`` (2n, 2n) =
        ``d(q+, qd+)/d(q, qd)``; ``B`` (2n, n) = ``d(q+, qd+)/d tau``.
    """
    kernels = {"complex_step": step_jacobians_into, "tangents": step_tangents_into}
    if method not in kernels:
        raise ValueError(f"unknown method {method!r}; known: {sorted(kernels)}")
    n = pbd.nq
    q, qd, tau = (np.ascontiguousarray(x, dtype=np.float64) for x in (q, qd, tau))
    if q.shape != (n,) or qd.shape != (n,) or tau.shape != (n,):
        raise ValueError(f"expected q, qd, tau of shape ({n},), got {q.shape}, {qd.shape}, {tau.shape}")
    options = kernel_options(dt, settings)
    q_next, qd_next, a, b = np.empty(n), np.empty(n), np.empty((2 * n, 2 * n)), np.empty((2 * n, n))
    kernels[method](pbd.fk, pbd.phys, pbd.springs, options, q, qd, tau, bool(with_state), q_next, qd_next, a, b)
    return q_next, qd_next, (a if with_state else None), b
