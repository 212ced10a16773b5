"""Exact Jacobians of the compiled PBD step in vector forward mode: one primal run, all tangents.

The step runs once, in float64 (the very phases of :mod:`.fast`), and beside every phase the
tangents of its state along all ``D`` input directions are propagated at once (``D = 3n`` for
``A`` and ``B``, ``n`` for ``B`` alone). Tangent arrays are direction-first, ``(D, ...)``.

Representation: a position or velocity has a plain tangent; an orientation ``R`` has a world
rotation vector ``theta`` with ``dR = [theta]x R`` (so a rotated vector ``v = R v_local`` has
``dv = theta x v``); the rotation ``exp(phi)`` has ``theta = J_l(phi) dphi`` (the left
Jacobian of SO(3)). A linear solve ``x = A^-1 b`` of the joint system
``A = S K + alpha I + E (R - alpha) E^T`` (``K = J M^-1 J^T``, ``S = I + E diag(sigma - 1) E^T``,
``E`` the joints' free axes; :func:`~diffsim_ros.sim.pbd.fast.solve_system` for both the rigid and
the compliant factorizations) has the tangent ``dx = A^-1 (db - dA x)``: the primal's factors
solve for it, and ``dA x`` is formed from the tangents of the levers, axes, inertias and row
constants, so the factorization itself is never differentiated.

This is the derivative of the step as computed, the one autograd through the torch step gives
(same projection sweeps, the active limit set decided on the values); the tests hold it to that
to 1e-9 and to central differences through the compiled step (test/test_pbd_fast_tangents.py,
test/test_pbd_fast_jacobians.py). Scope: that of the compiled kernel (fixed-base serial chains
of revolute joints, every spring law).
"""

import math
from collections import namedtuple

import numpy as np

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.fast import add_length_gradient, point_end
from diffsim_ros.sim.pbd.fast import (
    KICK_FINISH, KICK_FULL, KICK_START, SMALL_ANGLE_SQUARED, FASTMATH, accelerate_bodies, apply_impulses, row_blocks, close_substep,
    factor_system, frames_into, joint_load, write_joint_state, limit_targets, predict_positions, row_rhs, set_spin, so3_exp_into, solve_system,
    solve_system_columns, state_from_joints, turn_poses, velocity_rhs, work_area,
)

__all__ = ["parameter_area", "PARAMETER_SEEDS", "rollout_parameter_tangents", "step_tangents_core", "step_tangents_into",
           "step_tangents_with", "tangent_area"]

# Called from compiled code only: no Python wrappers (unboxing the work areas' ~100 arrays from
# Python objects is most of a small function's compile time).
_internal = njit(cache=True, error_model="numpy", fastmath=FASTMATH, no_cpython_wrapper=True, no_cfunc_wrapper=True)


_Tangents = namedtuple(
    "_Tangents",
    [
        # particles (D, N, 3): positions, orientations (world rotation vectors), velocities,
        # the substep's start poses and turn, the gyroscopic term's spins
        "pos", "rot", "vel", "omega", "pos0", "rot0", "phi", "spin", "start", "previous", "last",
        # the orientations the inertias were taken at, torques on the particles (D, N, 3)
        "inertia_rot", "torque",
        # joint frames (D, n, 3)
        "lever_p", "lever_c", "axis_p", "axis_c", "ref_p", "ref_c", "anchor",
        # joint quantities (D, n): angles, rates, implicit damping, row scale and offset, spring terms
        "q", "rate", "spin_rate", "damping", "sigma", "offset", "spring", "spring_slope", "grad",
        # row constants (D, n, 3); right-hand sides, solutions and multipliers direction-last
        # (n, 6, D), as the joint system's solve takes its columns, with that solve's scratch
        # (N, 6, D), (n, 6, D), (n, D)
        "lever_child", "lever_parent", "free", "rhs", "solution", "lam", "solve_u", "solve_correction", "solve_z",
        # FK tangents of the bodies (D, n, 3) and the joints' angular velocities (D, n, 3)
        "body_rot", "body_pos", "z_ang",
        # the tangent of M^-1 J^T x with x held (D, N, 6)
        "response",
        # the input directions: tangents of q, qd and tau (D, n)
        "seed_q", "seed_qd", "seed_tau",
        # primal scratch: a solution (n, 6), its wrenches J^T x and response M^-1 J^T x (N, 6),
        # K x (n, 6), the limit targets (n,), small vectors (8, 6), a rotation (3, 3)
        "x", "wrench", "response0", "kx", "targets", "small", "turn",
        # parameter directions (:func:`parameter_area`; empty, D = 0, in a state/torque area):
        # (1,) whether the directions move the snapshot's parameters; the tangents of its
        # inverse masses (D, N), inertias and inverse inertias in body frames (D, N, 3, 3),
        # COMs (D, N, 3), joint frame columns (D, n, 3, 3), damping, friction, armature (D, n),
        # lever springs' stiffness and offset (D, s), torsion springs' (D, t); and scratch: the
        # world inertias' and inverse inertias' parameter tangents at the forces' poses (D, N, 3, 3)
        "parametric", "p_inv_mass", "p_inertia", "p_inv_inertia", "p_com", "p_local_parent", "p_local_child",
        "p_damping", "p_friction", "p_armature", "p_lever_stiffness", "p_lever_offset",
        "p_torsion_stiffness", "p_torsion_offset", "p_inertia_w", "p_inv_inertia_w",
    ],
)

PARAMETER_SEEDS = ("inv_mass", "inertia", "inv_inertia", "com", "local_parent", "local_child", "damping", "friction",
                   "armature", "lever_stiffness", "lever_offset", "torsion_stiffness", "torsion_offset")
