"""The rigid-body implicit-Euler step compiled, with exact Jacobians in state, torque and parameters.

The same step as :class:`~diffsim_ros.sim.rigid.RigidBodySimulator` (``"implicit_euler"``):
per substep of length ``h``, with ``B = diag(slope)`` the implicit damping (viscous damping,
the slope of the smoothed Coulomb friction and the diagonal of the springs' damping),

    (M(q) + h B) qdd = tau + tau_passive(q, qd) - nle(q, qd),   qd+ = qd + h qdd,   q+ = q + h qd+.

Its derivatives come from the implicit function ``F = RNEA(q, qd, qdd) + h B qdd - tau -
tau_passive = 0``: ``dqdd/dx = -(M + h B)^-1 dF/dx`` (Carpentier & Mansard's ABA
derivatives with an armature; :mod:`~diffsim_ros.dynamics.derivatives`), for x the state,
the torque and the model parameters that identification fits (payload, body inertials,
joint damping, friction and armature (M(q) holds each joint's armature), every spring parameter: :mod:`~diffsim_ros.dynamics.spring_derivatives`).
Substeps chain by the product rule.

A :class:`FastRigidStep` is an explicit float64 snapshot of a model (rebuild it when the
parameters change). Its kernels take two flat buffers (floats, ints) so that a call from
Python costs little more than the computation; compiled callers (the MPC solver) unpack
them once with :func:`unpack_model`. The torch simulator stays the reference: the tests
hold the two to 1e-9 and the Jacobians to autograd and to finite differences.
"""

import copy
from collections import namedtuple

import numpy as np
import torch

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.derivatives import (
    INERTIAL_PARAMETERS,
    lu_factor,
    lu_solve_columns,
    mass_matrix_into,
    regressor_into,
    rnea_derivatives_into,
    rnea_values_into,
    rnea_work,
)
from diffsim_ros.dynamics.fast import FastDynamics, SpringArrays
from diffsim_ros.dynamics.passive import DEFAULT_FRICTION_VELOCITY_SCALE
from diffsim_ros.dynamics.regressor import inertial_vector
from diffsim_ros.dynamics.spring_derivatives import spring_columns, spring_derivatives_into
from diffsim_ros.model.springs import SPRING_LAWS

__all__ = ["FastRigidStep", "implicit_substep", "PARAMETER_GROUPS", "step_into", "step_work", "StepJacobians",
           "unpack_model"]

PARAMETER_GROUPS = ("payload", "inertia", "damping", "friction", "armature", "spring")
"""Parameter groups the compiled step differentiates (the identification groups without geometry)."""

_INERTIAL, _DAMPING, _FRICTION, _SPRING, _ARMATURE = 0, 1, 2, 3, 4
_HEADER = 8  # ints: n, lever s, torsion t, point c, columns P, inertial columns, substeps, passive

StepJacobians = namedtuple("StepJacobians", ["q", "qd", "d_state", "d_torque", "d_parameters"])
StepJacobians.__doc__ = """One step and its Jacobians (float64 numpy).

Attributes:
    q, qd: The state after the step, (n,) each.
    d_state: ``d(q+, qd+)/d(q, qd)``, (2n, 2n).
    d_torque: ``d(q+, qd+)/d tau``, (2n, n).
    d_parameters: ``d(q+, qd+)/d theta``, (2n, P) in :attr:`FastRigidStep.parameter_columns`
        order, or None when not asked for.
"""


# ---------------------------------------------------------------- flat buffers


def _f64(t):
    return np.ascontiguousarray(np.asarray(t.detach().cpu() if isinstance(t, torch.Tensor) else t, dtype=np.float64)).reshape(-1)


def _point_inertia(c):
    return float(c @ c) * np.eye(3) - np.outer(c, c)


