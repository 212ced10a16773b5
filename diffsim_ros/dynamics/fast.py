"""Single-configuration dynamics for control loops: compiled loops, microseconds per call.

The torch algorithms pay several microseconds of dispatch per tensor operation, which is
fine for batches but too slow for a 1 kHz control loop on one configuration. The kernels
below are plain loops compiled by numba (``cache=True``: compiled once per installation);
without numba the very same functions run as ordinary Python (correct, but slow).

A :class:`FastDynamics` is an explicit, frozen snapshot of a model's parameters (like
Pinocchio's ``Data``; nothing is cached behind the user's back): rebuild it with
:meth:`FastDynamics.from_model` when parameters change, e.g. after a calibration update.
It is not differentiable; the torch functions stay the reference, and the tests check both
against Pinocchio.
"""

import math
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.dynamics.kinematics import motion_subspace
from diffsim_ros.dynamics.rnea import body_inertials

from diffsim_ros._compiled import njit


__all__ = ["add_length_gradient", "FastDynamics", "placements_into", "point_end", "spring_arrays",
           "spring_torques_into", "SpringArrays"]


@njit(cache=True)
def _placements(parents, origin_rot, origin_xyz, axis, is_revolute, q):
    """Local and world placements of every body, shapes (n, 3, 3) and (n, 3) each."""
    n = q.shape[0]
    rot_local = np.empty((n, 3, 3))
    pos_local = np.empty((n, 3))
    rot_world = np.empty((n, 3, 3))
    pos_world = np.empty((n, 3))
    placements_into(parents, origin_rot, origin_xyz, axis, is_revolute, q, rot_local, pos_local, rot_world, pos_world)
    return rot_local, pos_local, rot_world, pos_world


@njit(cache=True)
def placements_into(parents, origin_rot, origin_xyz, axis, is_revolute, q, rot_local, pos_local, rot_world, pos_world):
    """:func:`_placements` into given arrays (no allocation in loops that call it every step)."""
    n = q.shape[0]
    joint_rot = np.empty((3, 3), rot_local.dtype)  # complex for the PBD kernel's complex-step tangents
    for i in range(n):
        if is_revolute[i]:
            x, y, z = axis[i, 0], axis[i, 1], axis[i, 2]
            c, s = np.cos(q[i]), np.sin(q[i])
            v = 1.0 - c
            joint_rot[0, 0], joint_rot[0, 1], joint_rot[0, 2] = c + x * x * v, x * y * v - z * s, x * z * v + y * s
            joint_rot[1, 0], joint_rot[1, 1], joint_rot[1, 2] = x * y * v + z * s, c + y * y * v, y * z * v - x * s
            joint_rot[2, 0], joint_rot[2, 1], joint_rot[2, 2] = x * z * v - y * s, y * z * v + x * s, c + z * z * v
            for r in range(3):
                for k in range(3):
                    rot_local[i, r, k] = (
                        origin_rot[i, r, 0] * joint_rot[0, k]
                        + origin_rot[i, r, 1] * joint_rot[1, k]
                        + origin_rot[i, r, 2] * joint_rot[2, k]
                    )
                pos_local[i, r] = origin_xyz[i, r]
        else:
            for r in range(3):
                for k in range(3):
                    rot_local[i, r, k] = origin_rot[i, r, k]
                slide = origin_rot[i, r, 0] * axis[i, 0] + origin_rot[i, r, 1] * axis[i, 1] + origin_rot[i, r, 2] * axis[i, 2]
                pos_local[i, r] = origin_xyz[i, r] + slide * q[i]
        p = parents[i]
        if p < 0:
            rot_world[i] = rot_local[i]
            pos_world[i] = pos_local[i]
        else:
            for r in range(3):
                for k in range(3):
                    rot_world[i, r, k] = (
                        rot_world[p, r, 0] * rot_local[i, 0, k]
                        + rot_world[p, r, 1] * rot_local[i, 1, k]
                        + rot_world[p, r, 2] * rot_local[i, 2, k]
                    )
                pos_world[i, r] = pos_world[p, r] + (
                    rot_world[p, r, 0] * pos_local[i, 0]
                    + rot_world[p, r, 1] * pos_local[i, 1]
                    + rot_world[p, r, 2] * pos_local[i, 2]
                )