"""The snapshot arrays whose tangents :func:`parameter_area` seeds, in its ``seeds`` order
(``_Physics`` fields, then dynamics.fast.SpringArrays fields without their ``lever_`` /
``torsion_`` kind): every other array of the snapshot is held constant."""


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def tangent_area(n, with_state):
    """Tangent work area of :func:`step_tangents_with` for ``n`` joints.

    Args:
        n: Joints.
        with_state: True: the ``3n`` directions of ``A`` and ``B`` (the torques, then the
            positions and the velocities); False: the ``n`` torques alone (``B``).
    """
    size = 3 * n if with_state else n
    seeds = (np.zeros((size, n)), np.zeros((size, n)), np.zeros((size, n)))
    for i in range(n):  # the torques first: B alone is the leading n directions
        seeds[2][i, i] = 1.0
        if with_state:
            seeds[0][n + i, i] = 1.0
            seeds[1][2 * n + i, i] = 1.0
    return _area(n, size, seeds, 0, 0, 0)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def parameter_area(n, size, seeds):
    """Tangent work area of :func:`step_tangents_core` along ``size`` parameter directions.

    Args:
        n: Joints.
        size: Directions D.
        seeds: The snapshot arrays' tangents along the directions, in :data:`PARAMETER_SEEDS`
            order, each (D, *shape of the array) (copied in). The state and torque seeds
            (``seed_q``, ``seed_qd``, ``seed_tau``, (D, n)) start at zero: the caller sets them.
    """
    t = _area(n, size, (np.zeros((size, n)), np.zeros((size, n)), np.zeros((size, n))), size,
              seeds[9].shape[1], seeds[11].shape[1])
    t.parametric[0] = True
    for target, source in ((t.p_inv_mass, seeds[0]), (t.p_damping, seeds[6]), (t.p_friction, seeds[7]),
                           (t.p_armature, seeds[8]), (t.p_lever_stiffness, seeds[9]), (t.p_lever_offset, seeds[10]),
                           (t.p_torsion_stiffness, seeds[11]), (t.p_torsion_offset, seeds[12])):
        target[:, :] = source
    t.p_inertia[:, :, :, :] = seeds[1]
    t.p_inv_inertia[:, :, :, :] = seeds[2]
    t.p_com[:, :, :] = seeds[3]
    t.p_local_parent[:, :, :, :] = seeds[4]
    t.p_local_child[:, :, :, :] = seeds[5]
    return t


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _area(n, size, seeds, psize, levers, torsions):
    """A tangent area of ``size`` directions with the given state/torque seeds and ``psize``
    (0 or ``size``) parameter directions."""
    particles = n + 1

    def p3():
        return np.zeros((size, particles, 3))

    def j3():
        return np.zeros((size, n, 3))

    def j1():
        return np.zeros((size, n))

    return _Tangents(
        p3(), p3(), p3(), p3(), p3(), p3(), p3(), p3(), p3(), p3(), p3(),
        p3(), p3(),
        j3(), j3(), j3(), j3(), j3(), j3(), j3(),
        j1(), j1(), j1(), j1(), j1(), j1(), j1(), j1(), j1(),
        j3(), j3(), j3(), np.zeros((n, 6, size)), np.zeros((n, 6, size)), np.zeros((n, 6, size)),
        np.zeros((particles, 6, size)), np.zeros((n, 6, size)), np.zeros((n, size)),
        j3(), j3(), j3(),
        np.zeros((size, particles, 6)),
        seeds[0], seeds[1], seeds[2],
        np.zeros((n, 6)), np.zeros((particles, 6)), np.zeros((particles, 6)), np.zeros((n, 6)), np.full(n, np.nan),
        np.zeros((8, 6)), np.zeros((3, 3)),
        np.zeros(1, dtype=np.bool_), np.zeros((psize, particles)), np.zeros((psize, particles, 3, 3)),
        np.zeros((psize, particles, 3, 3)), np.zeros((psize, particles, 3)), np.zeros((psize, n, 3, 3)),
        np.zeros((psize, n, 3, 3)), np.zeros((psize, n)), np.zeros((psize, n)), np.zeros((psize, n)),
        np.zeros((psize, levers)), np.zeros((psize, levers)), np.zeros((psize, torsions)), np.zeros((psize, torsions)),
        np.zeros((psize, particles, 3, 3)), np.zeros((psize, particles, 3, 3)),
    )


# ---------------------------------------------------------------- small vector helpers


@_internal
def _cross_add(a, b, scale, out):
    """``out += scale * (a x b)`` for 3-vectors."""
    out[0] += scale * (a[1] * b[2] - a[2] * b[1])
    out[1] += scale * (a[2] * b[0] - a[0] * b[2])
    out[2] += scale * (a[0] * b[1] - a[1] * b[0])


@_internal
def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@_internal
def _rotated(theta, v, out):
    """``out = theta x v``: the tangent of a rotated vector ``v`` (3,) when its rotation turns by ``theta``."""
    out[0] = theta[1] * v[2] - theta[2] * v[1]
    out[1] = theta[2] * v[0] - theta[0] * v[2]
    out[2] = theta[0] * v[1] - theta[1] * v[0]


@_internal
def _mat_add(mat, v, scale, out):
    """``out += scale * mat @ v`` for a 3x3 matrix and 3-vectors."""
    for r in range(3):
        out[r] += scale * (mat[r, 0] * v[0] + mat[r, 1] * v[1] + mat[r, 2] * v[2])


@_internal
def _add_rotated_columns(rot, local, lever, axis, ref):
    """``lever, axis, ref += rot @ local[:, 0], rot @ local[:, 1], rot @ local[:, 2]`` (3,) each."""
    for r in range(3):
        for c in range(3):
            lever[r] += rot[r, c] * local[c, 0]
            axis[r] += rot[r, c] * local[c, 1]
            ref[r] += rot[r, c] * local[c, 2]


@_internal
def _congruence_into(rot, mat, out):
    """``out = rot @ mat @ rot^T`` (3, 3)."""
    for r in range(3):
        for c in range(3):
            acc = 0.0
            for a in range(3):
                for b in range(3):
                    acc += rot[r, a] * mat[a, b] * rot[c, b]
            out[r, c] = acc


@_internal
def _world_axis(rot, axis, out):
    """``out = rot @ axis`` (3,)."""
    for r in range(3):
        out[r] = rot[r, 0] * axis[0] + rot[r, 1] * axis[1] + rot[r, 2] * axis[2]


# ---------------------------------------------------------------- kinematics


@_internal
def _t_placements(fk, dq, rot_w, pos_w, theta, dpos):
    """Tangents of the world placements of :func:`~diffsim_ros.dynamics.fast.placements_into`.

    Args:
        fk: The model's kinematics (revolute joints).
        dq: Joint position tangents (D, n).
        rot_w, pos_w: The placements (n, 3, 3), (n, 3) at the primal ``q``.
        theta, dpos: (D, n, 3) receive the rotation-vector and position tangents.
    """
    parents, axis = fk[0], fk[3]
    size, n = dq.shape
    z, e = np.empty(3), np.empty(3)
    for k in range(n):
        p = parents[k]
        _world_axis(rot_w[k], axis[k], z)
        for r in range(3):
            e[r] = pos_w[k, r] - (pos_w[p, r] if p >= 0 else 0.0)
        for d in range(size):
            for r in range(3):
                theta[d, k, r] = (theta[d, p, r] if p >= 0 else 0.0) + z[r] * dq[d, k]
                dpos[d, k, r] = dpos[d, p, r] if p >= 0 else 0.0
            if p >= 0:
                _cross_add(theta[d, p], e, 1.0, dpos[d, k])