def _inertial_increments(model, fast, groups):
    """Parameter columns ``(names, kinds, indices)`` and the inertial increments of the inertial ones.

    An inertial column's increment is ``d pi / d theta`` (10,) of its body (the chain rule through
    this parametrization: URDF mass, COM and COM inertia, payload mass and COM), so that its
    column of ``dF/dtheta`` is the regressor's ``Y[:, body, :] @ d pi / d theta``.

    Returns:
        ``(names, kinds (P,), indices (P,), (bodies (K,), d_pi (K, 10)))`` for K inertial columns.
    """
    names, kinds, indices = [], [], []
    body, d_mass, d_h, d_inertia = [], [], [], []

    def inertial(name, b, dm, dh, di):
        names.append(name)
        kinds.append(_INERTIAL)
        indices.append(len(body))
        body.append(b)
        d_mass.append(dm)
        d_h.append(dh)
        d_inertia.append(di)

    p = model.params
    if "inertia" in groups:
        pairs = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))
        for b, link in enumerate(model.body_names):
            m, c = float(p.mass[b]), _f64(p.com[b])
            inertial(f"{link}.mass", b, 1.0, c, _point_inertia(c))
            for k in range(3):
                e = np.eye(3)[k]
                inertial(f"{link}.com[{k}]", b, 0.0, m * e, m * (2.0 * c[k] * np.eye(3) - np.outer(e, c) - np.outer(c, e)))
            for k, (r, s) in enumerate(pairs):
                di = np.zeros((3, 3))
                di[r, s] = di[s, r] = 1.0
                inertial(f"{link}.inertia[{k}]", b, 0.0, np.zeros(3), di)
    for group, kind in (("damping", _DAMPING), ("friction", _FRICTION), ("armature", _ARMATURE)):
        if group in groups:
            for j, joint in enumerate(model.joint_names):
                names.append(f"{joint}.{group}")
                kinds.append(kind)
                indices.append(j)
    if "spring" in groups:
        column = 0
        for law, element, _ in model.spring_elements():
            for key in SPRING_LAWS[law].fields:
                for k in range(3) if key in SPRING_LAWS[law].vectors else (None,):
                    names.append(f"{element}.spring.{key}" + ("" if k is None else f"[{k}]"))
                    kinds.append(_SPRING)
                    indices.append(column)
                    column += 1
    if "payload" in groups:
        frame = model.frame(model.payload_frame)
        rot = _f64(frame.placement).reshape(4, 4)[:3, :3]
        c = rot @ _f64(p.payload_com) + _f64(frame.placement).reshape(4, 4)[:3, 3]
        m = float(p.payload_mass)
        inertial("payload.mass", frame.body, 1.0, c, _point_inertia(c))
        for k in range(3):
            dc = rot[:, k]
            inertial(f"payload.com[{k}]", frame.body, 0.0, m * dc, m * (2.0 * float(c @ dc) * np.eye(3) - np.outer(dc, c) - np.outer(c, dc)))
    d_pi = inertial_vector(torch.tensor(d_mass, dtype=torch.float64), torch.tensor(np.reshape(d_h, (-1, 3))),
                           torch.tensor(np.reshape(d_inertia, (-1, 3, 3)))).numpy()
    increments = (np.array(body, dtype=np.int64), d_pi.reshape(-1, len(INERTIAL_PARAMETERS)))
    return tuple(names), np.array(kinds, dtype=np.int64), np.array(indices, dtype=np.int64), increments


def _anchor_rotations(model):
    """(c, 2, 3, 3): rotation of each point spring's end links in their body frames."""
    out = np.zeros((len(model.point_springs), 2, 3, 3))
    for s, layout in enumerate(model.point_springs):
        for side, link in enumerate((layout.link_a, layout.link_b)):
            out[s, side] = _f64(model.frames[link].placement).reshape(4, 4)[:3, :3]
    return out