@njit(cache=True)
def _gravity(parents, origin_rot, origin_xyz, axis, is_revolute, mass, first_moment, up, q):
    """g(q): joint j holds the gravity moment of every body it moves, about its own axis."""
    n = q.shape[0]
    _, _, rot, pos = _placements(parents, origin_rot, origin_xyz, axis, is_revolute, q)
    moment = np.empty((n, 3))  # subtree sums of m_k c_k (world)
    subtree_mass = mass.copy()
    for k in range(n):
        for r in range(3):
            moment[k, r] = mass[k] * pos[k, r] + (
                rot[k, r, 0] * first_moment[k, 0] + rot[k, r, 1] * first_moment[k, 1] + rot[k, r, 2] * first_moment[k, 2]
            )
    for k in range(n - 1, -1, -1):
        p = parents[k]
        if p >= 0:
            subtree_mass[p] += subtree_mass[k]
            for r in range(3):
                moment[p, r] += moment[k, r]
    tau = np.empty(n)
    for j in range(n):
        z0 = rot[j, 0, 0] * axis[j, 0] + rot[j, 0, 1] * axis[j, 1] + rot[j, 0, 2] * axis[j, 2]
        z1 = rot[j, 1, 0] * axis[j, 0] + rot[j, 1, 1] * axis[j, 1] + rot[j, 1, 2] * axis[j, 2]
        z2 = rot[j, 2, 0] * axis[j, 0] + rot[j, 2, 1] * axis[j, 1] + rot[j, 2, 2] * axis[j, 2]
        if is_revolute[j]:
            l0 = moment[j, 0] - subtree_mass[j] * pos[j, 0]
            l1 = moment[j, 1] - subtree_mass[j] * pos[j, 1]
            l2 = moment[j, 2] - subtree_mass[j] * pos[j, 2]
            c0 = l1 * up[2] - l2 * up[1]
            c1 = l2 * up[0] - l0 * up[2]
            c2 = l0 * up[1] - l1 * up[0]
            tau[j] = z0 * c0 + z1 * c1 + z2 * c2
        else:
            tau[j] = subtree_mass[j] * (z0 * up[0] + z1 * up[1] + z2 * up[2])
    return tau


@njit(cache=True)
def _cross(a, b):
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


@njit(cache=True)
def _rnea(parents, origin_rot, origin_xyz, axis, is_revolute, mass, first_moment, inertia_o, up, q, qd, qdd):
    """Recursive Newton-Euler in body frames (same recursion as dynamics.rnea)."""
    n = q.shape[0]
    rot_local, pos_local, _, _ = _placements(parents, origin_rot, origin_xyz, axis, is_revolute, q)
    omega = np.zeros((n, 3))
    vel = np.zeros((n, 3))
    alpha = np.zeros((n, 3))
    acc = np.zeros((n, 3))
    torque = np.zeros((n, 3))
    force = np.zeros((n, 3))
    zero = np.zeros(3)
    for i in range(n):
        e = rot_local[i].T
        r = pos_local[i]
        p = parents[i]
        if p < 0:
            w_p, v_p, al_p, a_p = zero, zero, zero, up
        else:
            w_p, v_p, al_p, a_p = omega[p], vel[p], alpha[p], acc[p]
        if is_revolute[i]:
            sa, sl = axis[i] * qd[i], zero
            sa_dd, sl_dd = axis[i] * qdd[i], zero
        else:
            sa, sl = zero, axis[i] * qd[i]
            sa_dd, sl_dd = zero, axis[i] * qdd[i]
        w = e @ w_p + sa
        v = e @ (v_p + _cross(w_p, r)) + sl
        al = e @ al_p + sa_dd + _cross(w, sa)
        a = e @ (a_p + _cross(al_p, r)) + sl_dd + _cross(w, sl) + _cross(v, sa)
        h = first_moment[i]
        m = mass[i]
        n_v = inertia_o[i] @ w + _cross(h, v)
        f_v = m * v - _cross(h, w)
        torque[i] = inertia_o[i] @ al + _cross(h, a) + _cross(w, n_v) + _cross(v, f_v)
        force[i] = m * a - _cross(h, al) + _cross(w, f_v)
        omega[i], vel[i], alpha[i], acc[i] = w, v, al, a
    tau = np.empty(n)
    for i in range(n - 1, -1, -1):
        if is_revolute[i]:
            tau[i] = torque[i, 0] * axis[i, 0] + torque[i, 1] * axis[i, 1] + torque[i, 2] * axis[i, 2]
        else:
            tau[i] = force[i, 0] * axis[i, 0] + force[i, 1] * axis[i, 1] + force[i, 2] * axis[i, 2]
        p = parents[i]
        if p >= 0:
            f_parent = rot_local[i] @ force[i]
            force[p] += f_parent
            torque[p] += rot_local[i] @ torque[i] + _cross(pos_local[i], f_parent)
    return tau