@_internal
def _t_state_from_joints(fk, w, t, qd, dq, dqd):
    """Tangents of :func:`~diffsim_ros.sim.pbd.fast.state_from_joints` (particles from joints)."""
    parents, axis = fk[0], fk[3]
    rot_w, pos_w = w.placements[2], w.placements[3]
    size, n = dq.shape
    _t_placements(fk, dq, rot_w, pos_w, t.body_rot, t.body_pos)
    z, c = np.empty(3), np.empty(3)
    for array in (t.pos, t.rot, t.vel, t.omega):
        array[:, 0, :] = 0.0
    for k in range(n):
        p = parents[k] + 1
        _world_axis(rot_w[k], axis[k], z)
        for r in range(3):
            c[r] = w.pos[k + 1, r] - pos_w[k, r]
        for d in range(size):
            th = t.body_rot[d, k]
            for r in range(3):
                t.rot[d, k + 1, r] = th[r]
                t.pos[d, k + 1, r] = t.body_pos[d, k, r]
                t.z_ang[d, k, r] = z[r] * dqd[d, k]
            _cross_add(th, c, 1.0, t.pos[d, k + 1])
            if t.parametric[0]:  # the COM moves in its body
                _mat_add(rot_w[k], t.p_com[d, k + 1], 1.0, t.pos[d, k + 1])
            _cross_add(th, z, qd[k], t.z_ang[d, k])
            for r in range(3):
                t.omega[d, k + 1, r] = t.omega[d, p, r] + t.z_ang[d, k, r]
    e = np.empty(3)
    for k in range(n):
        for d in range(size):
            t.vel[d, k + 1, :] = 0.0
        j = k
        while j >= 0:  # v_k = sum over supporting joints of w_j x (c_k - o_j)
            for r in range(3):
                e[r] = w.pos[k + 1, r] - w.origin[j, r]
            for d in range(size):
                _cross_add(t.z_ang[d, j], e, 1.0, t.vel[d, k + 1])
                for r in range(3):
                    c[r] = t.pos[d, k + 1, r] - t.body_pos[d, j, r]
                _cross_add(w.z_ang[j], c, 1.0, t.vel[d, k + 1])
            j = parents[j]


@_internal
def _t_frames(w, t):
    """Tangents of :func:`~diffsim_ros.sim.pbd.fast.frames_into` at the primal frames in ``w``."""
    size, n = t.q.shape
    for d in range(size):
        for j in range(n):
            tp, tc = t.rot[d, j], t.rot[d, j + 1]
            _rotated(tp, w.lever_p[j], t.lever_p[d, j])
            _rotated(tp, w.axis_p[j], t.axis_p[d, j])
            _rotated(tp, w.ref_p[j], t.ref_p[d, j])
            _rotated(tc, w.lever_c[j], t.lever_c[d, j])
            _rotated(tc, w.axis_c[j], t.axis_c[d, j])
            _rotated(tc, w.ref_c[j], t.ref_c[d, j])
            if t.parametric[0]:  # the frame columns move in their bodies (a lever with the COM)
                _add_rotated_columns(w.rot[j], t.p_local_parent[d, j], t.lever_p[d, j], t.axis_p[d, j], t.ref_p[d, j])
                _add_rotated_columns(w.rot[j + 1], t.p_local_child[d, j], t.lever_c[d, j], t.axis_c[d, j], t.ref_c[d, j])
            for r in range(3):
                t.anchor[d, j, r] = t.pos[d, j + 1, r] + t.lever_c[d, j, r] - t.pos[d, j, r] - t.lever_p[d, j, r]


@_internal
def _t_angles(w, t):
    """``t.q``: tangents of the joint angles ``atan2(a . (u_p x u_c), u_p . u_c)`` (fast._angle)."""
    size, n = t.q.shape
    c, dc = t.small[0, :3], t.small[1, :3]
    for j in range(n):
        up, uc, a = w.ref_p[j], w.ref_c[j], w.axis_c[j]
        c[:] = 0.0
        _cross_add(up, uc, 1.0, c)
        sine, cosine = _dot(a, c), _dot(up, uc)
        scale = 1.0 / (sine * sine + cosine * cosine)
        for d in range(size):
            dup, duc = t.ref_p[d, j], t.ref_c[d, j]
            dc[:] = 0.0
            _cross_add(dup, uc, 1.0, dc)
            _cross_add(up, duc, 1.0, dc)
            d_sine = _dot(t.axis_c[d, j], c) + _dot(a, dc)
            d_cosine = _dot(dup, uc) + _dot(up, duc)
            t.q[d, j] = (cosine * d_sine - sine * d_cosine) * scale


@_internal
def _t_rates(w, t, omega, d_omega, out):
    """``out`` (D, n): tangents of the joint rates ``a . (w_c - w_p)`` (fast._rate) of ``omega`` (N, 3)."""
    size, n = out.shape
    for j in range(n):
        a = w.axis_c[j]
        w0, w1, w2 = omega[j + 1, 0] - omega[j, 0], omega[j + 1, 1] - omega[j, 1], omega[j + 1, 2] - omega[j, 2]
        for d in range(size):
            da, dw = t.axis_c[d, j], d_omega[d]
            out[d, j] = (
                da[0] * w0 + da[1] * w1 + da[2] * w2
                + a[0] * (dw[j + 1, 0] - dw[j, 0]) + a[1] * (dw[j + 1, 1] - dw[j, 1]) + a[2] * (dw[j + 1, 2] - dw[j, 2])
            )


# ---------------------------------------------------------------- forces


