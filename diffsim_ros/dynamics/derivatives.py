"""Compiled analytic derivatives of rigid-body dynamics (single configuration, float64).

The derivatives of forward dynamics follow Carpentier & Mansard (RSS 2018): with
``tau = RNEA(q, qd, qdd)`` at the solved acceleration, ``dqdd/dx = -M^-1 dRNEA/dx`` and
``dqdd/dtau = M^-1``. The partial derivatives of RNEA are propagated here in forward mode
through the body-frame recursion of :mod:`.fast` (exact to rounding: no finite
differences), one tangent direction per joint position and per joint velocity. Directions
are sparse: the motion of body i depends only on the joints that support it, and the seed
of joint i's own rotation enters body i only, which keeps the forward sweep at half the
dense cost. M comes from the composite-rigid-body algorithm in world coordinates.

Parameters enter RNEA linearly through each body's ten inertial parameters ``pi = (m, m c,
I_o)``: :func:`regressor_into` gives one body's columns of the joint-torque regressor
``d tau / d pi`` from the body motions of the last value sweep. It is the one implementation of
the regressor: identification stacks it over samples (:mod:`~diffsim_ros.dynamics.regressor`),
the rigid step multiplies it by the increments of its parametrization (body mass, COM, inertia,
payload; :mod:`~diffsim_ros.sim.rigid_fast`).

All kernels write into a :data:`RneaWork` area (no allocation per call). The torch
algorithms stay the reference; the tests hold these to them to 1e-9.
"""

import math
from collections import namedtuple

import numpy as np

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.fast import placements_into
from diffsim_ros.dynamics.vec3 import add3, cross3, dot3, mat3_vec, put3, row3, scale3, sub3

__all__ = [
    "INERTIAL_PARAMETERS",
    "RneaWork",
    "aba_derivatives",
        "lu_factor",
    "lu_solve_columns",
    "mass_matrix_into",
    "rnea_derivatives_into",
    "rnea_values_into",
    "regressor_into",
    "rnea_work",
    "supports",
]

INERTIAL_PARAMETERS = ("m", "mcx", "mcy", "mcz", "ixx", "ixy", "iyy", "ixz", "iyz", "izz")
"""Names of a body's ten inertial parameters, in the regressor's column order (Pinocchio's)."""
_I6 = ((0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2))  # the order of a symmetric inertia's six entries

RneaWork = namedtuple(
    "RneaWork",
    [
        # placements: local (n, 3, 3), (n, 3) and world (n, 3, 3), (n, 3)
        "rot_local", "pos_local", "rot_world", "pos_world",
        # body motion and body forces of the last value sweep, body frames (n, 3)
        "omega", "vel", "alpha", "acc", "torque", "force", "n_v", "f_v",
        # wrenches accumulated over subtrees in the backward sweeps (n, 3)
        "acc_torque", "acc_force",
        # tangents (n, 2n, 3): directions 0..n-1 = q_j, n..2n-1 = qd_j
        "d_omega", "d_vel", "d_alpha", "d_acc", "d_torque", "d_force",
        # composite inertias for CRBA (n,), (n, 3), (n, 3, 3)
        "c_mass", "c_h", "c_inertia",
        # one body's regressor columns of torque and force on their way to the root (3, 10)
        "y_torque", "y_force",
    ],
)
"""Work area of the kernels in this module (:func:`rnea_work`)."""


@njit(cache=True)
def rnea_work(n):
    """A :data:`RneaWork` for ``n`` joints."""
    z = np.zeros
    return RneaWork(
        z((n, 3, 3)), z((n, 3)), z((n, 3, 3)), z((n, 3)),
        z((n, 3)), z((n, 3)), z((n, 3)), z((n, 3)), z((n, 3)), z((n, 3)), z((n, 3)), z((n, 3)),
        z((n, 3)), z((n, 3)),
        z((n, 2 * n, 3)), z((n, 2 * n, 3)), z((n, 2 * n, 3)), z((n, 2 * n, 3)), z((n, 2 * n, 3)), z((n, 2 * n, 3)),
        z(n), z((n, 3)), z((n, 3, 3)),
        z((3, 10)), z((3, 10)),
    )