@njit(cache=True)
def _mass_matrix_diagonal(parents, origin_rot, origin_xyz, axis, is_revolute, mass, first_moment, inertia_o, q):
    """M_jj = sum over the bodies k that joint j moves of their inertia about joint j's axis.

    For revolute j with world axis z through p_j and body k (origin p_k, rotation R_k, mass m,
    first moment h and inertia I_o about its origin, body axes):
    ``z'R I_o R'z + m |z x (p_k - p_j)|^2 + 2 (z x (p_k - p_j)) . (z x R h)``.
    """
    n = q.shape[0]
    _, _, rot, pos = _placements(parents, origin_rot, origin_xyz, axis, is_revolute, q)
    out = np.zeros(n)
    z = np.empty(3)
    local = np.empty(3)
    h = np.empty(3)
    for j in range(n):
        for r in range(3):
            z[r] = rot[j, r, 0] * axis[j, 0] + rot[j, r, 1] * axis[j, 1] + rot[j, r, 2] * axis[j, 2]
        for k in range(j, n):
            a = k
            while a > j:
                a = parents[a]
            if a != j:
                continue  # body k is not moved by joint j
            if not is_revolute[j]:
                out[j] += mass[k]
                continue
            for r in range(3):
                local[r] = rot[k, 0, r] * z[0] + rot[k, 1, r] * z[1] + rot[k, 2, r] * z[2]
                h[r] = rot[k, r, 0] * first_moment[k, 0] + rot[k, r, 1] * first_moment[k, 1] + rot[k, r, 2] * first_moment[k, 2]
            d0, d1, d2 = pos[k, 0] - pos[j, 0], pos[k, 1] - pos[j, 1], pos[k, 2] - pos[j, 2]
            l0, l1, l2 = z[1] * d2 - z[2] * d1, z[2] * d0 - z[0] * d2, z[0] * d1 - z[1] * d0
            m0, m1, m2 = z[1] * h[2] - z[2] * h[1], z[2] * h[0] - z[0] * h[2], z[0] * h[1] - z[1] * h[0]
            rotational = 0.0
            for r in range(3):
                for c in range(3):
                    rotational += local[r] * inertia_o[k, r, c] * local[c]
            out[j] += rotational + mass[k] * (l0 * l0 + l1 * l1 + l2 * l2) + 2.0 * (l0 * m0 + l1 * m1 + l2 * m2)
    return out


SpringArrays = namedtuple(
    "SpringArrays",
    [
        # lever springs (s,): joints, stiffness, offset, alpha1, l1, l2, rest length
        "lever_joints", "lever_stiffness", "lever_offset", "lever_alpha1", "lever_l1", "lever_l2", "lever_rest_length",
        # torsion springs (t,): joints, stiffness, rest position, damping
        "torsion_joints", "torsion_stiffness", "torsion_offset", "torsion_damping",
        # point springs (c,): end bodies (-1 = base), ends in those body frames (c, 3), stiffness,
        # rest length, damping, tension only
        "point_body_a", "point_body_b", "point_a", "point_b",
        "point_stiffness", "point_rest_length", "point_damping", "point_tension_only",
    ],
)
"""Float64 snapshot of a model's spring elements for the compiled kernels (:func:`spring_arrays`)."""