@_internal
def _t_point_springs(springs, fk, w, t):
    """Add the point springs' share to ``t.spring`` and ``t.spring_slope`` (dynamics.fast.spring_torques_into).

    Reads the placements the primal left in ``w.placements`` (at ``w.q``).
    """
    parents, axis = fk[0], fk[3]
    rot_w, pos_w = w.placements[2], w.placements[3]
    q, qd = w.q, w.spin_rate
    size, n = t.q.shape
    _t_placements(fk, t.q, rot_w, pos_w, t.body_rot, t.body_pos)
    ends, d_ends, unit, d_unit, grad = np.empty((2, 3)), np.empty((2, 3)), np.empty(3), np.empty(3), np.empty(n)
    z, e, de, dz = np.empty(3), np.empty(3), np.empty(3), np.empty(3)
    for s in range(springs.point_body_a.shape[0]):
        bodies = (springs.point_body_a[s], springs.point_body_b[s])
        point_end(springs, 0, s, rot_w, pos_w, ends[0])
        point_end(springs, 1, s, rot_w, pos_w, ends[1])
        length = math.sqrt((ends[1, 0] - ends[0, 0]) ** 2 + (ends[1, 1] - ends[0, 1]) ** 2 + (ends[1, 2] - ends[0, 2]) ** 2)
        stretch = length - springs.point_rest_length[s]
        if springs.point_tension_only[s] and not stretch > 0.0:
            continue  # a slack cable, as the primal decides
        for r in range(3):
            unit[r] = (ends[1, r] - ends[0, r]) / length
        grad[:] = 0.0
        add_length_gradient(fk, bodies[1], 1.0, ends[1], unit, rot_w, pos_w, grad)
        add_length_gradient(fk, bodies[0], -1.0, ends[0], unit, rot_w, pos_w, grad)
        rate = _dot_n(grad, qd)
        elastic, c = -springs.point_stiffness[s] * stretch, springs.point_damping[s]
        for d in range(size):
            for side in range(2):
                body = bodies[side]
                for r in range(3):
                    d_ends[side, r] = t.body_pos[d, body, r] if body >= 0 else 0.0
                    e[r] = ends[side, r] - pos_w[body, r]
                if body >= 0:
                    _cross_add(t.body_rot[d, body], e, 1.0, d_ends[side])
            d_length = 0.0
            for r in range(3):
                d_length += unit[r] * (d_ends[1, r] - d_ends[0, r])
            for r in range(3):
                d_unit[r] = (d_ends[1, r] - d_ends[0, r] - unit[r] * d_length) / length
            dgrad = t.grad[d]
            dgrad[:] = 0.0
            for side in range(2):
                j = bodies[side]
                while j >= 0:  # d/dq_j of (z_j x (end - o_j)) . unit
                    _world_axis(rot_w[j], axis[j], z)
                    for r in range(3):
                        e[r] = ends[side, r] - pos_w[j, r]
                        de[r] = d_ends[side, r] - t.body_pos[d, j, r]
                        dz[r] = 0.0
                    _cross_add(t.body_rot[d, j], z, 1.0, dz)
                    c0, c1, c2 = z[1] * e[2] - z[2] * e[1], z[2] * e[0] - z[0] * e[2], z[0] * e[1] - z[1] * e[0]
                    dc0 = dz[1] * e[2] - dz[2] * e[1] + z[1] * de[2] - z[2] * de[1]
                    dc1 = dz[2] * e[0] - dz[0] * e[2] + z[2] * de[0] - z[0] * de[2]
                    dc2 = dz[0] * e[1] - dz[1] * e[0] + z[0] * de[1] - z[1] * de[0]
                    sign = 1.0 if side == 1 else -1.0
                    dgrad[j] += sign * (dc0 * unit[0] + dc1 * unit[1] + dc2 * unit[2] + c0 * d_unit[0] + c1 * d_unit[1] + c2 * d_unit[2])
                    j = parents[j]
            d_rate = _dot_n(dgrad, qd) + _dot_n(grad, t.spin_rate[d])
            for j in range(n):
                dqd = t.spin_rate[d, j]
                t.spring[d, j] += -springs.point_stiffness[s] * d_length * grad[j] + elastic * dgrad[j] - c * (
                    dgrad[j] * (rate - grad[j] * qd[j]) + grad[j] * (d_rate - dgrad[j] * qd[j] - grad[j] * dqd)
                )
                t.spring_slope[d, j] += 2.0 * c * grad[j] * dgrad[j]


@_internal
def _dot_n(a, b):
    acc = 0.0
    for i in range(a.shape[0]):
        acc += a[i] * b[i]
    return acc


@_internal
def _t_joint_springs(springs, w, t):
    """``t.spring``, ``t.spring_slope``: tangents of the lever and torsion springs' torques at ``w.q``
    (dynamics.fast.spring_torques_into; the point springs add theirs in :func:`_t_point_springs`)."""
    t.spring[:, :] = 0.0
    t.spring_slope[:, :] = 0.0
    size = t.q.shape[0]
    for s in range(springs.lever_joints.shape[0]):
        j = springs.lever_joints[s]
        l1, l2, rest = springs.lever_l1[s], springs.lever_l2[s], springs.lever_rest_length[s]
        phi = math.pi - springs.lever_alpha1[s] - springs.lever_offset[s] + w.q[j]
        sine, cosine = math.sin(phi), math.cos(phi)
        length = math.sqrt(l1**2 + l2**2 - 2.0 * l1 * l2 * cosine)
        d_length = l1 * l2 * sine / length  # d length / d phi
        slope = -springs.lever_stiffness[s] * l1 * l2 * (
            d_length * sine / length + (length - rest) * (cosine / length - sine * d_length / (length * length))
        )
        for d in range(size):
            t.spring[d, j] += slope * t.q[d, j]
        if t.parametric[0]:  # linear in the stiffness; the offset shifts the angle
            unit = -(length - rest) * l1 * l2 * sine / length
            for d in range(size):
                t.spring[d, j] += unit * t.p_lever_stiffness[d, s] - slope * t.p_lever_offset[d, s]
    for s in range(springs.torsion_joints.shape[0]):
        j = springs.torsion_joints[s]
        for d in range(size):
            t.spring[d, j] -= springs.torsion_stiffness[s] * t.q[d, j]
        if t.parametric[0]:
            stretch, k = w.q[j] - springs.torsion_offset[s], springs.torsion_stiffness[s]
            for d in range(size):
                t.spring[d, j] += -stretch * t.p_torsion_stiffness[d, s] + k * t.p_torsion_offset[d, s]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _t_before_forces(w, t):
    """Tangents of what the forces read at the current poses: angles, rates, spin rates, inertia poses."""
    _t_angles(w, t)
    _t_rates(w, t, w.omega, t.omega, t.rate)
    _t_rates(w, t, w.spin, t.spin, t.spin_rate)
    t.inertia_rot[:, :, :] = t.rot


@_internal
def _t_joint_torques(phys, w, t, tau, phase):
    """``t.torque``, ``t.damping``: tangents of the joint torques on the particles and the implicit damping
    (fast.joint_load)."""
    coulomb, scale = phys.friction, phys.friction_scale
    size, n = t.q.shape
    t.torque[:, :, :] = 0.0
    parametric = t.parametric[0]
    for j in range(n):
        rate = w.rate[j]
        torque, damping, tanh, slope = joint_load(phys, w, tau, j, phase)
        a = w.axis_c[j]
        unit_tanh = math.tanh(rate / scale) if parametric else 0.0  # the friction's shape per unit coefficient
        for d in range(size):
            d_rate = t.rate[d, j]
            d_torque, d_damping = t.seed_tau[d, j] + t.spring[d, j], t.spring_slope[d, j]
            if coulomb[j] != 0.0:
                d_tanh = (1.0 - tanh * tanh) * d_rate / scale
                d_slope = -2.0 * coulomb[j] / scale * tanh * d_tanh
                d_damping += d_slope
                d_torque += d_slope * rate + slope * d_rate - coulomb[j] * d_tanh
            if parametric:  # the slope and the torque are linear in the coefficient, zero or not
                d_coulomb = t.p_friction[d, j]
                d_slope = d_coulomb / scale * (1.0 - unit_tanh * unit_tanh)
                d_damping += t.p_damping[d, j] + d_slope
                d_torque += d_slope * rate - d_coulomb * unit_tanh
            if phase == KICK_FULL:
                d_torque -= 0.5 * (d_damping * rate + damping * d_rate)
            t.damping[d, j] = 0.5 * d_damping
            for r in range(3):
                change = d_torque * a[r] + torque * t.axis_c[d, j, r]
                t.torque[d, j + 1, r] += change
                t.torque[d, j, r] -= change


@_internal
def _t_world_inertias(phys, w, t):
    """``t.p_inertia_w``, ``t.p_inv_inertia_w``: the parameter tangents ``R dI R^T`` of the world
    inertias and their inverses at the current orientations (the forces' poses, held over the substep)."""
    size, particles = t.p_inertia.shape[0], t.p_inertia.shape[1]
    for d in range(size):
        for i in range(particles):
            _congruence_into(w.rot[i], t.p_inertia[d, i], t.p_inertia_w[d, i])
            _congruence_into(w.rot[i], t.p_inv_inertia[d, i], t.p_inv_inertia_w[d, i])


