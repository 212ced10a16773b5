"""Compiled spring element torques with their derivatives in the state and in every spring parameter.

The spring torque is split as the integrators use it (:mod:`.springs`): an elastic part
``e(q)`` and a damping part ``-C(q) qd`` with ``C`` the damping matrix of all elements
(torsion dashpots on the diagonal, ``c g g^T`` for every acting point spring, ``g = dL/dq``).
:func:`spring_derivatives_into` returns ``e``, ``de/dq``, ``C``, ``d(C v)/dq`` at ``v = qd``,
``d diag(C)/dq`` (the implicit damping's slope) and the partial derivatives of ``e``,
``C v`` and ``diag(C)`` with respect to every spring parameter, in the order of
:meth:`~diffsim_ros.model.RobotModel.parameter_names` (lever: stiffness, offset, alpha1,
l1, l2, rest_length; torsion: stiffness, offset, damping; point: stiffness, rest_length,
damping, point_a (3), point_b (3)).

Point springs use closed forms: with ``J_x[j]`` the velocity of end x for a unit rate of
joint j and ``D_j = J_b[j] - J_a[j]``, ``g_j = u . D_j`` and the Hessian of the length is
``H_jk = (D_j . D_k - g_j g_k) / L + u . dD_j/dq_k``, where a revolute joint k above j
turns ``J_x[j]`` (``z_k x J_x[j]``) and a revolute j above k turns ``J_x[k]``
(``z_j x J_x[k]``). The torch implementation (autograd) is the reference.
"""

import math

import numpy as np

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.derivatives import supports
from diffsim_ros.dynamics.vec3 import cross3, dot3, mat3_vec, row3

__all__ = ["SPRING_COLUMNS", "spring_columns", "spring_derivatives_into"]

SPRING_COLUMNS = {"lever": 6, "torsion": 3, "point": 9}
"""Parameter columns per element of each law."""


def spring_columns(springs):
    """Number of spring parameter columns of a :data:`~diffsim_ros.dynamics.fast.SpringArrays`."""
    return (
        SPRING_COLUMNS["lever"] * springs.lever_joints.shape[0]
        + SPRING_COLUMNS["torsion"] * springs.torsion_joints.shape[0]
        + SPRING_COLUMNS["point"] * springs.point_body_a.shape[0]
    )


@njit(cache=True)
def _lever_into(springs, q, elastic, de_dq, de_dp):
    for s in range(springs.lever_joints.shape[0]):
        j, col = springs.lever_joints[s], 6 * s
        k, l1, l2, rest = springs.lever_stiffness[s], springs.lever_l1[s], springs.lever_l2[s], springs.lever_rest_length[s]
        phi = math.pi - springs.lever_alpha1[s] - springs.lever_offset[s] + q[j]
        sn, cs = math.sin(phi), math.cos(phi)
        x = math.sqrt(l1 * l1 + l2 * l2 - 2.0 * l1 * l2 * cs)
        slope = l1 * l2 * sn / x  # dx/dphi
        stretch = x - rest
        dslope = (l1 * l2 * cs - slope * slope) / x
        dtau_dphi = -k * (slope * slope + stretch * dslope)
        elastic[j] += -k * stretch * slope
        de_dq[j, j] += dtau_dphi
        de_dp[j, col] += -stretch * slope
        de_dp[j, col + 1] += -dtau_dphi
        de_dp[j, col + 2] += -dtau_dphi
        for which in range(2):
            a, b = (l1, l2) if which == 0 else (l2, l1)
            dx = (a - b * cs) / x
            ds = b * sn / x - slope * dx / x
            de_dp[j, col + 3 + which] += -k * (dx * slope + stretch * ds)
        de_dp[j, col + 5] += k * slope


@njit(cache=True)
def _torsion_into(springs, q, qd, elastic, de_dq, cmat, de_dp, dcv_dp, ddiag_dp, first):
    for s in range(springs.torsion_joints.shape[0]):
        j, col = springs.torsion_joints[s], first + 3 * s
        k = springs.torsion_stiffness[s]
        elastic[j] += -k * (q[j] - springs.torsion_offset[s])
        de_dq[j, j] += -k
        cmat[j, j] += springs.torsion_damping[s]
        de_dp[j, col] += -(q[j] - springs.torsion_offset[s])
        de_dp[j, col + 1] += k
        dcv_dp[j, col + 2] += qd[j]
        ddiag_dp[j, col + 2] += 1.0