@njit(cache=True)
def _mtv(m, a):
    """``m.T @ a`` for m (3, 3) (a transposed view: no copy)."""
    return mat3_vec(m.T, a)


@njit(cache=True)
def _body_wrench(m, h, inertia, w, v, al, a):
    """Body torque and force of inertial ``(m, h, I_o)`` moving with ``(w, v, al, a)`` (fast._rnea)."""
    n_v = add3(mat3_vec(inertia, w), cross3(h, v))
    f_v = sub3(scale3(v, m), cross3(h, w))
    torque = add3(add3(mat3_vec(inertia, al), cross3(h, a)), add3(cross3(w, n_v), cross3(v, f_v)))
    force = add3(sub3(scale3(a, m), cross3(h, al)), cross3(w, f_v))
    return torque, force, n_v, f_v


# ---------------------------------------------------------------- RNEA values and tangents


@njit(cache=True)
def _parent_motion(work, p, up):
    """``(w, v, alpha, a)`` of body ``p`` from ``work``; the fixed base (``p < 0``) has only ``a = up``."""
    if p < 0:
        zero = (0.0, 0.0, 0.0)
        return zero, zero, zero, (up[0], up[1], up[2])
    return row3(work.omega, p), row3(work.vel, p), row3(work.alpha, p), row3(work.acc, p)


@njit(cache=True)
def rnea_values_into(fk, mass, h, inertia_o, up, q, qd, qdd, work, tau):
    """RNEA ``M qdd + C qd + g`` into ``tau`` (n,), keeping placements and body motions in ``work``.

    Args:
        fk: ``(parents, origin_rot, origin_xyz, axis, is_revolute)``.
        mass, h, inertia_o: Body inertials (n,), (n, 3), (n, 3, 3) (payload included).
        up: Minus gravity (3,) [m/s²].
        q, qd, qdd: Joint positions, velocities, accelerations (n,).
        work: :data:`RneaWork`.
        tau: Output (n,).
    """
    parents, origin_rot, origin_xyz, axis, is_revolute = fk
    n = q.shape[0]
    placements_into(parents, origin_rot, origin_xyz, axis, is_revolute, q, work.rot_local, work.pos_local, work.rot_world, work.pos_world)
    zero = (0.0, 0.0, 0.0)
    for i in range(n):
        e, r, p = work.rot_local[i], row3(work.pos_local, i), parents[i]
        w_p, v_p, al_p, a_p = _parent_motion(work, p, up)
        ax = row3(axis, i)
        if is_revolute[i]:
            sa, sl, sa_dd, sl_dd = scale3(ax, qd[i]), zero, scale3(ax, qdd[i]), zero
        else:
            sa, sl, sa_dd, sl_dd = zero, scale3(ax, qd[i]), zero, scale3(ax, qdd[i])
        w = add3(_mtv(e, w_p), sa)
        v = add3(_mtv(e, add3(v_p, cross3(w_p, r))), sl)
        al = add3(add3(_mtv(e, al_p), sa_dd), cross3(w, sa))
        a = add3(add3(_mtv(e, add3(a_p, cross3(al_p, r))), sl_dd), add3(cross3(w, sl), cross3(v, sa)))
        torque, force, n_v, f_v = _body_wrench(mass[i], row3(h, i), inertia_o[i], w, v, al, a)
        put3(work.omega, i, w)
        put3(work.vel, i, v)
        put3(work.alpha, i, al)
        put3(work.acc, i, a)
        put3(work.torque, i, torque)
        put3(work.force, i, force)
        put3(work.n_v, i, n_v)
        put3(work.f_v, i, f_v)
    # the backward sweep accumulates in copies so the body wrenches stay available
    acc_t, acc_f = work.acc_torque, work.acc_force
    acc_t[:, :] = work.torque
    acc_f[:, :] = work.force
    for i in range(n - 1, -1, -1):
        ax = row3(axis, i)
        tau[i] = dot3(ax, row3(acc_t, i)) if is_revolute[i] else dot3(ax, row3(acc_f, i))
        p = parents[i]
        if p >= 0:
            rot = work.rot_local[i]
            f_par = mat3_vec(rot, row3(acc_f, i))
            put3(acc_f, p, add3(row3(acc_f, p), f_par))
            t_par = add3(mat3_vec(rot, row3(acc_t, i)), cross3(row3(work.pos_local, i), f_par))
            put3(acc_t, p, add3(row3(acc_t, p), t_par))