@_internal
def _t_kick(w, t, h, phase):
    """Tangent of the angular kick ``omega += kick h I^-1 (torque - s x I s)`` (fast.accelerate_bodies).

    With ``dI v = theta x (I v) - I (theta x v)`` for the world inertias and their inverses.
    """
    kick = 1.0 if phase == KICK_FULL else 0.5
    size, particles = t.omega.shape[0], t.omega.shape[1]
    small = t.small
    m, g, ag, ts, tg, dm, dg = small[0, :3], small[1, :3], small[2, :3], small[3, :3], small[4, :3], small[5, :3], small[6, :3]
    for i in range(particles):
        s, iw, ai = w.spin[i], w.inertia_w[i], w.inv_inertia_w[i]
        m[:] = 0.0
        _mat_add(iw, s, 1.0, m)
        for r in range(3):
            g[r] = w.torque[i, r]
        _cross_add(s, m, -1.0, g)
        ag[:] = 0.0
        _mat_add(ai, g, 1.0, ag)
        for d in range(size):
            th, ds = t.inertia_rot[d, i], t.spin[d, i]
            ts[:] = 0.0
            tg[:] = 0.0
            dm[:] = 0.0
            _cross_add(th, s, 1.0, ts)
            _cross_add(th, g, 1.0, tg)
            _cross_add(th, m, 1.0, dm)  # dm = theta x m + I (ds - theta x s)
            for r in range(3):
                ts[r] = ds[r] - ts[r]
            _mat_add(iw, ts, 1.0, dm)
            if t.parametric[0]:  # + dI s, and the inverse inertia's dI^-1 g
                _mat_add(t.p_inertia_w[d, i], s, 1.0, dm)
                _mat_add(t.p_inv_inertia_w[d, i], g, kick * h, t.omega[d, i])
            for r in range(3):
                dg[r] = t.torque[d, i, r] - tg[r]  # minus theta x g: the inverse inertia's share
            _cross_add(ds, m, -1.0, dg)
            _cross_add(s, dm, -1.0, dg)
            _cross_add(th, ag, kick * h, t.omega[d, i])
            _mat_add(ai, dg, kick * h, t.omega[d, i])


@_internal
def _t_blocks(armature, w, t, h, limits, active_targets):
    """Tangents of the row constants of :func:`~diffsim_ros.sim.pbd.fast.row_blocks` (limit targets included);
    the armature ``a`` (n,) [kg·m²] adds to the row scale and ``a h rate`` to its offset."""
    size, n = t.q.shape
    parametric = t.parametric[0]
    for d in range(size):
        for j in range(n):
            for r in range(3):
                t.lever_child[d, j, r] = t.lever_c[d, j, r]
                t.lever_parent[d, j, r] = t.pos[d, j + 1, r] + t.lever_c[d, j, r] - t.pos[d, j, r]
                t.free[d, j, r] = t.axis_c[d, j, r]
            t.sigma[d, j], t.offset[d, j] = h * t.damping[d, j], armature[j] * h * t.rate[d, j]
            if parametric:
                t.sigma[d, j] += t.p_armature[d, j]
                t.offset[d, j] += t.p_armature[d, j] * h * w.rate[j]
            if limits and not math.isnan(active_targets[j]):  # target = limit - q
                t.sigma[d, j], t.offset[d, j] = 0.0, -t.q[d, j]


# ---------------------------------------------------------------- the joint system's solves


# The helpers below take arrays, not the work areas: a compiled function that passes the work
# areas (~100 arrays) on to another one pays for copying them on every call (~1.5 us measured).


@_internal
def _wrenches(inv_mass, inv_inertia, lever_child, lever_parent, x, wrench, response):
    """``wrench = J^T x`` and ``response = M^-1 J^T x`` (N, 6) of row impulses ``x`` (n, 6) (as fast.apply_impulses)."""
    wrench[:, :] = 0.0
    for j in range(x.shape[0]):
        for side in range(2):
            k, sign, r = (j + 1, 1.0, lever_child[j]) if side == 0 else (j, -1.0, lever_parent[j])
            for c in range(3):
                wrench[k, c] += sign * x[j, c]
                wrench[k, 3 + c] += sign * x[j, 3 + c]
            _cross_add(r, x[j, :3], sign, wrench[k, 3:])
    for i in range(wrench.shape[0]):
        for c in range(3):
            response[i, c] = inv_mass[i] * wrench[i, c]
            response[i, 3 + c] = 0.0
        _mat_add(inv_inertia[i], wrench[i, 3:], 1.0, response[i, 3:])


@_internal
def _row_velocities(lever_child, lever_parent, motion, j, out):
    """``out`` (6,) = row ``j`` of ``J motion`` for particle motions (N, 6) [linear, angular] (as fast.velocity_rhs)."""
    c, p = motion[j + 1], motion[j]
    for r in range(3):
        out[r] = c[r] - p[r]
        out[3 + r] = c[3 + r] - p[3 + r]
    _cross_add(c[3:], lever_child[j], 1.0, out[:3])
    _cross_add(p[3:], lever_parent[j], -1.0, out[:3])


@_internal
def _scaled_rows_tangent(a, da, sigma, d_sigma, y, dy, out):
    """``out[3:] += dS y + S dy - dy``: a row's angular part under ``S = I + (sigma - 1) a a^T`` (free axis ``a``)."""
    along, d_along = _dot(a, y), _dot(da, y) + _dot(a, dy)
    for r in range(3):
        out[3 + r] += (sigma - 1.0) * (da[r] * along + a[r] * d_along) + a[r] * d_sigma * along