def _pack(model, dt, substeps, passive, groups):
    fast = FastDynamics.from_model(model)
    names, kinds, indices, (in_body, in_pi) = _inertial_increments(model, fast, groups)
    sp = fast.springs
    n, s, t, c = model.nq, sp.lever_joints.shape[0], sp.torsion_joints.shape[0], sp.point_body_a.shape[0]
    header = [n, s, t, c, len(names), in_body.shape[0], int(substeps), int(bool(passive))]
    ints = header + [fast.parents, fast.is_revolute, sp.lever_joints, sp.torsion_joints, sp.point_body_a, sp.point_body_b,
                     sp.point_tension_only, kinds, indices, in_body]
    ints = np.concatenate([np.atleast_1d(np.asarray(x, dtype=np.int64)).reshape(-1) for x in ints])
    p = model.params
    floats = [
        fast.origin_rot, fast.origin_xyz, fast.axis, fast.mass, fast.first_moment, fast.inertia_o, fast.up,
        _f64(p.damping), _f64(p.friction), _f64(p.armature), [DEFAULT_FRICTION_VELOCITY_SCALE, float(dt)],
        sp.lever_stiffness, sp.lever_offset, sp.lever_alpha1, sp.lever_l1, sp.lever_l2, sp.lever_rest_length,
        sp.torsion_stiffness, sp.torsion_offset, sp.torsion_damping,
        sp.point_a, sp.point_b, sp.point_stiffness, sp.point_rest_length, sp.point_damping, _anchor_rotations(model),
        in_pi,
    ]
    dt_index = sum(np.size(x) for x in floats[:10]) + 1  # the period inside the constants pair
    floats = np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1) for x in floats])
    assert floats[dt_index] == float(dt)
    return floats, ints, names, dt_index


@njit(cache=True)
def _take(buf, offset, size):
    return buf[offset : offset + size], offset + size


@njit(cache=True)
def unpack_model(floats, ints):
    """The model tuple the compiled kernels take, as views into the two buffers of a :class:`FastRigidStep`.

    Returns:
        ``(fk, inertials, up, springs, anchor_rot, joint (damping, friction, armature), constants
        (friction velocity scale, dt), options (substeps, passive), columns (kinds, indices,
        inertial bodies, their increments d pi / d theta (K, 10)))``.
    """
    n, s, t, c, cols, nin, substeps, passive = ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6], ints[7]
    o = _HEADER
    parents, o = _take(ints, o, n)
    is_rev, o = _take(ints, o, n)
    lever_joints, o = _take(ints, o, s)
    torsion_joints, o = _take(ints, o, t)
    body_a, o = _take(ints, o, c)
    body_b, o = _take(ints, o, c)
    tension_only, o = _take(ints, o, c)
    kinds, o = _take(ints, o, cols)
    indices, o = _take(ints, o, cols)
    in_body, o = _take(ints, o, nin)
    o = 0
    origin_rot, o = _take(floats, o, 9 * n)
    origin_xyz, o = _take(floats, o, 3 * n)
    axis, o = _take(floats, o, 3 * n)
    mass, o = _take(floats, o, n)
    h, o = _take(floats, o, 3 * n)
    inertia_o, o = _take(floats, o, 9 * n)
    up, o = _take(floats, o, 3)
    damping, o = _take(floats, o, n)
    friction, o = _take(floats, o, n)
    armature, o = _take(floats, o, n)
    consts, o = _take(floats, o, 2)
    lever = []
    for _ in range(6):
        a, o = _take(floats, o, s)
        lever.append(a)
    ts, o = _take(floats, o, t)
    to, o = _take(floats, o, t)
    td, o = _take(floats, o, t)
    pa, o = _take(floats, o, 3 * c)
    pb, o = _take(floats, o, 3 * c)
    ps, o = _take(floats, o, c)
    pr, o = _take(floats, o, c)
    pd, o = _take(floats, o, c)
    anchor_rot, o = _take(floats, o, 18 * c)
    in_pi, o = _take(floats, o, 10 * nin)
    fk = (parents, origin_rot.reshape((n, 3, 3)), origin_xyz.reshape((n, 3)), axis.reshape((n, 3)), is_rev)
    springs = SpringArrays(
        lever_joints, lever[0], lever[1], lever[2], lever[3], lever[4], lever[5],
        torsion_joints, ts, to, td, body_a, body_b, pa.reshape((c, 3)), pb.reshape((c, 3)), ps, pr, pd, tension_only,
    )
    inertials = (mass, h.reshape((n, 3)), inertia_o.reshape((n, 3, 3)))
    columns = (kinds, indices, in_body, in_pi.reshape((nin, 10)))
    return (fk, inertials, up, springs, anchor_rot.reshape((c, 2, 3, 3)), (damping, friction, armature), consts,
            (substeps, passive), columns)