@njit(cache=True)
def supports(parents, j, i):
    """Whether joint j is body i or one of its ancestors."""
    while i > j:
        i = parents[i]
    return i == j


@njit(cache=True)
def rnea_derivatives_into(fk, mass, h, inertia_o, up, qd, work, dtau_dq, dtau_dqd):
    """Partial derivatives of RNEA with respect to q and qd at the last :func:`rnea_values_into` point.

    ``qdd`` is held fixed (it is the third argument of RNEA), so at the solved acceleration
    these are the ``dRNEA/dq`` and ``dRNEA/dqd`` of Carpentier & Mansard.

    Args:
        fk, mass, h, inertia_o, up: As :func:`rnea_values_into`.
        qd: Joint velocities (n,) of that call.
        work: :data:`RneaWork` filled by :func:`rnea_values_into`.
        dtau_dq, dtau_dqd: Outputs (n, n): ``[i, j] = d tau_i / d q_j`` (resp. qd_j).
    """
    parents, origin_rot, _, axis, is_revolute = fk
    n = qd.shape[0]
    zero = (0.0, 0.0, 0.0)
    dw, dv, dal, da, dt, df = work.d_omega, work.d_vel, work.d_alpha, work.d_acc, work.d_torque, work.d_force
    dt[:, :, :] = 0.0
    df[:, :, :] = 0.0
    for i in range(n):
        e, r, p = work.rot_local[i], row3(work.pos_local, i), parents[i]
        w_p, v_p, al_p, a_p = _parent_motion(work, p, up)
        ax, rev = row3(axis, i), is_revolute[i]
        w, v = row3(work.omega, i), row3(work.vel, i)
        sa = scale3(ax, qd[i]) if rev else zero
        sl = zero if rev else scale3(ax, qd[i])
        m_i, h_i, inertia = mass[i], row3(h, i), inertia_o[i]
        n_v, f_v = row3(work.n_v, i), row3(work.f_v, i)
        for j in range(i + 1):
            if not supports(parents, j, i):
                continue
            for kind in range(2):  # 0: q_j, 1: qd_j
                k = j + kind * n
                if j == i:
                    d_wp, d_vp, d_alp, d_ap = zero, zero, zero, zero
                else:
                    d_wp, d_vp, d_alp, d_ap = row3(dw[p], k), row3(dv[p], k), row3(dal[p], k), row3(da[p], k)
                s_w, s_v, s_al, s_a, d_r = zero, zero, zero, zero, zero
                if j == i:
                    if kind == 0 and rev:  # de x = -(axis x (e x))
                        s_w = scale3(cross3(ax, _mtv(e, w_p)), -1.0)
                        s_v = scale3(cross3(ax, _mtv(e, add3(v_p, cross3(w_p, r)))), -1.0)
                        s_al = scale3(cross3(ax, _mtv(e, al_p)), -1.0)
                        s_a = scale3(cross3(ax, _mtv(e, add3(a_p, cross3(al_p, r)))), -1.0)
                    elif kind == 0:  # prismatic: the origin slides along origin_rot @ axis
                        d_r = mat3_vec(origin_rot[i], ax)
                    elif rev:
                        s_w, s_al, s_a = ax, cross3(w, ax), cross3(v, ax)
                    else:
                        s_v, s_a = ax, cross3(w, ax)
                d_w = add3(_mtv(e, d_wp), s_w)
                d_v = add3(_mtv(e, add3(add3(d_vp, cross3(d_wp, r)), cross3(w_p, d_r))), s_v)
                d_al = add3(add3(_mtv(e, d_alp), cross3(d_w, sa)), s_al)
                d_t2 = add3(add3(d_ap, cross3(d_alp, r)), cross3(al_p, d_r))
                d_a = add3(add3(_mtv(e, d_t2), cross3(d_w, sl)), add3(cross3(d_v, sa), s_a))
                put3(dw[i], k, d_w)
                put3(dv[i], k, d_v)
                put3(dal[i], k, d_al)
                put3(da[i], k, d_a)
                d_nv = add3(mat3_vec(inertia, d_w), cross3(h_i, d_v))
                d_fv = sub3(scale3(d_v, m_i), cross3(h_i, d_w))
                d_torque = add3(
                    add3(mat3_vec(inertia, d_al), cross3(h_i, d_a)),
                    add3(add3(cross3(d_w, n_v), cross3(w, d_nv)), add3(cross3(d_v, f_v), cross3(v, d_fv))),
                )
                d_force = add3(sub3(scale3(d_a, m_i), cross3(h_i, d_al)), add3(cross3(d_w, f_v), cross3(w, d_fv)))
                put3(dt[i], k, d_torque)
                put3(df[i], k, d_force)
    _backward_tangents(parents, origin_rot, axis, is_revolute, work, dtau_dq, dtau_dqd)