@_internal
def _t_system_product(phys, w, t, alpha):
    """``t.rhs -= dA x`` for the primal solution ``x = t.x`` of ``A = S K + alpha I + E (R - alpha) E^T``.

    Leaves ``t.response`` = the tangent of ``M^-1 J^T x`` with ``x`` held (for :func:`_t_apply`).
    """
    x, wrench, z, kx = t.x, t.wrench, t.response0, t.kx
    size, n = t.q.shape
    parametric = t.parametric[0]
    _wrenches(phys.inv_mass, w.inv_inertia_w, w.lever_child, w.lever_parent, x, wrench, z)
    for j in range(n):
        _row_velocities(w.lever_child, w.lever_parent, z, j, kx[j])
    row, ang, zero = t.small[0], t.small[1, :3], t.small[2, :3]
    zero[:] = 0.0
    for d in range(size):
        resp = t.response[d]
        resp[:, :] = 0.0
        for j in range(n):  # dJ^T x: the levers turn
            _cross_add(t.lever_child[d, j], x[j, :3], 1.0, resp[j + 1, 3:])
            _cross_add(t.lever_parent[d, j], x[j, :3], -1.0, resp[j, 3:])
        for i in range(n + 1):  # M^-1 dJ^T x + dM^-1 J^T x, dM^-1 v = theta x (M^-1 v) - M^-1 (theta x v)
            th = t.inertia_rot[d, i]
            _cross_add(th, wrench[i, 3:], -1.0, resp[i, 3:])
            ang[:] = 0.0
            _mat_add(w.inv_inertia_w[i], resp[i, 3:], 1.0, ang)
            _cross_add(th, z[i, 3:], 1.0, ang)
            if parametric:  # + the parameters' dM^-1 J^T x
                _mat_add(t.p_inv_inertia_w[d, i], wrench[i, 3:], 1.0, ang)
                for c in range(3):
                    resp[i, c] = t.p_inv_mass[d, i] * wrench[i, c]
            resp[i, 3:] = ang
        for j in range(n):
            _row_velocities(w.lever_child, w.lever_parent, resp, j, row)  # J dZ + dJ Z
            _cross_add(z[j + 1, 3:], t.lever_child[d, j], 1.0, row[:3])
            _cross_add(z[j, 3:], t.lever_parent[d, j], -1.0, row[:3])
            a, da, sigma, compliance = w.free[j], t.free[d, j], w.sigma[j], w.row_compliance[j] - alpha
            along = _dot(a, row[3:])
            for r in range(3):
                row[3 + r] += (sigma - 1.0) * a[r] * along
            _scaled_rows_tangent(a, da, sigma, t.sigma[d, j], kx[j, 3:], zero, row)
            x_along, dx_along = _dot(a, x[j, 3:]), _dot(da, x[j, 3:])
            for r in range(3):
                row[3 + r] += compliance * (da[r] * x_along + a[r] * dx_along)
            for r in range(6):
                t.rhs[j, r, d] -= row[r]


@_internal
def _solve_system(phys, w, alpha):
    """``w.solution`` = the joint system's solution for ``w.rhs`` (fast.solve_system, compiled once here)."""
    solve_system(phys, w, alpha)


@_internal
def _t_solve(phys, w, t, alpha):
    """``t.solution`` = the joint system's solutions for all the columns of ``t.rhs`` (overwritten), the primal's factors."""
    solve_system_columns(phys, w, alpha, t.rhs, t.solution, (t.solve_u, t.solve_correction, t.solve_z))


@_internal
def _respond(phys, w, t, lin, ang):
    """Keep the solution in ``t.x`` and move ``lin``, ``ang`` (N, 3) by minus its response (fast.apply_impulses)."""
    t.x[:, :] = w.solution
    apply_impulses(phys, w, -1.0, lin, ang)


@_internal
def _t_apply(phys, w, t, d_lin, d_ang):
    """``d_lin``, ``d_ang`` (D, N, 3) -= the tangent of ``M^-1 J^T x``: ``t.response`` + ``M^-1 J^T t.solution``."""
    size, n = t.q.shape
    s, torque = t.small[0], t.small[1, :3]
    for d in range(size):
        for j in range(n):
            for r in range(6):
                s[r] = t.solution[j, r, d]
            for side in range(2):
                k, sign, r = (j + 1, 1.0, w.lever_child[j]) if side == 0 else (j, -1.0, w.lever_parent[j])
                for c in range(3):
                    torque[c] = s[3 + c]
                    d_lin[d, k, c] -= sign * phys.inv_mass[k] * s[c]
                _cross_add(r, s[:3], 1.0, torque)
                _mat_add(w.inv_inertia_w[k], torque, -sign, d_ang[d, k])
        for i in range(n + 1):
            for c in range(3):
                d_ang[d, i, c] -= t.response[d, i, 3 + c]
            if t.parametric[0]:
                for c in range(3):
                    d_lin[d, i, c] -= t.response[d, i, c]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _solve_and_apply(phys, w, t, alpha, lin, ang, d_lin, d_ang):
    """Solve the joint system for ``w.rhs`` (tangents: ``t.rhs``) and move ``lin``, ``ang`` (N, 3) by minus the response.

    Leaves the primal solution in ``t.x`` and its tangents in ``t.solution``:
    ``dx = A^-1 (db - dA x)`` with the primal's factors.
    """
    _solve_system(phys, w, alpha)
    _respond(phys, w, t, lin, ang)
    _t_system_product(phys, w, t, alpha)
    _t_solve(phys, w, t, alpha)
    _t_apply(phys, w, t, d_lin, d_ang)


# ---------------------------------------------------------------- substeps


@_internal
def _t_turn_poses(w, t):
    """``t.rot``: tangents of ``rot = exp(phi) rot0``, ``theta = J_l(phi) dphi + exp(phi) theta0``."""
    size, particles = t.rot.shape[0], t.rot.shape[1]
    turn, v = t.turn, t.small[0, :3]
    for i in range(particles):
        phi = w.phi[i]
        theta2 = phi[0] * phi[0] + phi[1] * phi[1] + phi[2] * phi[2]
        if theta2 < SMALL_ANGLE_SQUARED:
            b, c = 0.5 - theta2 / 24.0, 1.0 / 6.0 - theta2 / 120.0
        else:
            theta = math.sqrt(theta2)
            b, c = (1.0 - math.cos(theta)) / theta2, (theta - math.sin(theta)) / (theta2 * theta)
        so3_exp_into(phi, turn)
        for d in range(size):
            out, dp = t.rot[d, i], t.phi[d, i]
            v[:] = 0.0
            _cross_add(phi, dp, 1.0, v)
            for r in range(3):
                out[r] = dp[r] + b * v[r]
            _cross_add(phi, v, c, out)
            _mat_add(turn, t.rot0[d, i], 1.0, out)


@_internal
def _t_row_rhs(w, t, alpha):
    """``t.rhs``: tangents of the projection's right-hand sides (fast.row_rhs)."""
    size, n = t.q.shape
    h, dh, turn_vector, dlam = t.small[0, :3], t.small[1, :3], t.small[2, :3], t.small[3]
    for j in range(n):
        a, b, e = w.axis_p[j], w.axis_c[j], w.free[j]
        h[:] = 0.0
        _cross_add(a, b, 1.0, h)
        for r in range(3):
            turn_vector[r] = w.phi[j + 1, r] - w.phi[j, r]
        turn, along_error, along_lam = _dot(e, turn_vector), _dot(e, h), _dot(e, w.lam[j, 3:])
        compliance = w.row_compliance[j] - alpha
        free_part = w.sigma[j] * turn - along_error - w.offset[j] + compliance * along_lam
        for d in range(size):
            de, dphi = t.free[d, j], t.phi[d]
            for r in range(6):
                dlam[r] = t.lam[j, r, d]
            dh[:] = 0.0
            _cross_add(t.axis_p[d, j], b, 1.0, dh)
            _cross_add(a, t.axis_c[d, j], 1.0, dh)
            d_turn = _dot(de, turn_vector) + e[0] * (dphi[j + 1, 0] - dphi[j, 0]) + e[1] * (dphi[j + 1, 1] - dphi[j, 1]) + e[2] * (
                dphi[j + 1, 2] - dphi[j, 2]
            )
            d_free = (
                t.sigma[d, j] * turn + w.sigma[j] * d_turn - _dot(de, h) - _dot(e, dh) - t.offset[d, j]
                + compliance * (_dot(de, w.lam[j, 3:]) + _dot(e, dlam[3:]))
            )
            for r in range(3):
                t.rhs[j, r, d] = t.anchor[d, j, r] + alpha * dlam[r]
                t.rhs[j, 3 + r, d] = dh[r] + de[r] * free_part + e[r] * d_free + alpha * dlam[3 + r]


