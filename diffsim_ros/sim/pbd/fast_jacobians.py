"""Exact Jacobians of the compiled PBD step with respect to joint state, torque and model parameters, from Python.

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

from diffsim_ros.sim.pbd.fast import kernel_options, physics_tensors
from diffsim_ros.sim.pbd.fast_tangents import PARAMETER_SEEDS, rollout_parameter_tangents, step_tangents_into

__all__ = ["parameter_tensors", "pbd_rollout_parameter_tangents", "pbd_step_jacobians"]


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


def parameter_tensors(model):
    """The model quantities a compiled PBD step depends on, as differentiable torch tensors.

    Returns:
        ``(seeded, held)``: ``seeded`` the snapshot arrays whose tangents
        :func:`pbd_rollout_parameter_tangents` propagates, in
        :data:`~diffsim_ros.sim.pbd.fast_tangents.PARAMETER_SEEDS` order (inverse masses,
        inertias and their inverses, COMs, joint frame columns, damping, friction, armature,
        lever and torsion springs' stiffness and offset); ``held`` the parameters it holds
        constant (joint origins, spring geometry, the torsion springs' damping, point
        springs): a direction that moves one of them is outside its scope.
    """
    phys = physics_tensors(model)
    p = model.params
    seeded = (phys[0], phys[1], phys[2], phys[4], phys[5], phys[6], phys[9], phys[10], phys[11],
              p.spring_stiffness, p.spring_offset, p.torsion_stiffness, p.torsion_offset)
    held = (p.joint_origin_xyz, p.spring_alpha1, p.spring_l1, p.spring_l2, p.spring_rest_length, p.torsion_damping,
            p.point_anchor_a, p.point_anchor_b, p.point_stiffness, p.point_rest_length, p.point_damping, model.gravity)
    return seeded, held


def pbd_rollout_parameter_tangents(pbd, dt, settings, seeds, q0, qd0, dq0, dqd0, tau, dtau):
    """Rollouts of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD` snapshot with the exact tangents
    of every state along ``D`` directions in its parameters, initial state and torques.

    Vector forward mode through the compiled step (:func:`~diffsim_ros.sim.pbd.fast_tangents.
    rollout_parameter_tangents`): one float64 run of every step with all directions beside it.

    Args:
        pbd: FastPBD of the model at the primal parameters.
        dt: Step [s]; ``settings``: SolverSettings (direct solver).
        seeds: Tangents of the :func:`parameter_tensors` ``seeded`` arrays, each (D, *shape) (numpy).
        q0, qd0: Initial joint positions [rad] and velocities [rad/s], (B, n); ``dq0``,
            ``dqd0`` their tangents (B, D, n).
        tau: Joint torques [N·m], (B, T, n); ``dtau`` their tangents (B, T, D, n).

    Returns:
        ``(q, qd, dq, dqd)``: the states after every step (B, T, n) and their tangents (B, T, D, n).
    """
    arrays = [np.ascontiguousarray(x, dtype=np.float64) for x in (q0, qd0, dq0, dqd0, tau, dtau)]
    q0, qd0, dq0, dqd0, tau, dtau = arrays
    batch, steps, n = tau.shape
    size = dtau.shape[2]
    if n != pbd.nq or q0.shape != (batch, n) or qd0.shape != (batch, n) or dq0.shape != (batch, size, n) \
            or dqd0.shape != (batch, size, n) or dtau.shape != (batch, steps, size, n):
        raise ValueError(f"inconsistent shapes for {pbd.nq} joints: q0 {q0.shape}, qd0 {qd0.shape}, dq0 {dq0.shape}, "
                         f"dqd0 {dqd0.shape}, tau {tau.shape}, dtau {dtau.shape}")
    seeds = tuple(np.ascontiguousarray(s, dtype=np.float64) for s in seeds)
    if len(seeds) != len(PARAMETER_SEEDS) or any(s.shape[0] != size for s in seeds):
        raise ValueError(f"expected {len(PARAMETER_SEEDS)} seed arrays of {size} directions each")
    q, qd = np.empty_like(tau), np.empty_like(tau)
    dq, dqd = np.empty_like(dtau), np.empty_like(dtau)
    rollout_parameter_tangents(pbd.fk, pbd.phys, pbd.springs, kernel_options(dt, settings), seeds, q0, qd0, dq0, dqd0,
                               tau, dtau, q, qd, dq, dqd)
    return q, qd, dq, dqd