# ---------------------------------------------------------------- the step


@njit(cache=True)
def step_work(n, n_spring_columns, n_columns):
    """Work area of :func:`step_into` for ``n`` joints, spring and parameter columns.

    ``(rnea work, springs, spring outputs, solve, chain, regressor)``; regressor: ``(Y (n, n, 10),
    marks (n,))``, the bodies' regressor columns of the parameter Jacobians (empty without columns).
    """
    z = np.zeros
    springs = (z((n, 3)), z((n, 3)), z((n, n)), z(n), z((n, 3)))
    spring_out = (z(n), z((n, n)), z((n, n)), z((n, n)), z((n, n)), z((n, n_spring_columns)), z((n, n_spring_columns)), z((n, n_spring_columns)))
    solve = (z((n, n)), z(n, dtype=np.int64), z((n, 3 * n + n_columns)), z(n), z(n), z(n), z(n), z(n), z(n), z((n, n)), z((n, n)))
    chain = (z((2 * n, 2 * n)), z((2 * n, n)), z((2 * n, n_columns)), z((2 * n, 2 * n)), z((2 * n, n + n_columns)))
    # the regressor's buffers live here (its column scratch in the RneaWork): allocating them in
    # _parameter_rhs, or the scratch here, made every step's Jacobians ~10 % slower (measured),
    # with or without parameter columns
    regressor = (z((n if n_columns else 0, n, 10)), z(n, dtype=np.int64))
    return rnea_work(n), springs, spring_out, solve, chain, regressor