@njit(cache=True)
def _end_jacobian(fk, body, end, rot_w, pos_w, jac):
    """``jac[j]`` (n, 3): velocity of point ``end`` of body ``body`` for a unit rate of joint j."""
    parents, _, _, axis, is_revolute = fk
    jac[:, :] = 0.0
    j = body
    while j >= 0:
        z = mat3_vec(rot_w[j], row3(axis, j))
        if is_revolute[j]:
            z = cross3(z, (end[0] - pos_w[j, 0], end[1] - pos_w[j, 1], end[2] - pos_w[j, 2]))
        jac[j, 0], jac[j, 1], jac[j, 2] = z[0], z[1], z[2]
        j = parents[j]


@njit(cache=True)
def _turn(fk, rot_w, body, jac, j, k):
    """``dJ_x[j]/dq_k`` for the end of ``body`` (see the module docstring), a 3-tuple."""
    parents, _, _, axis, is_revolute = fk
    if body < 0:
        return (0.0, 0.0, 0.0)
    if supports(parents, j, body) and supports(parents, k, j):
        if is_revolute[k]:
            return cross3(mat3_vec(rot_w[k], row3(axis, k)), row3(jac, j))
    elif k != j and supports(parents, j, k) and supports(parents, k, body):
        if is_revolute[j]:
            return cross3(mat3_vec(rot_w[j], row3(axis, j)), row3(jac, k))
    return (0.0, 0.0, 0.0)


@njit(cache=True)
def _point_into(springs, anchor_rot, fk, q, qd, rot_w, pos_w, scratch, elastic, de_dq, cmat, dcv_dq, ddiag_dq,
                de_dp, dcv_dp, ddiag_dp, first):
    n = q.shape[0]
    jac_a, jac_b, hess, g, delta = scratch
    end_a, end_b = np.empty(3), np.empty(3)
    for s in range(springs.point_body_a.shape[0]):
        col = first + 9 * s
        body_a, body_b = springs.point_body_a[s], springs.point_body_b[s]
        for side in range(2):
            body = body_a if side == 0 else body_b
            local = springs.point_a[s] if side == 0 else springs.point_b[s]
            out = end_a if side == 0 else end_b
            for r in range(3):
                out[r] = local[r] if body < 0 else pos_w[body, r] + rot_w[body, r, 0] * local[0] + rot_w[body, r, 1] * local[1] + rot_w[body, r, 2] * local[2]
            _end_jacobian(fk, body, out, rot_w, pos_w, jac_a if side == 0 else jac_b)
        diff = (end_b[0] - end_a[0], end_b[1] - end_a[1], end_b[2] - end_a[2])
        length = math.sqrt(dot3(diff, diff))
        stretch = length - springs.point_rest_length[s]
        if springs.point_tension_only[s] and not stretch > 0.0:
            continue  # a slack cable: no force, no derivatives
        u = (diff[0] / length, diff[1] / length, diff[2] / length)
        for j in range(n):
            for r in range(3):
                delta[j, r] = jac_b[j, r] - jac_a[j, r]
            g[j] = dot3(u, row3(delta, j))
        rate = 0.0
        for j in range(n):
            rate += g[j] * qd[j]
        for j in range(n):
            for k in range(n):
                tb, ta = _turn(fk, rot_w, body_b, jac_b, j, k), _turn(fk, rot_w, body_a, jac_a, j, k)
                turn = (tb[0] - ta[0], tb[1] - ta[1], tb[2] - ta[2])
                hess[j, k] = (dot3(row3(delta, j), row3(delta, k)) - g[j] * g[k]) / length + dot3(u, turn)
        k_s, c = springs.point_stiffness[s], springs.point_damping[s]
        for j in range(n):
            hv = 0.0
            for k in range(n):
                hv += hess[j, k] * qd[k]
            elastic[j] += -k_s * stretch * g[j]
            for k in range(n):
                de_dq[j, k] += -k_s * (g[j] * g[k] + stretch * hess[j, k])
                cmat[j, k] += c * g[j] * g[k]
                dcv_dq[j, k] += c * hess[j, k] * rate
                ddiag_dq[j, k] += 2.0 * c * g[j] * hess[j, k]
            for k in range(n):  # d(g_j (g . v))/dq_k = H_jk (g . v) + g_j (H v)_k; H symmetric
                dcv_dq[k, j] += c * g[k] * hv
            de_dp[j, col] += -stretch * g[j]
            de_dp[j, col + 1] += k_s * g[j]
            dcv_dp[j, col + 2] += g[j] * rate
            ddiag_dp[j, col + 2] += g[j] * g[j]
        _anchor_columns(springs, anchor_rot, fk, s, rot_w, u, length, stretch, rate, g, delta, qd, de_dp, dcv_dp, ddiag_dp, col)