def spring_arrays(model):
    """:data:`SpringArrays` of ``model``'s current spring values (detached, float64, CPU)."""

    def arr(t):
        return np.ascontiguousarray(t.detach().to(dtype=torch.float64, device="cpu").numpy())

    p = model.params
    ends = []
    for side, anchor in (("a", p.point_anchor_a), ("b", p.point_anchor_b)):
        local = arr(anchor).reshape(-1, 3)
        for i, layout in enumerate(model.point_springs):  # link frame -> body frame
            placement = arr(model.frames[getattr(layout, f"link_{side}")].placement)
            local[i] = placement[:3, :3] @ local[i] + placement[:3, 3]
        ends.append(np.ascontiguousarray(local))
    joints = lambda values: np.array(values, dtype=np.int64)  # noqa: E731
    return SpringArrays(
        joints(model.spring_joints),
        *(arr(t) for t in (p.spring_stiffness, p.spring_offset, p.spring_alpha1, p.spring_l1, p.spring_l2, p.spring_rest_length)),
        joints(model.torsion_joints),
        *(arr(t) for t in (p.torsion_stiffness, p.torsion_offset, p.torsion_damping)),
        joints([e.body_a for e in model.point_springs]),
        joints([e.body_b for e in model.point_springs]),
        *ends,
        *(arr(t) for t in (p.point_stiffness, p.point_rest_length, p.point_damping)),
        np.array([e.tension_only for e in model.point_springs], dtype=np.bool_),
    )


@njit(cache=True)
def _springs(springs, fk, q, qd):
    n = q.shape[0]
    tau, slope, grad = np.empty(n), np.empty(n), np.empty(n)
    placements = (np.empty((n, 3, 3)), np.empty((n, 3)), np.empty((n, 3, 3)), np.empty((n, 3)))
    spring_torques_into(springs, fk, q, qd, tau, slope, placements, grad)
    for j in range(n):
        tau[j] -= slope[j] * qd[j]
    return tau


@njit(cache=True)
def point_end(springs, side, s, rot_w, pos_w, out):
    """World position of end ``side`` (0: a, 1: b) of point spring ``s`` into ``out`` (3,)."""
    body = springs.point_body_a[s] if side == 0 else springs.point_body_b[s]
    local = springs.point_a[s] if side == 0 else springs.point_b[s]
    for r in range(3):
        if body < 0:
            out[r] = local[r]
        else:
            out[r] = pos_w[body, r] + rot_w[body, r, 0] * local[0] + rot_w[body, r, 1] * local[1] + rot_w[body, r, 2] * local[2]


@njit(cache=True)
def add_length_gradient(fk, body, sign, end, unit, rot_w, pos_w, grad):
    """``grad += sign * d(u . end)/dq`` over the joints that move ``body`` (dynamics.springs._point_geometry)."""
    parents, _, _, axis, is_revolute = fk
    j = body
    while j >= 0:
        z0 = rot_w[j, 0, 0] * axis[j, 0] + rot_w[j, 0, 1] * axis[j, 1] + rot_w[j, 0, 2] * axis[j, 2]
        z1 = rot_w[j, 1, 0] * axis[j, 0] + rot_w[j, 1, 1] * axis[j, 1] + rot_w[j, 1, 2] * axis[j, 2]
        z2 = rot_w[j, 2, 0] * axis[j, 0] + rot_w[j, 2, 1] * axis[j, 1] + rot_w[j, 2, 2] * axis[j, 2]
        if is_revolute[j]:
            d0, d1, d2 = end[0] - pos_w[j, 0], end[1] - pos_w[j, 1], end[2] - pos_w[j, 2]
            z0, z1, z2 = z1 * d2 - z2 * d1, z2 * d0 - z0 * d2, z0 * d1 - z1 * d0
        grad[j] += sign * (z0 * unit[0] + z1 * unit[1] + z2 * unit[2])
        j = parents[j]