@njit(cache=True)
def _backward_tangents(parents, origin_rot, axis, is_revolute, work, dtau_dq, dtau_dqd):
    """Accumulate body wrench tangents towards the root and project them on the joint axes."""
    n = dtau_dq.shape[0]
    dt, df = work.d_torque, work.d_force
    acc_t, acc_f = work.acc_torque, work.acc_force  # the accumulated wrenches, as in the value sweep
    acc_t[:, :] = work.torque
    acc_f[:, :] = work.force
    for i in range(n - 1, -1, -1):
        ax, rev = row3(axis, i), is_revolute[i]
        for k in range(2 * n):
            value = dot3(ax, row3(dt[i], k)) if rev else dot3(ax, row3(df[i], k))
            if k < n:
                dtau_dq[i, k] = value
            else:
                dtau_dqd[i, k - n] = value
        p = parents[i]
        if p < 0:
            continue
        rot, r = work.rot_local[i], row3(work.pos_local, i)
        force_i, torque_i = row3(acc_f, i), row3(acc_t, i)
        f_par = mat3_vec(rot, force_i)
        for k in range(2 * n):
            d_fpar = mat3_vec(rot, row3(df[i], k))
            d_tpar = mat3_vec(rot, row3(dt[i], k))
            if k == i and rev:  # d rot_local / dq_i = rot_local [axis]x
                d_fpar = add3(d_fpar, mat3_vec(rot, cross3(ax, force_i)))
                d_tpar = add3(d_tpar, mat3_vec(rot, cross3(ax, torque_i)))
            d_tpar = add3(d_tpar, cross3(r, d_fpar))
            if k == i and not rev:
                d_tpar = add3(d_tpar, cross3(mat3_vec(origin_rot[i], ax), f_par))
            put3(df[p], k, add3(row3(df[p], k), d_fpar))
            put3(dt[p], k, add3(row3(dt[p], k), d_tpar))
        put3(acc_f, p, add3(row3(acc_f, p), f_par))
        put3(acc_t, p, add3(add3(row3(acc_t, p), mat3_vec(rot, torque_i)), cross3(r, f_par)))


# ---------------------------------------------------------------- the inertial regressor

# The one implementation of the joint-torque regressor (d RNEA / d pi): identification's
# regressor_array and the rigid step's parameter columns both call regressor_into.