@njit(cache=True)
def _anchor_columns(springs, anchor_rot, fk, s, rot_w, u, length, stretch, rate, g, delta, qd, de_dp, dcv_dp, ddiag_dp, col):
    """Columns of the anchors ``point_a`` and ``point_b`` (link frames) of point spring ``s``."""
    parents, _, _, axis, is_revolute = fk
    n = qd.shape[0]
    k_s, c = springs.point_stiffness[s], springs.point_damping[s]
    dg = np.empty(n)
    for side in range(2):
        body = springs.point_body_a[s] if side == 0 else springs.point_body_b[s]
        sign = -1.0 if side == 0 else 1.0
        for m in range(3):
            # dp = d(end)/d(anchor_m): the link's axis m in world axes
            if body < 0:
                dp = (anchor_rot[s, side, 0, m], anchor_rot[s, side, 1, m], anchor_rot[s, side, 2, m])
            else:
                dp = mat3_vec(rot_w[body], (anchor_rot[s, side, 0, m], anchor_rot[s, side, 1, m], anchor_rot[s, side, 2, m]))
            dlen = sign * dot3(u, dp)
            gv = 0.0
            for j in range(n):
                radial = (delta[j, 0] - g[j] * u[0], delta[j, 1] - g[j] * u[1], delta[j, 2] - g[j] * u[2])
                value = sign * dot3(radial, dp) / length
                if body >= 0 and is_revolute[j] and supports(parents, j, body):
                    value += sign * dot3(cross3(u, mat3_vec(rot_w[j], row3(axis, j))), dp)
                dg[j] = value
                gv += value * qd[j]
            column = col + 3 + 3 * side + m
            for j in range(n):
                de_dp[j, column] += -k_s * (dlen * g[j] + stretch * dg[j])
                dcv_dp[j, column] += c * (dg[j] * rate + g[j] * gv)
                ddiag_dp[j, column] += 2.0 * c * g[j] * dg[j]


@njit(cache=True)
def spring_derivatives_into(springs, anchor_rot, fk, q, qd, rot_w, pos_w, scratch, elastic, de_dq, cmat, dcv_dq, ddiag_dq,
                            de_dp, dcv_dp, ddiag_dp):
    """Spring torques split as ``e(q) - C(q) qd`` with their state and parameter derivatives.

    Args:
        springs: :data:`~diffsim_ros.dynamics.fast.SpringArrays`.
        anchor_rot: Rotation of each point spring's end links in their body frames,
            (c, 2, 3, 3) (side 0: a, 1: b): ``d(end in body frame)/d(anchor)``.
        fk: ``(parents, origin_rot, origin_xyz, axis, is_revolute)``.
        q, qd: Joint state (n,).
        rot_w, pos_w: World placements of the bodies at ``q``, (n, 3, 3), (n, 3).
        scratch: ``(jac_a (n, 3), jac_b (n, 3), hess (n, n), g (n,), delta (n, 3))``.
        elastic: Output ``e`` (n,).
        de_dq, cmat, dcv_dq, ddiag_dq: Outputs (n, n): ``de/dq``, ``C``, ``d(C qd)/dq`` (qd
            held), ``[j, k] = d C_jj / dq_k``.
        de_dp, dcv_dp, ddiag_dp: Outputs (n, P_s): parameter columns of ``e``, ``C qd`` and
            ``diag(C)`` (:func:`spring_columns`).
    """
    elastic[:] = 0.0
    for a in (de_dq, cmat, dcv_dq, ddiag_dq, de_dp, dcv_dp, ddiag_dp):
        a[:, :] = 0.0
    _lever_into(springs, q, elastic, de_dq, de_dp)
    first = 6 * springs.lever_joints.shape[0]
    _torsion_into(springs, q, qd, elastic, de_dq, cmat, de_dp, dcv_dp, ddiag_dp, first)
    first += 3 * springs.torsion_joints.shape[0]
    if springs.point_body_a.shape[0] > 0:
        _point_into(springs, anchor_rot, fk, q, qd, rot_w, pos_w, scratch, elastic, de_dq, cmat, dcv_dq, ddiag_dq,
                    de_dp, dcv_dp, ddiag_dp, first)