@njit(cache=True)
def spring_torques_into(springs, fk, q, qd, tau, slope, placements, grad):
    """Spring element torques at ``(q, qd)`` split for implicit damping (dynamics.springs).

    Fills ``tau`` (n,) [N·m or N] with the elastic torques plus the explicit part of the
    damping (a point spring's coupling between joints) and ``slope`` (n,) with the diagonal
    of the damping matrix: the full spring torque is ``tau - slope * qd``.

    Args:
        springs: :data:`SpringArrays`.
        fk: ``(parents, origin_rot, origin_xyz, axis, is_revolute)`` of the model.
        q, qd: Joint positions and velocities, (n,).
        tau, slope: Outputs, (n,).
        placements: Scratch ``(rot_local, pos_local, rot_world, pos_world)`` for the point
            springs' kinematics, shapes (n, 3, 3), (n, 3), (n, 3, 3), (n, 3).
        grad: Scratch (n,).
    """
    tau[:] = 0.0
    slope[:] = 0.0
    for s in range(springs.lever_joints.shape[0]):
        j = springs.lever_joints[s]
        l1, l2 = springs.lever_l1[s], springs.lever_l2[s]
        phi = math.pi - springs.lever_alpha1[s] - springs.lever_offset[s] + q[j]
        length = np.sqrt(l1**2 + l2**2 - 2.0 * l1 * l2 * np.cos(phi))
        tau[j] += -springs.lever_stiffness[s] * (length - springs.lever_rest_length[s]) * l1 * l2 * np.sin(phi) / length
    for s in range(springs.torsion_joints.shape[0]):
        j = springs.torsion_joints[s]
        tau[j] += -springs.torsion_stiffness[s] * (q[j] - springs.torsion_offset[s])
        slope[j] += springs.torsion_damping[s]
    if springs.point_body_a.shape[0] == 0:
        return
    parents, origin_rot, origin_xyz, axis, is_revolute = fk
    rot_local, pos_local, rot_w, pos_w = placements
    placements_into(parents, origin_rot, origin_xyz, axis, is_revolute, q, rot_local, pos_local, rot_w, pos_w)
    end_a, end_b, unit = np.empty(3, tau.dtype), np.empty(3, tau.dtype), np.empty(3, tau.dtype)
    for s in range(springs.point_body_a.shape[0]):
        point_end(springs, 0, s, rot_w, pos_w, end_a)
        point_end(springs, 1, s, rot_w, pos_w, end_b)
        length = np.sqrt((end_b[0] - end_a[0]) ** 2 + (end_b[1] - end_a[1]) ** 2 + (end_b[2] - end_a[2]) ** 2)
        stretch = length - springs.point_rest_length[s]
        if springs.point_tension_only[s] and not stretch.real > 0.0:
            continue  # a slack cable
        for r in range(3):
            unit[r] = (end_b[r] - end_a[r]) / length
        grad[:] = 0.0
        add_length_gradient(fk, springs.point_body_b[s], 1.0, end_b, unit, rot_w, pos_w, grad)
        add_length_gradient(fk, springs.point_body_a[s], -1.0, end_a, unit, rot_w, pos_w, grad)
        rate = 0.0
        for j in range(q.shape[0]):
            rate += grad[j] * qd[j]
        elastic, c = -springs.point_stiffness[s] * stretch, springs.point_damping[s]
        for j in range(q.shape[0]):
            tau[j] += elastic * grad[j] - c * grad[j] * (rate - grad[j] * qd[j])
            slope[j] += c * grad[j] * grad[j]