@njit(cache=True)
def _body_columns(w, v, al, a, torque, force):
    """A body's net torque about its origin and its force (body axes) per unit of each of its ten
    inertial parameters, into ``torque`` and ``force`` (3, 10).

    ``w, v, al, a`` (3,): the body's angular velocity [rad/s], its origin's velocity [m/s], its
    angular acceleration [rad/s²] and its origin's acceleration (gravity included) [m/s²]. With ``h = m c``: ``n = I al + h x a + w x (I w + h x v) + v x (m v - h x w)`` and
    ``f = m a - h x al + w x (m v - h x w)``, linear in ``(m, h, I)``; for the ``h`` columns
    ``skew(x) skew(y) = y x^T - (x . y) 1``.
    """
    torque[:, :] = 0.0
    force[:, :] = 0.0
    force[0, 0] = a[0] + w[1] * v[2] - w[2] * v[1]
    force[1, 0] = a[1] + w[2] * v[0] - w[0] * v[2]
    force[2, 0] = a[2] + w[0] * v[1] - w[1] * v[0]
    ww = w[0] * w[0] + w[1] * w[1] + w[2] * w[2]
    for r in range(3):
        for c in range(3):
            force[r, 1 + c] = w[r] * w[c] - (ww if r == c else 0.0)  # skew(al) + skew(w)^2
            torque[r, 1 + c] = w[r] * v[c] - v[r] * w[c]  # - skew(a) - skew(w) skew(v) + skew(v) skew(w)
    force[0, 2] -= al[2]
    force[0, 3] += al[1]
    force[1, 1] += al[2]
    force[1, 3] -= al[0]
    force[2, 1] -= al[1]
    force[2, 2] += al[0]
    torque[0, 2] += a[2]
    torque[0, 3] -= a[1]
    torque[1, 1] -= a[2]
    torque[1, 3] += a[0]
    torque[2, 1] += a[1]
    torque[2, 2] -= a[0]
    for k in range(6):  # I al + w x (I w), with I x = L(x) [I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]
        r, c = _I6[k]
        e_al = (al[c], al[r])
        e_w = (w[c], w[r])
        torque[r, 4 + k] += e_al[0]
        lw0, lw1, lw2 = 0.0, 0.0, 0.0  # L(w)[:, k]
        if r == 0:
            lw0 += e_w[0]
        elif r == 1:
            lw1 += e_w[0]
        else:
            lw2 += e_w[0]
        if r != c:
            torque[c, 4 + k] += e_al[1]
            if c == 1:
                lw1 += e_w[1]
            else:
                lw2 += e_w[1]
        torque[0, 4 + k] += w[1] * lw2 - w[2] * lw1
        torque[1, 4 + k] += w[2] * lw0 - w[0] * lw2
        torque[2, 4 + k] += w[0] * lw1 - w[1] * lw0


@njit(cache=True)
def _move_to_parent(rot, pos, torque, force):
    """Columns (3, 10) of a body's torque and force expressed about its parent's origin, parent axes."""
    for k in range(torque.shape[1]):
        f0 = rot[0, 0] * force[0, k] + rot[0, 1] * force[1, k] + rot[0, 2] * force[2, k]
        f1 = rot[1, 0] * force[0, k] + rot[1, 1] * force[1, k] + rot[1, 2] * force[2, k]
        f2 = rot[2, 0] * force[0, k] + rot[2, 1] * force[1, k] + rot[2, 2] * force[2, k]
        t0 = rot[0, 0] * torque[0, k] + rot[0, 1] * torque[1, k] + rot[0, 2] * torque[2, k]
        t1 = rot[1, 0] * torque[0, k] + rot[1, 1] * torque[1, k] + rot[1, 2] * torque[2, k]
        t2 = rot[2, 0] * torque[0, k] + rot[2, 1] * torque[1, k] + rot[2, 2] * torque[2, k]
        force[0, k], force[1, k], force[2, k] = f0, f1, f2
        torque[0, k] = t0 + pos[1] * f2 - pos[2] * f1
        torque[1, k] = t1 + pos[2] * f0 - pos[0] * f2
        torque[2, k] = t2 + pos[0] * f1 - pos[1] * f0


@njit(cache=True)
def regressor_into(fk, work, selected, out):
    """Joint-torque regressor columns of the selected bodies: ``out[i, j, k] = d tau_i / d pi_j,k``.

    ``pi_j`` are body j's ten inertial parameters (:data:`INERTIAL_PARAMETERS`: mass [kg], first
    moment ``m c`` [kg·m], inertia about the body origin [kg·m²], body axes), so ``out`` (n, n, 10)
    is in [N·m or N] per unit of each. Exact (RNEA is linear in ``pi``). It reads the body motions
    and local placements of the last :func:`rnea_values_into` into ``work`` (whose inertials do
    not matter) and overwrites ``work.y_torque``, ``work.y_force``.

    Args:
        fk: ``(parents, origin_rot, origin_xyz, axis, is_revolute)``.
        work: :data:`RneaWork`.
        selected: (n,) ints: body j's columns ``out[:, j, :]`` are written where ``selected[j]`` is
            not 0 (zero in the rows of joints that do not support j); the others are left as they are.
        out: Output (n, n, 10).
    """
    parents, _, _, axis, is_revolute = fk
    torque, force = work.y_torque, work.y_force
    n = out.shape[0]
    for j in range(n):  # one call for all bodies: the work tuple is passed once, not once a body
        if selected[j] == 0:
            continue
        for i in range(n):
            for k in range(10):
                out[i, j, k] = 0.0
        _body_columns(work.omega[j], work.vel[j], work.alpha[j], work.acc[j], torque, force)
        i = j
        while i >= 0:  # the body's wrench columns, moved up the chain to each joint that carries them
            carried = torque if is_revolute[i] else force
            for k in range(10):
                out[i, j, k] = axis[i, 0] * carried[0, k] + axis[i, 1] * carried[1, k] + axis[i, 2] * carried[2, k]
            if parents[i] >= 0:
                _move_to_parent(work.rot_local[i], work.pos_local[i], torque, force)
            i = parents[i]