@njit(cache=True)
def implicit_substep(model, work, q, qd, tau, h, jacobians, parameters, q_out, qd_out):
    """One implicit-Euler substep into ``q_out``, ``qd_out``; with ``jacobians`` the solved
    ``dqdd/d(q, qd, tau, theta)`` are left in ``solve[2]`` (n, 3n + P). Returns False when
    ``M + h B`` is singular."""
    # elements are taken as needed: unpacking every array of the model and work tuples costs a
    # reference-count update each, microseconds per call at this size
    fk, up, passive = model[0], model[2], model[7][1]
    mass, hm, inertia = model[1]
    rw, solve = work[0], work[3]
    a_mat, pivots, rhs, nle, qdd, slope, tanh_v, tau_p, zeros, d_rq, d_rqd = solve
    n = q.shape[0]
    zeros[:] = 0.0
    rnea_values_into(fk, mass, hm, inertia, up, q, qd, zeros, rw, nle)
    mass_matrix_into(fk, mass, hm, inertia, rw, a_mat)
    for j in range(n):
        tau_p[j], slope[j], tanh_v[j] = 0.0, 0.0, 0.0
    if passive:
        damping, friction = model[5][0], model[5][1]
        vs = model[6][0]
        elastic, de_dq, cmat, dcv_dq, ddiag_dq, de_dp, dcv_dp, ddiag_dp = work[2]
        spring_derivatives_into(model[3], model[4], fk, q, qd, rw.rot_world, rw.pos_world, work[1],
                                elastic, de_dq, cmat, dcv_dq, ddiag_dq, de_dp, dcv_dp, ddiag_dp)
        for j in range(n):
            t = np.tanh(qd[j] / vs)
            tanh_v[j] = t
            slope[j] = damping[j] + friction[j] / vs * (1.0 - t * t) + cmat[j, j]
            acc = elastic[j] - damping[j] * qd[j] - friction[j] * t
            for k in range(n):
                acc -= cmat[j, k] * qd[k]
            tau_p[j] = acc
    armature = model[5][2]
    for j in range(n):  # M + diag(armature) + h B
        a_mat[j, j] += armature[j] + h * slope[j]
        qdd[j] = tau[j] + tau_p[j] - nle[j]
    if not lu_factor(a_mat, pivots):
        return False
    lu_solve_columns(a_mat, pivots, qdd.reshape((n, 1)))
    for j in range(n):
        qd_out[j] = qd[j] + h * qdd[j]
        q_out[j] = q[j] + h * qd_out[j]
    if not jacobians:
        return True
    rnea_values_into(fk, mass, hm, inertia, up, q, qd, qdd, rw, zeros)
    rnea_derivatives_into(fk, mass, hm, inertia, up, qd, rw, d_rq, d_rqd)
    cols = rhs.shape[1] - 3 * n
    rhs[:, :] = 0.0
    for j in range(n):  # rhs = -dF/d(q, qd, tau, theta), rigid part
        for k in range(n):
            rhs[j, k], rhs[j, n + k] = -d_rq[j, k], -d_rqd[j, k]
        rhs[j, 2 * n + j] = 1.0
    if passive:
        _passive_rhs(model, work, h, rhs)
    if parameters and cols > 0:
        _parameter_rhs(model, work, qd, h, rhs, 3 * n, passive)
    lu_solve_columns(a_mat, pivots, rhs)
    return True


@njit(cache=True)
def _passive_rhs(model, work, h, rhs):
    """Add the passive terms' ``-dF/d(q, qd)`` to ``rhs`` (springs, damping, smoothed friction)."""
    damping, friction, vs = model[5][0], model[5][1], model[6][0]
    _, de_dq, cmat, dcv_dq, ddiag_dq, _, _, _ = work[2]
    qdd, tanh_v = work[3][4], work[3][6]
    n = qdd.shape[0]
    for j in range(n):
        for k in range(n):
            rhs[j, k] -= h * qdd[j] * ddiag_dq[j, k] - de_dq[j, k] + dcv_dq[j, k]
            rhs[j, n + k] -= cmat[j, k]
        t2 = 1.0 - tanh_v[j] * tanh_v[j]
        rhs[j, n + j] -= damping[j] + friction[j] * t2 / vs - h * qdd[j] * friction[j] / vs * 2.0 * tanh_v[j] * t2 / vs


@njit(cache=True)
def _parameter_rhs(model, work, qd, h, rhs, first, passive):
    """``rhs[:, first + p] = -dF/dtheta_p`` for every parameter column (``rhs`` zero there before).

    Inertial columns: ``F`` holds ``RNEA = sum_b Y[:, b, :] pi_b`` at the solved acceleration, so
    ``dF/dtheta = Y[:, b, :] d pi_b / d theta`` (the regressor at the last RNEA sweep, ``qdd``
    included); armature, damping, friction and spring columns are the passive terms' own.
    """
    fk, _, _, _, _, _, consts, _, (kinds, indices, in_body, in_pi) = model
    rw, _, (_, _, _, _, _, de_dp, dcv_dp, ddiag_dp), (_, _, _, _, qdd, _, tanh_v, _, _, _, _), _, (y, marks) = work
    n, vs, parents = qd.shape[0], consts[0], fk[0]
    marks[:] = 0
    for index in range(in_body.shape[0]):  # each body with inertial columns once (inertia and payload may share one)
        marks[in_body[index]] = 1
    regressor_into(fk, rw, marks, y)
    for p in range(kinds.shape[0]):
        kind, index, col = kinds[p], indices[p], first + p
        if kind == _INERTIAL:
            b = in_body[index]
            i = b
            while i >= 0:  # the joints that carry body b: the other rows of Y[:, b, :] are zero
                acc = 0.0
                for k in range(10):
                    acc += y[i, b, k] * in_pi[index, k]
                rhs[i, col] = -acc
                i = parents[i]
        elif kind == _ARMATURE:  # F holds armature * qdd
            rhs[index, col] = -qdd[index]
        elif not passive:
            continue
        elif kind == _DAMPING:
            rhs[index, col] = -(h * qdd[index] + qd[index])
        elif kind == _FRICTION:
            t = tanh_v[index]
            rhs[index, col] = -(h * qdd[index] * (1.0 - t * t) / vs + t)
        else:
            for j in range(n):
                rhs[j, col] = -(h * qdd[j] * ddiag_dp[j, index] - de_dp[j, index] + dcv_dp[j, index])


