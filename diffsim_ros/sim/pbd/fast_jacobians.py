"""Exact Jacobians of the compiled PBD step with respect to joint state and torque, from Python.

One step of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD` snapshot with ``A = d(q+, qd+)/d(q,
qd)`` (2n, 2n) and ``B = d(q+, qd+)/d tau`` (2n, n) by vector forward mode
(:mod:`.fast_tangents`: one float64 run of the step, all input directions propagated beside
it; the MPC's). This is the derivative of the step as it is computed (``iterations``
projection sweeps per substep with the substep's one factorization, the closing velocity
projection, the active limit set decided on the values), the same function autograd
differentiates through the torch step. The tests hold it to the torch PBD step's autograd
Jacobians and to central finite differences (test/test_pbd_fast_jacobians.py,
test/test_pbd_fast_tangents.py).
"""

import numpy as np

from diffsim_ros.sim.pbd.fast import kernel_options
from diffsim_ros.sim.pbd.fast_tangents import step_tangents_into

__all__ = ["pbd_step_jacobians"]


def pbd_step_jacobians(pbd, q, qd, tau, dt, settings, with_state=True):
    """One step of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD` snapshot and its exact Jacobians.

    Args:
        pbd: FastPBD.
        q, qd, tau: Joint positions [rad], velocities [rad/s] and torques [N·m], each (n,).
        dt: Control period [s].
        settings: SolverSettings (substeps, iterations, compliance, limits; direct solver).
        with_state: False: only ``B`` (n directions instead of 3n), ``A`` is None.

    Returns:
        ``(q_next, qd_next, A, B)``: the state after the step, each (n,); ``A`` (2n, 2n) =
        ``d(q+, qd+)/d(q, qd)``; ``B`` (2n, n) = ``d(q+, qd+)/d tau``.
    """
    n = pbd.nq
    q, qd, tau = (np.ascontiguousarray(x, dtype=np.float64) for x in (q, qd, tau))
    if q.shape != (n,) or qd.shape != (n,) or tau.shape != (n,):
        raise ValueError(f"expected q, qd, tau of shape ({n},), got {q.shape}, {qd.shape}, {tau.shape}")
    options = kernel_options(dt, settings)
    q_next, qd_next, a, b = np.empty(n), np.empty(n), np.empty((2 * n, 2 * n)), np.empty((2 * n, n))
    step_tangents_into(pbd.fk, pbd.phys, pbd.springs, options, q, qd, tau, bool(with_state), q_next, qd_next, a, b)
    return q_next, qd_next, (a if with_state else None), b