# ---------------------------------------------------------------- CRBA and small solves


@njit(cache=True)
def mass_matrix_into(fk, mass, h, inertia_o, work, out):
    """Joint-space inertia M(q) (n, n) at the placements in ``work`` (composite rigid bodies, world axes)."""
    parents, _, _, axis, is_revolute = fk
    n = mass.shape[0]
    rw, pw = work.rot_world, work.pos_world
    cm, ch, ci = work.c_mass, work.c_h, work.c_inertia
    for k in range(n):  # each body's inertial about the world origin, world axes
        pos, rot = row3(pw, k), rw[k]
        hw = mat3_vec(rot, row3(h, k))
        cm[k] = mass[k]
        put3(ch, k, add3(scale3(pos, mass[k]), hw))
        for r in range(3):
            for c in range(3):
                acc = 0.0
                for s in range(3):
                    acc += rot[r, s] * (inertia_o[k, s, 0] * rot[c, 0] + inertia_o[k, s, 1] * rot[c, 1] + inertia_o[k, s, 2] * rot[c, 2])
                ci[k, r, c] = acc
        # -m [p]x[p]x - [p]x[hw]x - [hw]x[p]x = m (|p|^2 1 - p p^T) + 2 (p . hw) 1 - p hw^T - hw p^T
        pp, ph = dot3(pos, pos), dot3(pos, hw)
        for r in range(3):
            for c in range(3):
                ci[k, r, c] += -mass[k] * pos[r] * pos[c] - pos[r] * hw[c] - hw[r] * pos[c]
            ci[k, r, r] += mass[k] * pp + 2.0 * ph
    for k in range(n - 1, 0, -1):
        p = parents[k]
        if p >= 0:
            cm[p] += cm[k]
            put3(ch, p, add3(row3(ch, p), row3(ch, k)))
            for r in range(3):
                for c in range(3):
                    ci[p, r, c] += ci[k, r, c]
    for i in range(n):
        z_i, o_i = mat3_vec(rw[i], row3(axis, i)), row3(pw, i)
        if is_revolute[i]:
            om, lin = z_i, cross3(o_i, z_i)  # spatial motion at the world origin
        else:
            om, lin = (0.0, 0.0, 0.0), z_i
        hc = row3(ch, i)
        mom_ang = add3(mat3_vec(ci[i], om), cross3(hc, lin))  # momentum of subtree i under joint i's motion
        mom_lin = add3(scale3(lin, cm[i]), cross3(om, hc))
        j = i
        while j >= 0:
            z_j, o_j = mat3_vec(rw[j], row3(axis, j)), row3(pw, j)
            if is_revolute[j]:
                value = dot3(z_j, mom_ang) + dot3(cross3(o_j, z_j), mom_lin)
            else:
                value = dot3(z_j, mom_lin)
            out[i, j] = value
            out[j, i] = value
            j = parents[j]
    for i in range(n):  # entries of joints on different branches
        for j in range(i):
            if not supports(parents, j, i) and not supports(parents, i, j):
                out[i, j] = 0.0
                out[j, i] = 0.0