@_internal
def _update_multipliers(w, t):
    """``lam -= x`` for the primal and all tangents (the projection's multipliers)."""
    n, size = w.lam.shape[0], t.q.shape[0]
    for j in range(n):
        for r in range(6):
            w.lam[j, r] -= t.x[j, r]
            for d in range(size):
                t.lam[j, r, d] -= t.solution[j, r, d]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _t_project(phys, w, t, alpha, iterations):
    """The projection (fast._project) with its tangents."""
    w.lam[:, :] = 0.0
    t.lam[:, :, :] = 0.0
    for _ in range(iterations):
        turn_poses(w)
        _t_turn_poses(w, t)
        _frames_at(phys, w)
        _t_frames(w, t)
        row_rhs(w, alpha)
        _t_row_rhs(w, t, alpha)
        _solve_and_apply(phys, w, t, alpha, w.pos, w.phi, t.pos, t.phi)
        _update_multipliers(w, t)


@_internal
def _frames_at(phys, w):
    """fast.frames_into at the current poses (compiled once here)."""
    frames_into(phys.local_parent, phys.local_child, w.pos, w.rot, w)


@_internal
def _primal_forces(phys, fk, springs, w, tau, h, phase, limits):
    """fast.accelerate_bodies (compiled once here)."""
    accelerate_bodies(phys, fk, springs, w, tau, h, phase, limits)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _forces(phys, fk, springs, w, t, tau, h, phase, limits):
    """The forces and kicks (fast.accelerate_bodies) with their tangents, at the current frames."""
    _t_before_forces(w, t)
    _primal_forces(phys, fk, springs, w, tau, h, phase, limits)
    _t_joint_springs(springs, w, t)
    if springs.point_body_a.shape[0] > 0:
        _t_point_springs(springs, fk, w, t)
    _t_joint_torques(phys, w, t, tau, phase)
    if t.parametric[0]:
        _t_world_inertias(phys, w, t)
    _t_kick(w, t, h, phase)


@_internal
def _primal_rows(phys, w, h, limits, alpha, targets):
    """The substep's row constants (fast.row_blocks) and the joint system's factors (fast.factor_system)."""
    row_blocks(phys, w, h, limits, targets)
    factor_system(phys, w, alpha)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _row_constants(phys, w, t, h, limits, alpha):
    """The substep's row constants (limit targets ``t.targets``) with their tangents, and the joint system's factors."""
    _primal_rows(phys, w, h, limits, alpha, t.targets)
    _t_blocks(phys.armature, w, t, h, limits, t.targets)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _t_substep(phys, fk, springs, w, t, tau, h, phase, iterations, alpha, limits):
    """One substep (fast._substep) with its tangents."""
    _frames_at(phys, w)
    _t_frames(w, t)
    _forces(phys, fk, springs, w, t, tau, h, phase, limits)
    if limits:
        limit_targets(phys, w, h, t.targets)
    _row_constants(phys, w, t, h, limits, alpha)
    predict_positions(w, h)
    _t_predict(t, h)
    _t_project(phys, w, t, alpha, iterations)
    close_substep(w, h)
    _t_turn_poses(w, t)
    _t_chords(t, h)


@_internal
def _t_predict(t, h):
    """Tangents of fast.predict_positions."""
    pos, pos0, rot, rot0 = t.pos.reshape(-1), t.pos0.reshape(-1), t.rot.reshape(-1), t.rot0.reshape(-1)
    vel, omega, phi = t.vel.reshape(-1), t.omega.reshape(-1), t.phi.reshape(-1)
    for k in range(pos.shape[0]):
        pos0[k], rot0[k] = pos[k], rot[k]
        pos[k] += h * vel[k]
        phi[k] = h * omega[k]


@_internal
def _t_chords(t, h):
    """Tangents of the velocities fast.close_substep leaves (the substep's chords)."""
    pos, pos0, vel, omega, phi = t.pos.reshape(-1), t.pos0.reshape(-1), t.vel.reshape(-1), t.omega.reshape(-1), t.phi.reshape(-1)
    for k in range(pos.shape[0]):
        vel[k] = (pos[k] - pos0[k]) / h
        omega[k] = phi[k] / h


@_internal
def _t_velocity_rhs(w, t, h):
    """``t.rhs``: tangents of the closing velocity projection's right-hand side ``S J (v, w)`` less the
    offset over ``h`` [s] along the free axis (fast.velocity_rhs)."""
    size, n = t.q.shape
    motion, d_motion = np.empty((n + 1, 6)), np.empty((n + 1, 6))
    y, dy, dy_ang = t.small[0], t.small[1], t.small[2, :3]
    motion[:, :3] = w.vel
    motion[:, 3:] = w.omega
    for d in range(size):
        d_motion[:, :3] = t.vel[d]
        d_motion[:, 3:] = t.omega[d]
        for j in range(n):
            _row_velocities(w.lever_child, w.lever_parent, motion, j, y)
            _row_velocities(w.lever_child, w.lever_parent, d_motion, j, dy)
            _cross_add(w.omega[j + 1], t.lever_child[d, j], 1.0, dy[:3])
            _cross_add(w.omega[j], t.lever_parent[d, j], -1.0, dy[:3])
            dy_ang[:] = dy[3:]
            _scaled_rows_tangent(w.free[j], t.free[d, j], w.sigma[j], t.sigma[d, j], y[3:], dy_ang, dy)
            for r in range(3):
                dy[3 + r] -= (t.free[d, j, r] * w.offset[j] + w.free[j, r] * t.offset[d, j]) / h
            for r in range(6):
                t.rhs[j, r, d] = dy[r]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _t_finish(phys, fk, springs, w, t, tau, h, phase, limits):
    """The closing half kick and velocity projection (fast._finish) with their tangents.

    ``phase`` is the finishing kick and ``limits`` False, passed as runtime values: numba
    compiles a function once per literal argument value.
    """
    _frames_at(phys, w)
    _t_frames(w, t)
    _forces(phys, fk, springs, w, t, tau, h, phase, limits)
    _row_constants(phys, w, t, h, limits, 0.0)
    _t_velocity_rhs(w, t, h)
    velocity_rhs(w, h)
    _solve_and_apply(phys, w, t, 0.0, w.vel, w.omega, t.vel, t.omega)