@njit(cache=True)
def _substep_jacobians(n, h, solved, cols, jx, jup):
    """Jacobians of one substep from ``solved`` = dqdd/d(q, qd, tau, theta): jx (2n, 2n), jup (2n, n + P)."""
    for r in range(n):
        for k in range(2 * n):
            d_qd = h * solved[r, k] + (1.0 if k == n + r else 0.0)
            jx[n + r, k] = d_qd
            jx[r, k] = (1.0 if k == r else 0.0) + h * d_qd
        for k in range(n + cols):
            d_qd = h * solved[r, 2 * n + k]
            jup[n + r, k] = d_qd
            jup[r, k] = h * d_qd


@njit(cache=True)
def step_into(model, work, q, qd, tau, jacobians, parameters, q_out, qd_out, d_state, d_torque, d_parameters):
    """One control period (all substeps) from ``(q, qd)`` under ``tau``; returns False when singular.

    With ``jacobians``, fills ``d_state`` (2n, 2n) and ``d_torque`` (2n, n); with
    ``parameters`` also ``d_parameters`` (2n, P).
    """
    n = q.shape[0]
    substeps = model[7][0]
    h = model[6][1] / substeps
    acc_x, acc_u, acc_p, jx, jup = work[4]
    cols = acc_p.shape[1] if parameters else 0
    qs, qds = q.copy(), qd.copy()
    for index in range(substeps):
        if not implicit_substep(model, work, qs, qds, tau, h, jacobians, parameters, q_out, qd_out):
            return False
        if jacobians:
            _substep_jacobians(n, h, work[3][2], cols, jx, jup)
            if index == 0:
                acc_x[:, :] = jx
                acc_u[:, :] = jup[:, :n]
                acc_p[:, :cols] = jup[:, n : n + cols]
            else:
                acc_x[:, :] = jx @ acc_x
                acc_u[:, :] = jx @ acc_u + jup[:, :n]
                if cols > 0:
                    acc_p[:, :] = jx @ acc_p + jup[:, n:]
        qs[:] = q_out
        qds[:] = qd_out
    if jacobians:
        d_state[:, :] = acc_x
        d_torque[:, :] = acc_u
        if parameters:
            d_parameters[:, :] = acc_p
    return True


@njit(cache=True)
def _step_entry(floats, ints, q, qd, tau, jacobians, parameters, q_out, qd_out, d_state, d_torque, d_parameters):
    model = unpack_model(floats, ints)
    n = q.shape[0]
    work = step_work(n, ints[1] * 6 + ints[2] * 3 + ints[3] * 9, ints[4])
    return step_into(model, work, q, qd, tau, jacobians, parameters, q_out, qd_out, d_state, d_torque, d_parameters)