@dataclass(frozen=True)
class FastDynamics:
    """Compiled single-configuration dynamics of a RobotModel snapshot (float64 numpy).

    Inputs are joint vectors of shape (n,) in ``model.joint_names`` order; outputs are
    float64 arrays of shape (n,).
    """

    parents: np.ndarray  # (n,) int64
    origin_rot: np.ndarray  # (n, 3, 3)
    origin_xyz: np.ndarray  # (n, 3) [m]
    axis: np.ndarray  # (n, 3) unit joint axes
    is_revolute: np.ndarray  # (n,) bool
    mass: np.ndarray  # (n,) [kg], payload included
    first_moment: np.ndarray  # (n, 3) [kg·m]
    inertia_o: np.ndarray  # (n, 3, 3) [kg·m²] about body origins
    up: np.ndarray  # (3,) minus gravity [m/s²]
    springs: tuple  # SpringArrays
    armature: np.ndarray  # (n,) [kg·m² or kg] reflected rotor inertias: M(q) + diag(armature)

    @classmethod
    def from_model(cls, model):
        """Snapshot ``model``'s structure and current parameter values (detached, float64, CPU)."""

        def arr(t):
            return np.ascontiguousarray(t.detach().to(dtype=torch.float64, device="cpu").numpy())

        s_ang, _ = motion_subspace(model)
        mass, h, inertia_o = (arr(t) for t in body_inertials(model))
        p = model.params
        return cls(
            parents=np.array(model.parents, dtype=np.int64),
            origin_rot=arr(model.joint_origin_rot),
            origin_xyz=arr(p.joint_origin_xyz),
            axis=arr(model.joint_axis),
            is_revolute=arr(s_ang).any(-1) if s_ang.numel() else np.zeros(model.nq, dtype=bool),
            mass=mass,
            first_moment=h,
            inertia_o=inertia_o,
            up=-arr(model.gravity),
            springs=spring_arrays(model),
            armature=arr(p.armature),
        )

    @property
    def nq(self):
        return self.parents.shape[0]

    def _vector(self, x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.shape != (self.nq,):
            raise ValueError(f"expected a joint vector of shape ({self.nq},), got {x.shape}")
        return x

    def gravity_torques(self, q):
        """Generalized gravity g(q) [N·m] for q [rad], shape (n,)."""
        return _gravity(
            self.parents, self.origin_rot, self.origin_xyz, self.axis, self.is_revolute,
            self.mass, self.first_moment, self.up, self._vector(q),
        )

    @property
    def fk(self):
        """``(parents, origin_rot, origin_xyz, axis, is_revolute)``: the kinematics the kernels take."""
        return (self.parents, self.origin_rot, self.origin_xyz, self.axis, self.is_revolute)

    def spring_torques(self, q, qd=None):
        """Spring element torques [N·m], shape (n,): elastic ``-dV/dq``, plus the springs'
        damping when ``qd`` [rad/s] is given (as :func:`~diffsim_ros.dynamics.spring_torques`)."""
        q = self._vector(q)
        qd = np.zeros_like(q) if qd is None else self._vector(qd)
        return _springs(self.springs, self.fk, q, qd)

    def mass_matrix_diagonal(self, q):
        """Diagonal of the joint-space inertia M(q) [kg·m² or kg], shape (n,): each joint's
        effective inertia with the other joints locked, its armature included."""
        return _mass_matrix_diagonal(
            self.parents, self.origin_rot, self.origin_xyz, self.axis, self.is_revolute,
            self.mass, self.first_moment, self.inertia_o, self._vector(q),
        ) + self.armature

    def mass_matrix(self, q):
        """Joint-space inertia M(q) [kg·m² or kg] with the armature on its diagonal, shape (n, n):
        column j is the RNEA of a unit
        acceleration of joint j at rest, less the gravity term (n + 1 compiled RNEA calls).

        Built on :meth:`rnea`, which the impedance controller's model term has already compiled,
        rather than on the compiled CRBA of the step derivatives
        (:func:`~diffsim_ros.dynamics.derivatives.mass_matrix_into`): that would be one more
        kernel to compile, on a controller's first cycle of a fresh install."""
        q = self._vector(q)
        zero = np.zeros_like(q)
        gravity = self.rnea(q, zero, zero)
        return np.stack([self.rnea(q, zero, unit) - gravity for unit in np.eye(q.shape[0])], axis=1)

    def rnea(self, q, qd, qdd):
        """Rigid-body inverse dynamics (M(q) + diag(armature)) qdd + C(q, qd) qd + g(q) [N·m], shape (n,)."""
        qdd = self._vector(qdd)
        return _rnea(
            self.parents, self.origin_rot, self.origin_xyz, self.axis, self.is_revolute,
            self.mass, self.first_moment, self.inertia_o, self.up,
            self._vector(q), self._vector(qd), qdd,
        ) + self.armature * qdd
