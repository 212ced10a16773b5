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
from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.dynamics.kinematics import motion_subspace
from diffsim_ros.dynamics.rnea import body_inertials

from diffsim_ros._compiled import njit


__all__ = ["FastDynamics", "placements_into", "spring_torques_into"]


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
    joint_rot = np.empty((3, 3))
    for i in range(n):
        if is_revolute[i]:
            x, y, z = axis[i, 0], axis[i, 1], axis[i, 2]
            c, s = math.cos(q[i]), math.sin(q[i])
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


@njit(cache=True)
def _springs(spring_joints, stiffness, offset, alpha1, l1, l2, rest_length, q):
    tau = np.zeros(q.shape[0])
    spring_torques_into(spring_joints, stiffness, offset, alpha1, l1, l2, rest_length, q, tau)
    return tau


@njit(cache=True)
def spring_torques_into(spring_joints, stiffness, offset, alpha1, l1, l2, rest_length, q, tau):
    """Spring torques [N·m] at ``q`` into ``tau`` (n,), zero on joints without a spring."""
    tau[:] = 0.0
    for s in range(spring_joints.shape[0]):
        phi = math.pi - alpha1[s] - offset[s] + q[spring_joints[s]]
        length = math.sqrt(l1[s] ** 2 + l2[s] ** 2 - 2.0 * l1[s] * l2[s] * math.cos(phi))
        tau[spring_joints[s]] = -stiffness[s] * (length - rest_length[s]) * l1[s] * l2[s] * math.sin(phi) / length


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
    spring_joints: np.ndarray  # (s,) int64
    spring_params: tuple  # six (s,) arrays: stiffness, offset, alpha1, l1, l2, rest_length

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
            spring_joints=np.array(model.spring_joints, dtype=np.int64),
            spring_params=tuple(
                arr(t)
                for t in (p.spring_stiffness, p.spring_offset, p.spring_alpha1, p.spring_l1, p.spring_l2, p.spring_rest_length)
            ),
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

    def spring_torques(self, q):
        """Spring element torques -dV/dtheta [N·m], shape (n,)."""
        return _springs(self.spring_joints, *self.spring_params, self._vector(q))

    def mass_matrix_diagonal(self, q):
        """Diagonal of the joint-space inertia M(q) [kg·m² or kg], shape (n,): each joint's
        effective inertia with the other joints locked."""
        return _mass_matrix_diagonal(
            self.parents, self.origin_rot, self.origin_xyz, self.axis, self.is_revolute,
            self.mass, self.first_moment, self.inertia_o, self._vector(q),
        )

    def rnea(self, q, qd, qdd):
        """Rigid-body inverse dynamics M(q) qdd + C(q, qd) qd + g(q) [N·m], shape (n,)."""
        return _rnea(
            self.parents, self.origin_rot, self.origin_xyz, self.axis, self.is_revolute,
            self.mass, self.first_moment, self.inertia_o, self.up,
            self._vector(q), self._vector(qd), self._vector(qdd),
        )