@_internal
def _t_set_spin(t, chords):
    """Tangents of fast.set_spin."""
    spin, start, last, previous = t.spin.reshape(-1), t.start.reshape(-1), t.last.reshape(-1), t.previous.reshape(-1)
    for k in range(spin.shape[0]):
        if chords == 0:
            spin[k] = start[k]
        elif chords == 1:
            spin[k] = 2.0 * last[k] - start[k]
        else:
            spin[k] = 1.5 * last[k] - 0.5 * previous[k]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _t_integrate(phys, fk, springs, w, t, tau, settings):
    """One control period (fast._integrate) with its tangents."""
    dt, substeps, iterations, compliance, limits = settings
    h = dt / substeps
    alpha = compliance / (h * h)
    w.start[:, :] = w.omega
    t.start[:, :, :] = t.omega
    for index in range(substeps):
        set_spin(w, min(index, 2))
        _t_set_spin(t, min(index, 2))
        phase = KICK_START if index == 0 else KICK_FULL
        _t_substep(phys, fk, springs, w, t, tau, h, phase, iterations, alpha, limits)
        w.previous[:, :] = w.last
        w.last[:, :] = w.omega
        t.previous[:, :, :] = t.last
        t.last[:, :, :] = t.omega
    set_spin(w, min(substeps, 2))
    _t_set_spin(t, min(substeps, 2))
    _t_finish(phys, fk, springs, w, t, tau, h, KICK_FINISH + 0 * substeps, substeps < 0)


# Not inlined: compiled once, then linked into both callers (the PBD MPC's solver,
# control/mpc_fast.py, and step_tangents_into) instead of compiled again inside each (124 s of
# CPU on a fresh install, measured under load). numba's default flags, the solver's.
@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def step_tangents_core(fk, phys, springs, settings, w, t, q, qd, tau, q_next, qd_next):
    """One PBD step with the tangents of its state along every direction of ``t``.

    Args:
        fk, phys, springs: The arrays of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD`.
        settings: ``(dt [s], substeps, iterations, compliance, limits)``.
        w: Primal work area (:func:`~diffsim_ros.sim.pbd.fast.work_area`, float64).
        t: Tangent work area (:func:`tangent_area` or :func:`parameter_area`): the directions
            are its seeds ``seed_q``, ``seed_qd``, ``seed_tau`` (D, n) and, in a parameter
            area, the snapshot's parameter tangents.
        q, qd, tau: Joint positions [rad], velocities [rad/s], torques [N·m], each (n,).
        q_next, qd_next: (n,) receive the state after the step; ``t.q`` and ``t.rate`` (D, n)
            its tangents.
    """
    state_from_joints(fk, phys.com, q, qd, w.pos, w.rot, w.vel, w.omega, w.z_ang, w.origin, w.placements)
    _t_state_from_joints(fk, w, t, qd, t.seed_q, t.seed_qd)
    _t_integrate(phys, fk, springs, w, t, tau, settings)
    _frames_at(phys, w)
    _t_frames(w, t)
    write_joint_state(w, q, q_next, qd_next)
    _t_angles(w, t)
    _t_rates(w, t, w.omega, t.omega, t.rate)


@njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def step_tangents_with(fk, phys, springs, settings, w, t, q, qd, tau, q_next, qd_next, a, b):
    """One PBD step and its exact Jacobians in vector forward mode, in given work areas.

    Args:
        fk, phys, springs: The arrays of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD`.
        settings: ``(dt [s], substeps, iterations, compliance, limits)``.
        w: Primal work area (:func:`~diffsim_ros.sim.pbd.fast.work_area`, float64).
        t: Tangent work area (:func:`tangent_area`); its directions decide whether ``a`` is filled.
        q, qd, tau: Joint positions [rad], velocities [rad/s], torques [N·m], each (n,).
        q_next, qd_next: (n,) receive the state after the step.
        a: (2n, 2n) receives ``d(q+, qd+)/d(q, qd)`` (rows and columns ordered q then qd), when
            ``t`` has the state's directions; else it is left untouched.
        b: (2n, n) receives ``d(q+, qd+)/d tau`` [rad/(N·m), rad/(s·N·m)].
    """
    n = q.shape[0]
    step_tangents_core(fk, phys, springs, settings, w, t, q, qd, tau, q_next, qd_next)
    for d in range(t.q.shape[0]):
        column, out = (d, b) if d < n else (d - n, a)
        for i in range(n):
            out[i, column] = t.q[d, i]
            out[n + i, column] = t.rate[d, i]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def step_tangents_into(fk, phys, springs, settings, q, qd, tau, with_state, q_next, qd_next, a, b):
    """:func:`step_tangents_with` in work areas of its own (called from Python by
    :func:`~diffsim_ros.sim.pbd.fast_jacobians.pbd_step_jacobians`).

    Args:
        with_state: Whether to fill ``a`` as well as ``b`` (``3n`` directions instead of ``n``).
        Others: As :func:`step_tangents_with`.
    """
    n = q.shape[0]
    step_tangents_with(fk, phys, springs, settings, work_area(n, q), tangent_area(n, with_state), q, qd, tau, q_next, qd_next, a, b)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def rollout_parameter_tangents(fk, phys, springs, settings, seeds, q0, qd0, dq0, dqd0, tau, dtau, q, qd, dq, dqd):
    """Rollouts of the PBD step with the tangents of every state along ``D`` parameter directions.

    Forward mode through the rollout: each step's state tangents seed the next one's.

    Args:
        fk, phys, springs: The arrays of a :class:`~diffsim_ros.sim.pbd.fast.FastPBD`.
        settings: ``(dt [s], substeps, iterations, compliance, limits)``.
        seeds: The snapshot's parameter tangents (:data:`PARAMETER_SEEDS`, each (D, ...)).
        q0, qd0: Initial joint positions [rad] and velocities [rad/s], (B, n).
        dq0, dqd0: Their tangents, (B, D, n).
        tau: Joint torques [N·m] of every step, (B, T, n); ``dtau`` (B, T, D) its tangents
            along the directions, (B, T, D, n).
        q, qd: (B, T, n) receive the states after every step; ``dq``, ``dqd`` (B, T, D, n)
            their tangents.
    """
    batch, steps, n = tau.shape
    size = dtau.shape[2]
    w = work_area(n, q0)
    t = parameter_area(n, size, seeds)
    start, rate = np.empty(n), np.empty(n)
    for b in range(batch):
        start[:] = q0[b]
        rate[:] = qd0[b]
        t.seed_q[:, :] = dq0[b]
        t.seed_qd[:, :] = dqd0[b]
        for k in range(steps):
            t.seed_tau[:, :] = dtau[b, k]
            step_tangents_core(fk, phys, springs, settings, w, t, start, rate, tau[b, k], q[b, k], qd[b, k])
            dq[b, k] = t.q
            dqd[b, k] = t.rate
            start[:] = q[b, k]
            rate[:] = qd[b, k]
            t.seed_q[:, :] = t.q
            t.seed_qd[:, :] = t.rate