class FastRigidStep:
    """Compiled implicit-Euler step of a RobotModel snapshot with exact Jacobians (float64 numpy).

    Args:
        model: RobotModel (its current parameter values are copied).
        dt: Control period [s].
        substeps: Substeps per period.
        passive: Include springs, damping and smoothed Coulomb friction (as RigidBodySimulator).
        parameters: Parameter groups of :meth:`jacobians` ``(..., parameters=True)``, a subset of
            :data:`PARAMETER_GROUPS`.

    Attributes:
        parameter_columns: Names of the parameter columns: ``"<name>"`` for scalars,
            ``"<name>[k]"`` for component k of a vector parameter.
    """

    def __init__(self, model, dt, substeps=1, passive=True, parameters=PARAMETER_GROUPS):
        if not dt > 0:
            raise ValueError(f"dt must be positive, got {dt}")
        if int(substeps) < 1:
            raise ValueError(f"substeps must be >= 1, got {substeps}")
        unknown = sorted(set(parameters) - set(PARAMETER_GROUPS))
        if unknown:
            raise ValueError(f"unknown parameter groups {unknown}; choose from {PARAMETER_GROUPS}")
        self.nq = model.nq
        self.dt, self.substeps, self.passive = float(dt), int(substeps), bool(passive)
        self.joint_names = tuple(model.joint_names)
        self.floats, self.ints, self.parameter_columns, self._dt_index = _pack(model, dt, substeps, passive, parameters)
        self.spring_columns = spring_columns(FastDynamics.from_model(model).springs)

    @classmethod
    def from_simulator(cls, simulator, parameters=PARAMETER_GROUPS):
        """The compiled twin of a RigidBodySimulator (implicit Euler only)."""
        if getattr(simulator, "integrator", None) != "implicit_euler":
            raise ValueError("the compiled step implements the RigidBodySimulator's implicit_euler integrator")
        return cls(simulator.model, simulator.dt, simulator.substeps, simulator.passive, parameters)

    def with_dt(self, dt):
        """The same snapshot with another control period ``dt`` [s] (the substep count is kept)."""
        if not dt > 0:
            raise ValueError(f"dt must be positive, got {dt}")
        other = copy.copy(self)
        other.floats = self.floats.copy()
        other.floats[self._dt_index] = other.dt = float(dt)
        return other

    def _vector(self, name, x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.shape != (self.nq,):
            raise ValueError(f"{name} must have shape ({self.nq},), got {x.shape}")
        return x

    def _run(self, q, qd, tau, jacobians, parameters):
        q, qd, tau = self._vector("q", q), self._vector("qd", qd), self._vector("tau", tau)
        n, cols = self.nq, len(self.parameter_columns)
        q_out, qd_out = np.empty(n), np.empty(n)
        d_state = np.empty((2 * n, 2 * n)) if jacobians else np.empty((0, 0))
        d_torque = np.empty((2 * n, n)) if jacobians else np.empty((0, 0))
        d_params = np.empty((2 * n, cols)) if parameters else np.empty((0, 0))
        if not _step_entry(self.floats, self.ints, q, qd, tau, jacobians, parameters, q_out, qd_out, d_state, d_torque, d_params):
            raise ArithmeticError("singular joint-space inertia (M + h B): check masses, inertias and damping")
        return q_out, qd_out, d_state, d_torque, d_params

    def step(self, q, qd, tau):
        """The state ``(q+, qd+)`` after one period from ``(q [rad], qd [rad/s])`` under ``tau`` [N·m]."""
        q_out, qd_out, *_ = self._run(q, qd, tau, False, False)
        return q_out, qd_out

    def jacobians(self, q, qd, tau, parameters=False):
        """One step and its Jacobians: a :data:`StepJacobians`.

        Args:
            q, qd, tau: Joint state [rad, rad/s] and torques [N·m], (n,) each.
            parameters: Also the Jacobian in the model parameters (``parameter_columns``).
        """
        q_out, qd_out, d_state, d_torque, d_params = self._run(q, qd, tau, True, bool(parameters))
        return StepJacobians(q_out, qd_out, d_state, d_torque, d_params if parameters else None)