@njit(cache=True)
def lu_factor(a, pivots):
    """In-place LU with partial pivoting of ``a`` (n, n); returns False when singular."""
    n = a.shape[0]
    for k in range(n):
        best, row = abs(a[k, k]), k
        for r in range(k + 1, n):
            if abs(a[r, k]) > best:
                best, row = abs(a[r, k]), r
        pivots[k] = row
        if not best > 0.0 or not math.isfinite(best):
            return False
        if row != k:
            for c in range(n):
                a[k, c], a[row, c] = a[row, c], a[k, c]
        inv = 1.0 / a[k, k]
        for r in range(k + 1, n):
            a[r, k] *= inv
            f = a[r, k]
            if f != 0.0:
                for c in range(k + 1, n):
                    a[r, c] -= f * a[k, c]
    return True


@njit(cache=True)
def lu_solve_columns(lu, pivots, b):
    """Solve ``A X = B`` in place for ``b`` (n, m) with the factors of :func:`lu_factor`."""
    n, m = b.shape
    for k in range(n):
        row = pivots[k]
        if row != k:
            for c in range(m):
                b[k, c], b[row, c] = b[row, c], b[k, c]
    for r in range(n):
        for k in range(r):
            f = lu[r, k]
            if f != 0.0:
                for c in range(m):
                    b[r, c] -= f * b[k, c]
    for r in range(n - 1, -1, -1):
        for k in range(r + 1, n):
            f = lu[r, k]
            if f != 0.0:
                for c in range(m):
                    b[r, c] -= f * b[k, c]
        inv = 1.0 / lu[r, r]
        for c in range(m):
            b[r, c] *= inv


# ---------------------------------------------------------------- forward dynamics derivatives


@njit(cache=True)
def _aba_derivatives(fk, mass, h, inertia_o, armature, up, q, qd, tau):
    n = q.shape[0]
    work = rnea_work(n)
    nle, zeros = np.empty(n), np.zeros(n)
    rnea_values_into(fk, mass, h, inertia_o, up, q, qd, zeros, work, nle)
    lu, pivots = np.zeros((n, n)), np.zeros(n, dtype=np.int64)
    mass_matrix_into(fk, mass, h, inertia_o, work, lu)
    for j in range(n):  # the rotors' reflected inertia; constant, so no derivative of its own
        lu[j, j] += armature[j]
    if not lu_factor(lu, pivots):
        return False, zeros, lu, lu, lu
    qdd = (tau - nle).reshape((n, 1))
    lu_solve_columns(lu, pivots, qdd)
    qdd = qdd.reshape(n)
    rnea_values_into(fk, mass, h, inertia_o, up, q, qd, qdd, work, nle)
    d_q, d_qd = np.empty((n, n)), np.empty((n, n))
    rnea_derivatives_into(fk, mass, h, inertia_o, up, qd, work, d_q, d_qd)
    minv = np.eye(n)
    rhs = np.empty((n, 3 * n))
    rhs[:, :n], rhs[:, n : 2 * n], rhs[:, 2 * n :] = -d_q, -d_qd, minv
    lu_solve_columns(lu, pivots, rhs)
    return True, qdd, rhs[:, :n].copy(), rhs[:, n : 2 * n].copy(), rhs[:, 2 * n :].copy()


def aba_derivatives(fast, q, qd, tau):
    """Forward dynamics and its derivatives (Pinocchio's ``computeABADerivatives``), rigid terms only.

    Args:
        fast: :class:`~diffsim_ros.dynamics.fast.FastDynamics` (payload and armature included; springs,
            damping and friction are not: see :class:`~diffsim_ros.sim.rigid_fast.FastRigidStep`).
        q, qd, tau: Joint positions [rad or m], velocities and torques [N·m or N], (n,) each.

    Returns:
        ``(qdd (n,), dqdd/dq (n, n), dqdd/dqd (n, n), M^-1 (n, n))``; ``M^-1 = dqdd/dtau``.

    Raises:
        ArithmeticError: Singular joint-space inertia.
    """
    ok, qdd, d_q, d_qd, minv = _aba_derivatives(
        fast.fk, fast.mass, fast.first_moment, fast.inertia_o, fast.armature, fast.up,
        fast._vector(q), fast._vector(qd), fast._vector(tau),
    )
    if not ok:
        raise ArithmeticError("singular joint-space inertia: check the model's masses and inertias")
    return qdd, d_q, d_qd, minv
