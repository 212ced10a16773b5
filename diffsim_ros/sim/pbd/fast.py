"""Compiled forward rollouts of the PBD step for batches that need no gradient.

The torch implementation pays a tensor dispatch per small operation: at batch 1024 a step
of the Baxter arm is ~100 tensor operations on 6x6 and 3x3 blocks, bound by memory traffic
and kernel overhead. Rollouts that need no gradient (sampling, torque maps, Monte Carlo,
speed) run the very same XPBD step here as plain loops compiled by numba, one rollout after
another, or one per thread of numba's pool when it has more than one (``prange`` over the
batch), every intermediate in registers or a small per-rollout work area.

Scope: fixed-base serial chains of revolute joints with the direct solver (every arm this
package targets; :func:`fast_rollout_supported` says why another setup is not), with spring
elements of every law (:func:`~diffsim_ros.dynamics.fast.spring_torques_into`). The
phases follow :mod:`.solver` one for one (forces, prediction, the joint rows with their
implicit damping and limit rows, the block-tridiagonal projection, the velocity update
and the closing RATTLE half kick); the tests hold the two implementations to 1e-9 of
each other (through joint-limit contacts, to the torch step's own sensitivity to a
one-ulp change of the start). Orientations are carried as rotation matrices instead of
quaternions (the same rotations, rounding aside).

A :class:`FastPBD` is an explicit float64 snapshot of a model (like
:class:`~diffsim_ros.dynamics.fast.FastDynamics`): nothing is cached behind the user's
back; :class:`~diffsim_ros.sim.pbd.simulator.PBDSimulator` builds one per rollout.
"""

import math
from collections import namedtuple
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros._compiled import njit, prange

try:
    from numba import get_num_threads as _numba_threads
    from numba import types as _types
    from numba.extending import overload as _overload
except ImportError:  # pragma: no cover - numba is a declared dependency
    _overload = None

    def _numba_threads():
        return 1
from diffsim_ros.dynamics.fast import FastDynamics, placements_into, spring_torques_into
from diffsim_ros.dynamics.passive import DEFAULT_FRICTION_VELOCITY_SCALE
from diffsim_ros.model.robot_model import REVOLUTE
from diffsim_ros.sim.pbd.bodies import build_system

__all__ = ["accelerate_bodies", "apply_impulses", "close_substep", "factor_system", "fast_rollout_supported",
           "FASTMATH", "FastPBD", "frames_into", "joint_load", "joint_step_into", "keep_torch_threads",
           "kernel_options", "KICK_FINISH", "KICK_FULL", "KICK_START", "limit_targets", "physics_tensors", "predict_positions",
           "row_blocks", "row_rhs", "set_spin", "SMALL_ANGLE_SQUARED", "so3_exp_into", "solve_system",
           "solve_system_columns", "state_from_joints", "turn_poses", "velocity_rhs", "work_area",
           "write_joint_state"]

SMALL_ANGLE_SQUARED = 1e-8  # as dynamics.spatial.so3_exp: Taylor series below it
KICK_START, KICK_FULL, KICK_FINISH = 0, 1, 2
# Contraction and reassociation only: "nnan"/"ninf" would let LLVM drop the NaN checks.
FASTMATH = {"contract", "reassoc", "nsz", "arcp"}


def fast_rollout_supported(model, settings, base=None):
    """Why the compiled rollout cannot run this setup, or None when it can.

    Args:
        model: RobotModel.
        settings: SolverSettings.
        base: The simulator's free base (None = fixed).

    Returns:
        A reason (str) or None.
    """
    if base is not None:
        return "a free base"
    if settings.solver != "direct":
        return f"the '{settings.solver}' solver (the compiled rollout implements the direct one)"
    if model.device.type != "cpu":
        return f"device {model.device}"
    if model.dtype != torch.float64:
        return f"dtype {model.dtype} (the compiled rollout computes in float64)"
    if any(t != REVOLUTE for t in model.joint_types):
        return "prismatic joints"
    if any(p != j - 1 for j, p in enumerate(model.parents)):
        return "a branched tree (the compiled rollout solves serial chains)"
    return None


# ---------------------------------------------------------------- complex-safe arithmetic
# The kernels below can still run on complex128 arrays (left from the complex-step Jacobians,
# now removed: fast_tangents.py differentiates the step): branches and pivots look at real
# parts, and _atan2, _rodrigues and _tanh have first-order complex extensions. Not removed
# yet: doing so changes the float64 results at rounding level (fastmath reassociation).


def _atan2(y, x):
    """``math.atan2`` (real arguments); on complex ones the first-order complex-step extension."""
    return math.atan2(y, x)


if _overload is not None:

    @_overload(_atan2, jit_options={"fastmath": FASTMATH})
    def _atan2_typed(y, x):
        if isinstance(y, _types.Complex) or isinstance(x, _types.Complex):

            def complex_step(y, x):
                yr, xr = y.real, x.real
                return complex(math.atan2(yr, xr), (xr * y.imag - yr * x.imag) / (xr * xr + yr * yr))

            return complex_step
        return lambda y, x: math.atan2(y, x)


def _rodrigues(theta2):
    """Rodrigues coefficients ``(sin t / t, (1 - cos t) / t^2)`` of ``t^2 = theta2`` (not small).

    On complex arguments the first-order complex-step extension (one real sine and cosine
    instead of complex ones: the kernel's costliest complex operation).
    """
    theta = math.sqrt(theta2)
    return math.sin(theta) / theta, (1.0 - math.cos(theta)) / theta2


if _overload is not None:

    @_overload(_rodrigues, jit_options={"fastmath": FASTMATH})
    def _rodrigues_typed(theta2):
        if isinstance(theta2, _types.Complex):

            def complex_step(theta2):
                t = theta2.real
                theta = math.sqrt(t)
                sine, cosine = math.sin(theta), math.cos(theta)
                a, b = sine / theta, (1.0 - cosine) / t
                da = (theta * cosine - sine) / (2.0 * theta * t)  # d/dt of sin(sqrt t) / sqrt t
                db = (theta * sine - 2.0 * (1.0 - cosine)) / (2.0 * t * t)  # d/dt of (1 - cos sqrt t) / t
                return complex(a, da * theta2.imag), complex(b, db * theta2.imag)

            return complex_step

        def real(theta2):
            theta = math.sqrt(theta2)
            return math.sin(theta) / theta, (1.0 - math.cos(theta)) / theta2

        return real


def _tanh(x):
    """``math.tanh`` (real argument); on a complex one the first-order complex-step extension."""
    return math.tanh(x)


if _overload is not None:

    @_overload(_tanh, jit_options={"fastmath": FASTMATH})
    def _tanh_typed(x):
        if isinstance(x, _types.Complex):

            def complex_step(x):
                t = math.tanh(x.real)
                return complex(t, (1.0 - t * t) * x.imag)

            return complex_step
        return lambda x: math.tanh(x)


# ---------------------------------------------------------------- small linear algebra


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _rotate(rot, local, k, out):
    """``out[c] = rot @ local[:, k]``-style product: out (3,) = rot (3, 3) @ column k of local (3, 3)."""
    for r in range(3):
        out[r] = rot[r, 0] * local[0, k] + rot[r, 1] * local[1, k] + rot[r, 2] * local[2, k]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def so3_exp_into(phi, out):
    """Rotation matrix of the rotation vector ``phi`` (3,) into ``out`` (3, 3) (Rodrigues)."""
    theta2 = phi[0] * phi[0] + phi[1] * phi[1] + phi[2] * phi[2]
    if theta2.real < SMALL_ANGLE_SQUARED:
        a, b = 1.0 - theta2 / 6.0, 0.5 - theta2 / 24.0
    else:
        a, b = _rodrigues(theta2)
    x, y, z = phi[0], phi[1], phi[2]
    out[0, 0] = 1.0 - b * (y * y + z * z)
    out[1, 1] = 1.0 - b * (x * x + z * z)
    out[2, 2] = 1.0 - b * (x * x + y * y)
    out[0, 1] = -a * z + b * x * y
    out[1, 0] = a * z + b * x * y
    out[0, 2] = a * y + b * x * z
    out[2, 0] = -a * y + b * x * z
    out[1, 2] = -a * x + b * y * z
    out[2, 1] = a * x + b * y * z


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _mul3(a, b, out):
    for r in range(3):
        for c in range(3):
            out[r, c] = a[r, 0] * b[0, c] + a[r, 1] * b[1, c] + a[r, 2] * b[2, c]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _congruence(rot, mat, out):
    """``out = rot @ mat @ rot^T`` for a symmetric ``mat`` (body inertia to world axes)."""
    m00, m01, m02, m11, m12, m22 = mat[0, 0], mat[0, 1], mat[0, 2], mat[1, 1], mat[1, 2], mat[2, 2]
    for r in range(3):
        a0, a1, a2 = rot[r, 0], rot[r, 1], rot[r, 2]
        t0 = a0 * m00 + a1 * m01 + a2 * m02  # row r of rot @ mat
        t1 = a0 * m01 + a1 * m11 + a2 * m12
        t2 = a0 * m02 + a1 * m12 + a2 * m22
        for c in range(r, 3):
            value = t0 * rot[c, 0] + t1 * rot[c, 1] + t2 * rot[c, 2]
            out[r, c] = value
            out[c, r] = value


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _lu(mat, pivots, inv_diagonal):
    """In-place LU factorization with partial pivoting of a square matrix (``P mat = L U``).

    ``inv_diagonal`` receives ``1 / U[i, i]`` (:func:`_lu_solve_columns` multiplies instead of divides).
    """
    size = mat.shape[0]
    for col in range(size):
        pivot = col
        for r in range(col + 1, size):
            if abs(mat[r, col].real) > abs(mat[pivot, col].real):
                pivot = r
        pivots[col] = pivot
        if pivot != col:
            for c in range(size):
                mat[col, c], mat[pivot, c] = mat[pivot, c], mat[col, c]
        scale = 1.0 / mat[col, col]
        inv_diagonal[col] = scale
        for r in range(col + 1, size):
            f = mat[r, col] * scale
            mat[r, col] = f
            for c in range(col + 1, size):
                mat[r, c] -= f * mat[col, c]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _lu_solve(lu, pivots, inv_diagonal, x):
    """Solve ``mat x = b`` in place (``x`` holds b) with the factors of :func:`_lu`."""
    size = lu.shape[0]
    for col in range(size):
        pivot = pivots[col]
        if pivot != col:
            x[col], x[pivot] = x[pivot], x[col]
    for r in range(1, size):
        acc = x[r]
        for c in range(r):
            acc -= lu[r, c] * x[c]
        x[r] = acc
    for r in range(size - 1, -1, -1):
        acc = x[r]
        for c in range(r + 1, size):
            acc -= lu[r, c] * x[c]
        x[r] = acc * inv_diagonal[r]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _lu_solve_columns(lu, pivots, inv_diagonal, x):
    """Solve ``mat X = B`` in place for all columns of ``x`` (holds B) at once."""
    size, columns = lu.shape[0], x.shape[1]
    for col in range(size):
        pivot = pivots[col]
        if pivot != col:
            for c in range(columns):
                x[col, c], x[pivot, c] = x[pivot, c], x[col, c]
    for r in range(1, size):
        for k in range(r):
            f = lu[r, k]
            for c in range(columns):
                x[r, c] -= f * x[k, c]
    for r in range(size - 1, -1, -1):
        for k in range(r + 1, size):
            f = lu[r, k]
            for c in range(columns):
                x[r, c] -= f * x[k, c]
        for c in range(columns):
            x[r, c] *= inv_diagonal[r]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _matvec6_sub(mat, x, out):
    """``out -= mat @ x`` for a 6x6 matrix and (6, m) columns."""
    for r in range(6):
        for k in range(6):
            f = mat[r, k]
            for c in range(x.shape[1]):
                out[r, c] -= f * x[k, c]


# ---------------------------------------------------------------- joint space <-> particles


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def state_from_joints(fk, com, q, qd, pos, rot, vel, omega, z_ang, origin, placements):
    """Particles at joint positions ``q`` moving with ``qd`` (mapping.state_from_joints).

    Particle 0 is the fixed base; particle k + 1 is body k, at its COM.
    """
    parents, origin_rot, origin_xyz, axis, is_revolute = fk
    rot_local, pos_local, rot_w, pos_w = placements
    placements_into(parents, origin_rot, origin_xyz, axis, is_revolute, q, rot_local, pos_local, rot_w, pos_w)
    n = q.shape[0]
    for r in range(3):
        pos[0, r], vel[0, r], omega[0, r] = 0.0, 0.0, 0.0
        for c in range(3):
            rot[0, r, c] = 1.0 if r == c else 0.0
    for k in range(n):
        p = parents[k] + 1
        for r in range(3):
            z_ang[k, r] = (rot_w[k, r, 0] * axis[k, 0] + rot_w[k, r, 1] * axis[k, 1] + rot_w[k, r, 2] * axis[k, 2]) * qd[k]
            omega[k + 1, r] = omega[p, r] + z_ang[k, r]
            origin[k, r] = pos_w[k, r]
            pos[k + 1, r] = pos_w[k, r] + (
                rot_w[k, r, 0] * com[k + 1, 0] + rot_w[k, r, 1] * com[k + 1, 1] + rot_w[k, r, 2] * com[k + 1, 2]
            )
            for c in range(3):
                rot[k + 1, r, c] = rot_w[k, r, c]
    for k in range(n):
        v0, v1, v2 = 0.0, 0.0, 0.0
        j = k
        while j >= 0:  # v_k = sum over supporting joints of w_j x (c_k - o_j)
            d0, d1, d2 = pos[k + 1, 0] - origin[j, 0], pos[k + 1, 1] - origin[j, 1], pos[k + 1, 2] - origin[j, 2]
            v0 += z_ang[j, 1] * d2 - z_ang[j, 2] * d1
            v1 += z_ang[j, 2] * d0 - z_ang[j, 0] * d2
            v2 += z_ang[j, 0] * d1 - z_ang[j, 1] * d0
            j = parents[j]
        vel[k + 1, 0], vel[k + 1, 1], vel[k + 1, 2] = v0, v1, v2


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def frames_into(local_parent, local_child, pos, rot, w):
    """Joint frames: world ``[lever, axis, reference]`` of both sides of every joint.

    Fills ``w.lever_p`` (parent COM to its anchor), ``w.lever_c``, ``w.axis_p``,
    ``w.axis_c``, ``w.ref_p``, ``w.ref_c`` and ``w.anchor`` (child anchor minus parent
    anchor), each (n, 3). Serial chain: joint j couples particles j and j + 1.
    """
    n = local_parent.shape[0]
    for j in range(n):
        _rotate(rot[j], local_parent[j], 0, w.lever_p[j])
        _rotate(rot[j], local_parent[j], 1, w.axis_p[j])
        _rotate(rot[j], local_parent[j], 2, w.ref_p[j])
        _rotate(rot[j + 1], local_child[j], 0, w.lever_c[j])
        _rotate(rot[j + 1], local_child[j], 1, w.axis_c[j])
        _rotate(rot[j + 1], local_child[j], 2, w.ref_c[j])
        for r in range(3):
            w.anchor[j, r] = pos[j + 1, r] + w.lever_c[j, r] - pos[j, r] - w.lever_p[j, r]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _angle(w, j):
    """Signed joint angle ``atan2(a . (u_p x u_c), u_p . u_c)`` [rad] from the frames."""
    up, uc, a = w.ref_p[j], w.ref_c[j], w.axis_c[j]
    sine = a[0] * (up[1] * uc[2] - up[2] * uc[1]) + a[1] * (up[2] * uc[0] - up[0] * uc[2]) + a[2] * (up[0] * uc[1] - up[1] * uc[0])
    return _atan2(sine, up[0] * uc[0] + up[1] * uc[1] + up[2] * uc[2])


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _rate(w, omega, j):
    """Joint rate ``a . (w_c - w_p)`` [rad/s]."""
    a = w.axis_c[j]
    return a[0] * (omega[j + 1, 0] - omega[j, 0]) + a[1] * (omega[j + 1, 1] - omega[j, 1]) + a[2] * (omega[j + 1, 2] - omega[j, 2])


# ---------------------------------------------------------------- snapshot data and work area

_Physics = namedtuple(
    "_Physics",
    [
        "inv_mass", "inertia", "inv_inertia", "dynamic", "com",  # particles (N,), (N, 3, 3), (N, 3)
        "local_parent", "local_child",  # joint frame columns [lever, axis, reference], (n, 3, 3)
        "lower", "upper", "damping", "friction", "armature",  # joints (n,)
        "gravity", "friction_scale",  # (3,) [m/s^2], friction velocity scale [rad/s]
    ],
)

_Work = namedtuple(
    "_Work",
    [
        # particle state (N = n + 1 particles) and the substep's start poses
        "pos", "rot", "vel", "omega", "pos0", "rot0", "phi",
        # angular velocities for the gyroscopic term: step start, previous and last chords
        "spin", "start", "previous", "last",
        # world inverse inertia and inertia (N, 3, 3), torques on the particles (N, 3)
        "inv_inertia_w", "inertia_w", "torque",
        # joint frames at the current poses (n, 3)
        "lever_p", "lever_c", "axis_p", "axis_c", "ref_p", "ref_c", "anchor",
        # joint quantities (n,): positions, implicit damping, row scale / offset / compliance
        "q", "damping", "sigma", "offset", "row_compliance",
        # joint-row constants of the substep (n, 3): child and parent levers, free axis
        "lever_child", "lever_parent", "free",
        # block-tridiagonal factors (n, 6, 6) and temporaries
        # (the diagonal blocks become the LU factors of the eliminated ones; reduced = G^-1 U)
        "diagonal", "lower", "upper", "reduced", "pivots", "inv_diagonal", "t1", "t2",
        # row right-hand sides, solutions and multipliers (n, 6)
        "rhs", "solution", "lam",
        # FK scratch: joint axes and origins (n, 3), placements (local and world); joint rates
        # from the chords and from w.spin, spring torques, the diagonal of the springs'
        # damping and a point spring's dL/dq (n,)
        "z_ang", "origin", "placements", "rate", "spin_rate", "spring", "spring_slope", "spring_grad",
        # rigid-joint solve: anchors (n, 3), diag(sigma) + R H and its LU (n, n), reduced
        # right-hand side (n,), particle displacements (N, 6), second K^-1 product (n, 6)
        "anchor0", "capacity", "capacity_pivots", "capacity_inv_diagonal", "reduced_rhs", "displacement", "correction",
    ],
)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def work_area(n, like):
    """Work area for ``n`` joints in the dtype of the array ``like`` (float64, or complex128 for tangents)."""
    particles = n + 1
    z = like.dtype
    return _Work(
        np.zeros((particles, 3), z), np.zeros((particles, 3, 3), z), np.zeros((particles, 3), z), np.zeros((particles, 3), z),
        np.zeros((particles, 3), z), np.zeros((particles, 3, 3), z), np.zeros((particles, 3), z),
        np.zeros((particles, 3), z), np.zeros((particles, 3), z), np.zeros((particles, 3), z), np.zeros((particles, 3), z),
        np.zeros((particles, 3, 3), z), np.zeros((particles, 3, 3), z), np.zeros((particles, 3), z),
        np.zeros((n, 3), z), np.zeros((n, 3), z), np.zeros((n, 3), z), np.zeros((n, 3), z), np.zeros((n, 3), z), np.zeros((n, 3), z),
        np.zeros((n, 3), z),
        np.zeros(n, z), np.zeros(n, z), np.zeros(n, z), np.zeros(n, z), np.zeros(n, z),
        np.zeros((n, 3), z), np.zeros((n, 3), z), np.zeros((n, 3), z),
        np.zeros((n, 6, 6), z), np.zeros((n, 6, 6), z), np.zeros((n, 6, 6), z), np.zeros((n, 6, 6), z),
        np.zeros((n, 6), dtype=np.int64), np.zeros((n, 6), z), np.zeros((3, 3), z), np.zeros((3, 3), z),
        np.zeros((n, 6), z), np.zeros((n, 6), z), np.zeros((n, 6), z),
        np.zeros((n, 3), z), np.zeros((n, 3), z),
        (np.zeros((n, 3, 3), z), np.zeros((n, 3), z), np.zeros((n, 3, 3), z), np.zeros((n, 3), z)),
        np.zeros(n, z), np.zeros(n, z), np.zeros(n, z), np.zeros(n, z), np.zeros(n, z),
        np.zeros((n, 3), z), np.zeros((n, n), z), np.zeros(n, dtype=np.int64), np.zeros(n, z), np.zeros(n, z),
        np.zeros((particles, 6), z), np.zeros((n, 6), z),
    )


# ---------------------------------------------------------------- phase 1: forces


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def accelerate_bodies(phys, fk, springs, w, tau, h, phase, limits):
    """Explicit forces and kicks (solver._accelerate for revolute joints without drives).

    Reads the frames at the current poses and ``w.spin``; updates ``w.vel``, ``w.omega``,
    ``w.inertia_w``, ``w.inv_inertia_w``, ``w.q`` (the joints with a joint spring; all of
    them with point springs or ``limits``), ``w.rate``, ``w.spin_rate`` and ``w.damping`` (half the implicit
    damping, as the joint rows take it). The springs' damping splits as in
    dynamics.springs.spring_damping_split: its diagonal joins the implicit damping.
    """
    inertia, inv_inertia, dynamic, gravity = phys.inertia, phys.inv_inertia, phys.dynamic, phys.gravity
    arrays = springs
    n = w.q.shape[0]
    kick = 1.0 if phase == KICK_FULL else 0.5
    for i in range(n + 1):
        _congruence(w.rot[i], inertia[i], w.inertia_w[i])
        _congruence(w.rot[i], inv_inertia[i], w.inv_inertia_w[i])
        w.torque[i, 0], w.torque[i, 1], w.torque[i, 2] = 0.0, 0.0, 0.0
    if limits or arrays.point_body_a.shape[0] > 0:
        for j in range(n):
            w.q[j] = _angle(w, j)
    else:
        for s in range(arrays.lever_joints.shape[0]):
            w.q[arrays.lever_joints[s]] = _angle(w, arrays.lever_joints[s])
        for s in range(arrays.torsion_joints.shape[0]):
            w.q[arrays.torsion_joints[s]] = _angle(w, arrays.torsion_joints[s])
    for j in range(n):
        w.rate[j] = _rate(w, w.omega, j)
        w.spin_rate[j] = _rate(w, w.spin, j)  # a point spring's damping coupling: rates at the state's time
    spring_torques_into(arrays, fk, w.q, w.spin_rate, w.spring, w.spring_slope, w.placements, w.spring_grad)
    for j in range(n):
        torque, damping, _, _ = joint_load(phys, w, tau, j, phase)
        w.damping[j] = 0.5 * damping
        for r in range(3):
            w.torque[j + 1, r] += torque * w.axis_c[j, r]
            w.torque[j, r] -= torque * w.axis_c[j, r]
    for i in range(n + 1):
        s, iw = w.spin[i], w.inertia_w[i]
        m0 = iw[0, 0] * s[0] + iw[0, 1] * s[1] + iw[0, 2] * s[2]
        m1 = iw[1, 0] * s[0] + iw[1, 1] * s[1] + iw[1, 2] * s[2]
        m2 = iw[2, 0] * s[0] + iw[2, 1] * s[1] + iw[2, 2] * s[2]
        g0 = w.torque[i, 0] - (s[1] * m2 - s[2] * m1)
        g1 = w.torque[i, 1] - (s[2] * m0 - s[0] * m2)
        g2 = w.torque[i, 2] - (s[0] * m1 - s[1] * m0)
        a = w.inv_inertia_w[i]
        for r in range(3):
            w.vel[i, r] += kick * h * (dynamic[i] * gravity[r])
            w.omega[i, r] += kick * h * (a[r, 0] * g0 + a[r, 1] * g1 + a[r, 2] * g2)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def joint_load(phys, w, tau, j, phase):
    """Joint ``j``'s torque on its bodies [N·m] and implicit damping [N·m·s/rad] at the rate ``w.rate[j]``.

    Smoothed Coulomb friction is linearized at the rate (forces.friction_split): returns
    ``(torque, damping, t, slope)`` with the friction's ``t = tanh(rate / scale)`` and slope.
    """
    rate, coulomb, scale = w.rate[j], phys.friction[j], phys.friction_scale
    torque, damping = tau[j] + w.spring[j], phys.damping[j]
    t = slope = 0.0 * rate
    if coulomb != 0.0:
        t = _tanh(rate / scale)
        slope = coulomb / scale * (1.0 - t * t)
        damping += slope
        torque += slope * rate - coulomb * t
    damping += w.spring_slope[j]
    if phase == KICK_FULL:
        torque -= 0.5 * damping * rate
    return torque, damping, t, slope


# ---------------------------------------------------------------- phase 3: joint rows


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def row_blocks(phys, w, h, limits, active_targets):
    """Per-substep row constants at the current (substep start) poses (constraints.joint_blocks).

    ``active_targets`` (n,) holds the displacement onto the limit of joints held on a
    limit this substep and NaN for the others (read only when ``limits``).
    """
    n = w.q.shape[0]
    for j in range(n):
        for r in range(3):
            w.lever_child[j, r] = w.lever_c[j, r]
            w.lever_parent[j, r] = w.pos[j + 1, r] + w.lever_c[j, r] - w.pos[j, r]
            w.free[j, r] = w.axis_c[j, r]
        # the armature's momentum rides on the free row (constraints.joint_blocks)
        w.sigma[j], w.offset[j], w.row_compliance[j] = h * w.damping[j] + phys.armature[j], phys.armature[j] * h * w.rate[j], 1.0
        if limits and not math.isnan(active_targets[j].real):
            w.sigma[j], w.offset[j], w.row_compliance[j] = 1.0, active_targets[j], 0.0


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _add_coupling(inv_mass, a, ra, rb, sign, t1, t2, out):
    """``out += sign [[w I - [ra] A [rb], -[ra] A], [A [rb], A]]`` (constraints.coupling_block)."""
    for c in range(3):  # t1 = [ra] A (column-wise ra x A[:, c]); t2 = A [rb]
        t1[0, c] = ra[1] * a[2, c] - ra[2] * a[1, c]
        t1[1, c] = ra[2] * a[0, c] - ra[0] * a[2, c]
        t1[2, c] = ra[0] * a[1, c] - ra[1] * a[0, c]
    for r in range(3):
        t2[r, 0] = a[r, 1] * rb[2] - a[r, 2] * rb[1]
        t2[r, 1] = a[r, 2] * rb[0] - a[r, 0] * rb[2]
        t2[r, 2] = a[r, 0] * rb[1] - a[r, 1] * rb[0]
    for c in range(3):  # [ra] A [rb] = ra x (A [rb])[:, c]
        x0 = ra[1] * t2[2, c] - ra[2] * t2[1, c]
        x1 = ra[2] * t2[0, c] - ra[0] * t2[2, c]
        x2 = ra[0] * t2[1, c] - ra[1] * t2[0, c]
        out[0, c] += sign * ((inv_mass if c == 0 else 0.0) - x0)
        out[1, c] += sign * ((inv_mass if c == 1 else 0.0) - x1)
        out[2, c] += sign * ((inv_mass if c == 2 else 0.0) - x2)
    for r in range(3):
        for c in range(3):
            out[r, 3 + c] -= sign * t1[r, c]
            out[3 + r, c] += sign * t2[r, c]
            out[3 + r, 3 + c] += sign * a[r, c]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _scale_rows(axis, sigma, out):
    """``out = (I + (sigma - 1) d d^T) out`` with ``d = [0, axis]``."""
    for c in range(6):
        along = axis[0] * out[3, c] + axis[1] * out[4, c] + axis[2] * out[5, c]
        for r in range(3):
            out[3 + r, c] += (sigma - 1.0) * axis[r] * along


# The compliant joints' path (compliance > 0; rigid joints, the default, take _factor_rigid and
# _solve_rigid): compiled once and called, not inlined into every step kernel beside the rigid
# path (cold compile of _integrate, benchmarks/bench_compile.py: 145 s of CPU with it inlined, 111 s
# without). A call passes the work area's ~60 arrays, small beside a 6x6 block factorization per joint.
_compliant_path = njit(cache=True, error_model="numpy", fastmath=FASTMATH, no_cpython_wrapper=True, no_cfunc_wrapper=True)


@_compliant_path
def _factor_blocks(phys, w, alpha):
    """Block-tridiagonal factors of the chain's joint system (projection._factor_chain).

    For compliant joints (``alpha > 0``); rigid ones take :func:`_factor_rigid`.
    """
    inv_mass = phys.inv_mass
    n = w.q.shape[0]
    aw = w.inv_inertia_w
    for j in range(n):
        d = w.diagonal[j]
        d[:, :] = 0.0
        _add_coupling(inv_mass[j + 1], aw[j + 1], w.lever_child[j], w.lever_child[j], 1.0, w.t1, w.t2, d)
        _add_coupling(inv_mass[j], aw[j], w.lever_parent[j], w.lever_parent[j], 1.0, w.t1, w.t2, d)
        _scale_rows(w.free[j], w.sigma[j], d)
        for r in range(6):
            d[r, r] += alpha
        for r in range(3):
            for c in range(3):
                d[3 + r, 3 + c] += (w.row_compliance[j] - alpha) * w.free[j, r] * w.free[j, c]
        if j + 1 < n:  # couplings through particle j + 1 (child of j, parent of j + 1)
            u, lo = w.upper[j], w.lower[j]
            u[:, :] = 0.0
            _add_coupling(inv_mass[j + 1], aw[j + 1], w.lever_child[j], w.lever_parent[j + 1], -1.0, w.t1, w.t2, u)
            for r in range(6):  # J_p M^-1 J_c^T = (J_c M^-1 J_p^T)^T
                for c in range(6):
                    lo[r, c] = u[c, r]
            _scale_rows(w.free[j], w.sigma[j], u)
            _scale_rows(w.free[j + 1], w.sigma[j + 1], lo)
    # Block Thomas: G_0 = D_0, Y_j = G_j^-1 U_j, G_j+1 = D_j+1 - L_j Y_j (G_j kept as LU factors).
    for j in range(n):
        if j > 0:
            for r in range(6):
                for c in range(6):
                    acc = 0.0
                    for k in range(6):
                        acc += w.lower[j - 1][r, k] * w.reduced[j - 1][k, c]
                    w.diagonal[j][r, c] -= acc
        _lu(w.diagonal[j], w.pivots[j], w.inv_diagonal[j])
        if j + 1 < n:
            w.reduced[j, :, :] = w.upper[j]
            _lu_solve_columns(w.diagonal[j], w.pivots[j], w.inv_diagonal[j], w.reduced[j])


@_compliant_path
def _solve_blocks(w, b, x):
    """``x`` (n, 6, m) = the solutions for the right-hand sides ``b`` (n, 6, m) with the factors of
    :func:`_factor_blocks` (projection._solve_chain)."""
    n = b.shape[0]
    for j in range(n):
        x[j, :, :] = b[j]
        if j > 0:
            _matvec6_sub(w.lower[j - 1], x[j - 1], x[j])
        _lu_solve_columns(w.diagonal[j], w.pivots[j], w.inv_diagonal[j], x[j])
    for j in range(n - 2, -1, -1):
        _matvec6_sub(w.reduced[j], x[j + 1], x[j])


# Rigid joints (alpha = 0): the joint system is A = S K + C with K = J M^-1 J^T and S, C
# identity plus rank-one terms along each joint's free direction d_j:
# A = K + E (Sigma' E^T K + R E^T), E = [d_1 .. d_n], Sigma' = diag(sigma - 1), R = diag(row
# compliance). For a fixed-base chain J is square and block bidiagonal, so K^-1 = J^-T M J^-1
# costs two sweeps of cross products, and by Woodbury
#   A^-1 b = y - K^-1 E (diag(sigma) + R H)^-1 (Sigma' E^T b + R E^T y),   y = K^-1 b,
# with H = E^T K^-1 E = (J^-1 E)^T M (J^-1 E): the joint-space inertia of the particles, whose
# columns J^-1 d_k are rigid rotations of the subtree about joint k's anchor and axis. The
# same linear system as the block elimination, in O(n^2) scalar work instead of 6x6 blocks.


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _apply_k_inverse(phys, w, v, out):
    """``out = K^-1 v`` (n, 6): particle displacements J^-1 v, their momenta, then J^-T."""
    inv_mass = phys.inv_mass
    n = w.q.shape[0]
    u = w.displacement
    u[0, :] = 0.0
    for j in range(n):  # J u = v, base to tip: the child's motion from the parent's
        rp, rc = w.lever_parent[j], w.lever_child[j]
        t0, t1, t2 = u[j, 3], u[j, 4], u[j, 5]
        a0, a1, a2 = t0 + v[j, 3], t1 + v[j, 4], t2 + v[j, 5]
        u[j + 1, 0] = u[j, 0] + (t1 * rp[2] - t2 * rp[1]) + v[j, 0] - (a1 * rc[2] - a2 * rc[1])
        u[j + 1, 1] = u[j, 1] + (t2 * rp[0] - t0 * rp[2]) + v[j, 1] - (a2 * rc[0] - a0 * rc[2])
        u[j + 1, 2] = u[j, 2] + (t0 * rp[1] - t1 * rp[0]) + v[j, 2] - (a0 * rc[1] - a1 * rc[0])
        u[j + 1, 3], u[j + 1, 4], u[j + 1, 5] = a0, a1, a2
    for i in range(n, 0, -1):  # J^T out = M u, tip to base
        m, iw = 1.0 / inv_mass[i], w.inertia_w[i]
        g0, g1, g2 = m * u[i, 0], m * u[i, 1], m * u[i, 2]
        g3 = iw[0, 0] * u[i, 3] + iw[0, 1] * u[i, 4] + iw[0, 2] * u[i, 5]
        g4 = iw[1, 0] * u[i, 3] + iw[1, 1] * u[i, 4] + iw[1, 2] * u[i, 5]
        g5 = iw[2, 0] * u[i, 3] + iw[2, 1] * u[i, 4] + iw[2, 2] * u[i, 5]
        if i < n:  # minus J_p^T of the joint this particle is the parent of
            f, rp = out[i], w.lever_parent[i]
            g0, g1, g2 = g0 + f[0], g1 + f[1], g2 + f[2]
            g3 += f[3] + rp[1] * f[2] - rp[2] * f[1]
            g4 += f[4] + rp[2] * f[0] - rp[0] * f[2]
            g5 += f[5] + rp[0] * f[1] - rp[1] * f[0]
        rc = w.lever_child[i - 1]
        out[i - 1, 0], out[i - 1, 1], out[i - 1, 2] = g0, g1, g2
        out[i - 1, 3] = g3 - (rc[1] * g2 - rc[2] * g1)
        out[i - 1, 4] = g4 - (rc[2] * g0 - rc[0] * g2)
        out[i - 1, 5] = g5 - (rc[0] * g1 - rc[1] * g0)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _apply_k_inverse_columns(phys, w, v, out, u):
    """``out = K^-1 v`` for columns ``v``, ``out`` (n, 6, m): particle displacements J^-1 v (``u``, (N, 6, m)
    scratch), their momenta, then J^-T. The columns are the inner loop (they vectorize)."""
    inv_mass = phys.inv_mass
    n, columns = v.shape[0], v.shape[2]
    u[0, :, :] = 0.0
    for j in range(n):  # J u = v, base to tip: the child's motion from the parent's
        p0, p1, p2 = w.lever_parent[j, 0], w.lever_parent[j, 1], w.lever_parent[j, 2]
        c0, c1, c2 = w.lever_child[j, 0], w.lever_child[j, 1], w.lever_child[j, 2]
        for c in range(columns):
            t0, t1, t2 = u[j, 3, c], u[j, 4, c], u[j, 5, c]
            a0, a1, a2 = t0 + v[j, 3, c], t1 + v[j, 4, c], t2 + v[j, 5, c]
            u[j + 1, 0, c] = u[j, 0, c] + (t1 * p2 - t2 * p1) + v[j, 0, c] - (a1 * c2 - a2 * c1)
            u[j + 1, 1, c] = u[j, 1, c] + (t2 * p0 - t0 * p2) + v[j, 1, c] - (a2 * c0 - a0 * c2)
            u[j + 1, 2, c] = u[j, 2, c] + (t0 * p1 - t1 * p0) + v[j, 2, c] - (a0 * c1 - a1 * c0)
            u[j + 1, 3, c], u[j + 1, 4, c], u[j + 1, 5, c] = a0, a1, a2
    for i in range(n, 0, -1):  # J^T out = M u, tip to base
        m, iw = 1.0 / inv_mass[i], w.inertia_w[i]
        i00, i01, i02, i11, i12, i22 = iw[0, 0], iw[0, 1], iw[0, 2], iw[1, 1], iw[1, 2], iw[2, 2]
        c0, c1, c2 = w.lever_child[i - 1, 0], w.lever_child[i - 1, 1], w.lever_child[i - 1, 2]
        p0, p1, p2 = (w.lever_parent[i, 0], w.lever_parent[i, 1], w.lever_parent[i, 2]) if i < n else (0.0, 0.0, 0.0)
        for c in range(columns):
            g0, g1, g2 = m * u[i, 0, c], m * u[i, 1, c], m * u[i, 2, c]
            g3 = i00 * u[i, 3, c] + i01 * u[i, 4, c] + i02 * u[i, 5, c]
            g4 = i01 * u[i, 3, c] + i11 * u[i, 4, c] + i12 * u[i, 5, c]
            g5 = i02 * u[i, 3, c] + i12 * u[i, 4, c] + i22 * u[i, 5, c]
            if i < n:  # minus J_p^T of the joint this particle is the parent of
                f0, f1, f2 = out[i, 0, c], out[i, 1, c], out[i, 2, c]
                g0, g1, g2 = g0 + f0, g1 + f1, g2 + f2
                g3 += out[i, 3, c] + p1 * f2 - p2 * f1
                g4 += out[i, 4, c] + p2 * f0 - p0 * f2
                g5 += out[i, 5, c] + p0 * f1 - p1 * f0
            out[i - 1, 0, c], out[i - 1, 1, c], out[i - 1, 2, c] = g0, g1, g2
            out[i - 1, 3, c] = g3 - (c1 * g2 - c2 * g1)
            out[i - 1, 4, c] = g4 - (c2 * g0 - c0 * g2)
            out[i - 1, 5, c] = g5 - (c0 * g1 - c1 * g0)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _factor_rigid(phys, w):
    """The joint-space inertia H of the particles and the LU of diag(sigma) + R H."""
    n = w.q.shape[0]
    # w.inertia_w is the world inertia at these poses (from accelerate_bodies). Moments about joint 0's anchor (not the world origin) keep the sums small.
    b0, b1, b2 = w.pos[1, 0] + w.lever_child[0, 0], w.pos[1, 1] + w.lever_child[0, 1], w.pos[1, 2] + w.lever_child[0, 2]
    for k in range(n):
        w.anchor0[k, 0] = w.pos[k + 1, 0] + w.lever_child[k, 0] - b0
        w.anchor0[k, 1] = w.pos[k + 1, 1] + w.lever_child[k, 1] - b1
        w.anchor0[k, 2] = w.pos[k + 1, 2] + w.lever_child[k, 2] - b2
    # Composite of particles k+1..n: mass, first moment h and second moment Q about the base
    # point; column k of H is the momentum of that composite turning about joint k.
    mass, h0, h1, h2 = 0.0, 0.0, 0.0, 0.0
    q = w.t2
    q[:, :] = 0.0
    for k in range(n - 1, -1, -1):
        i = k + 1
        m = 1.0 / phys.inv_mass[i]
        y0, y1, y2 = w.pos[i, 0] - b0, w.pos[i, 1] - b1, w.pos[i, 2] - b2
        yy = y0 * y0 + y1 * y1 + y2 * y2
        mass += m
        h0, h1, h2 = h0 + m * y0, h1 + m * y1, h2 + m * y2
        iw = w.inertia_w[i]
        q[0, 0] += m * (yy - y0 * y0) + iw[0, 0]
        q[1, 1] += m * (yy - y1 * y1) + iw[1, 1]
        q[2, 2] += m * (yy - y2 * y2) + iw[2, 2]
        q[0, 1] += -m * y0 * y1 + iw[0, 1]
        q[0, 2] += -m * y0 * y2 + iw[0, 2]
        q[1, 2] += -m * y1 * y2 + iw[1, 2]
        q[1, 0], q[2, 0], q[2, 1] = q[0, 1], q[0, 2], q[1, 2]
        a, p = w.free[k], w.anchor0[k]
        ap0, ap1, ap2 = a[1] * p[2] - a[2] * p[1], a[2] * p[0] - a[0] * p[2], a[0] * p[1] - a[1] * p[0]
        l0 = a[1] * h2 - a[2] * h1 - mass * ap0  # linear momentum a x (h - M p)
        l1 = a[2] * h0 - a[0] * h2 - mass * ap1
        l2 = a[0] * h1 - a[1] * h0 - mass * ap2
        n0 = q[0, 0] * a[0] + q[0, 1] * a[1] + q[0, 2] * a[2] - (h1 * ap2 - h2 * ap1)  # about the base point
        n1 = q[1, 0] * a[0] + q[1, 1] * a[1] + q[1, 2] * a[2] - (h2 * ap0 - h0 * ap2)
        n2 = q[2, 0] * a[0] + q[2, 1] * a[1] + q[2, 2] * a[2] - (h0 * ap1 - h1 * ap0)
        for j in range(k + 1):  # H[j, k] = a_j . (N - p_j x L), angular momentum about anchor j
            b, pj = w.free[j], w.anchor0[j]
            value = (
                b[0] * (n0 - (pj[1] * l2 - pj[2] * l1))
                + b[1] * (n1 - (pj[2] * l0 - pj[0] * l2))
                + b[2] * (n2 - (pj[0] * l1 - pj[1] * l0))
            )
            w.capacity[j, k] = w.row_compliance[j] * value
            w.capacity[k, j] = w.row_compliance[k] * value
    for j in range(n):
        w.capacity[j, j] += w.sigma[j]
    _lu(w.capacity, w.capacity_pivots, w.capacity_inv_diagonal)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _solve_rigid(phys, w):
    """``w.solution`` = the solution for ``w.rhs`` with the factors of :func:`_factor_rigid` (Woodbury)."""
    n = w.q.shape[0]
    _apply_k_inverse(phys, w, w.rhs, w.solution)
    z = w.reduced_rhs
    for j in range(n):
        d = w.free[j]
        along_b = d[0] * w.rhs[j, 3] + d[1] * w.rhs[j, 4] + d[2] * w.rhs[j, 5]
        along_y = d[0] * w.solution[j, 3] + d[1] * w.solution[j, 4] + d[2] * w.solution[j, 5]
        z[j] = (w.sigma[j] - 1.0) * along_b + w.row_compliance[j] * along_y
    _lu_solve(w.capacity, w.capacity_pivots, w.capacity_inv_diagonal, z)
    for j in range(n):
        for r in range(3):
            w.rhs[j, r] = 0.0
            w.rhs[j, 3 + r] = w.free[j, r] * z[j]
    _apply_k_inverse(phys, w, w.rhs, w.correction)
    for j in range(n):
        for r in range(6):
            w.solution[j, r] -= w.correction[j, r]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _solve_rigid_columns(phys, w, b, x, u, correction, z):
    """``x`` (n, 6, m) = the solutions for ``b`` (n, 6, m, overwritten) with the factors of :func:`_factor_rigid`
    (Woodbury); scratch ``u`` (N, 6, m), ``correction`` (n, 6, m), ``z`` (n, m)."""
    n, columns = b.shape[0], b.shape[2]
    _apply_k_inverse_columns(phys, w, b, x, u)
    for j in range(n):
        d0, d1, d2 = w.free[j, 0], w.free[j, 1], w.free[j, 2]
        scale, compliance = w.sigma[j] - 1.0, w.row_compliance[j]
        for c in range(columns):
            along_b = d0 * b[j, 3, c] + d1 * b[j, 4, c] + d2 * b[j, 5, c]
            along_y = d0 * x[j, 3, c] + d1 * x[j, 4, c] + d2 * x[j, 5, c]
            z[j, c] = scale * along_b + compliance * along_y
    _lu_solve_columns(w.capacity, w.capacity_pivots, w.capacity_inv_diagonal, z)
    for j in range(n):
        for r in range(3):
            for c in range(columns):
                b[j, r, c] = 0.0
                b[j, 3 + r, c] = w.free[j, r] * z[j, c]
    _apply_k_inverse_columns(phys, w, b, correction, u)
    for j in range(n):
        for r in range(6):
            for c in range(columns):
                x[j, r, c] -= correction[j, r, c]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def factor_system(phys, w, alpha):
    """Factors of the joint system at the current poses and row constants."""
    if alpha == 0.0:
        _factor_rigid(phys, w)
    else:
        _factor_blocks(phys, w, alpha)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def solve_system(phys, w, alpha):
    """``w.solution`` = the joint system's solution for ``w.rhs`` (``w.rhs`` is overwritten).

    One right-hand side: the rigid path, the rollout's hot path, has its own single-vector
    solve (:func:`solve_system_columns` with one column made a 10-substep step about 1.6x slower).
    """
    if alpha == 0.0:
        _solve_rigid(phys, w)
    else:
        n = w.q.shape[0]
        _solve_blocks(w, w.rhs.reshape((n, 6, 1)), w.solution.reshape((n, 6, 1)))


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def solve_system_columns(phys, w, alpha, b, x, scratch):
    """``x`` (n, 6, m) = the joint system's solutions for the right-hand sides ``b`` (n, 6, m, overwritten).

    With the factors in ``w`` (:func:`factor_system`); ``scratch``: arrays of shapes (N, 6, m),
    (n, 6, m) and (n, m) (the rigid path's displacements, correction and reduced right-hand side).
    """
    if alpha == 0.0:
        _solve_rigid_columns(phys, w, b, x, scratch[0], scratch[1], scratch[2])
    else:
        _solve_blocks(w, b, x)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def apply_impulses(phys, w, step_sign, linear, angular):
    """Move both particles of every joint by the response to impulses ``step_sign * w.solution``."""
    inv_mass = phys.inv_mass
    n = w.q.shape[0]
    for j in range(n):
        s = w.solution[j]
        f0, f1, f2 = step_sign * s[0], step_sign * s[1], step_sign * s[2]
        for side in range(2):
            k, sign = (j + 1, 1.0) if side == 0 else (j, -1.0)
            r = w.lever_child[j] if side == 0 else w.lever_parent[j]
            t0 = r[1] * f2 - r[2] * f1 + step_sign * s[3]
            t1 = r[2] * f0 - r[0] * f2 + step_sign * s[4]
            t2 = r[0] * f1 - r[1] * f0 + step_sign * s[5]
            a = w.inv_inertia_w[k]
            linear[k, 0] += sign * inv_mass[k] * f0
            linear[k, 1] += sign * inv_mass[k] * f1
            linear[k, 2] += sign * inv_mass[k] * f2
            for row in range(3):
                angular[k, row] += sign * (a[row, 0] * t0 + a[row, 1] * t1 + a[row, 2] * t2)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def turn_poses(w):
    """Orientations ``rot = exp(phi) rot0`` of every particle (the substep's current poses)."""
    for i in range(w.rot.shape[0]):
        so3_exp_into(w.phi[i], w.t1)
        _mul3(w.t1, w.rot0[i], w.rot[i])


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def row_rhs(w, alpha):
    """``w.rhs`` of the projection at the current frames and multipliers (constraints.row_rhs).

    Rigid errors [anchor, a_p x a_c], the free row's scaled displacement since the substep
    start, its offset and the XPBD compliance terms.
    """
    for j in range(w.q.shape[0]):
        a, b, d = w.axis_p[j], w.axis_c[j], w.free[j]
        h0, h1, h2 = a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]
        turn = d[0] * (w.phi[j + 1, 0] - w.phi[j, 0]) + d[1] * (w.phi[j + 1, 1] - w.phi[j, 1]) + d[2] * (w.phi[j + 1, 2] - w.phi[j, 2])
        along_error = d[0] * h0 + d[1] * h1 + d[2] * h2
        along_lam = d[0] * w.lam[j, 3] + d[1] * w.lam[j, 4] + d[2] * w.lam[j, 5]
        free_part = w.sigma[j] * turn - along_error - w.offset[j] + (w.row_compliance[j] - alpha) * along_lam
        for r in range(3):
            w.rhs[j, r] = w.anchor[j, r] + alpha * w.lam[j, r]
        w.rhs[j, 3] = h0 + d[0] * free_part + alpha * w.lam[j, 3]
        w.rhs[j, 4] = h1 + d[1] * free_part + alpha * w.lam[j, 4]
        w.rhs[j, 5] = h2 + d[2] * free_part + alpha * w.lam[j, 5]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _project(phys, w, alpha, iterations):
    """Quasi-Newton projection of all joint rows with one factorization (projection.project_direct)."""
    n = w.q.shape[0]
    w.lam[:, :] = 0.0
    for _ in range(iterations):
        turn_poses(w)
        frames_into(phys.local_parent, phys.local_child, w.pos, w.rot, w)
        row_rhs(w, alpha)
        solve_system(phys, w, alpha)
        for j in range(n):
            for r in range(6):
                w.lam[j, r] -= w.solution[j, r]
        apply_impulses(phys, w, -1.0, w.pos, w.phi)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def limit_targets(phys, w, h, out):
    """Displacement onto the limit for joints predicted beyond it, NaN elsewhere (solver._active_limits)."""
    lower, upper = phys.lower, phys.upper
    for j in range(w.q.shape[0]):
        d = w.axis_c[j]
        turn = h * (
            d[0] * (w.omega[j + 1, 0] - w.omega[j, 0]) + d[1] * (w.omega[j + 1, 1] - w.omega[j, 1]) + d[2] * (w.omega[j + 1, 2] - w.omega[j, 2])
        )
        predicted = (w.q[j] + turn).real  # the active set is decided on values, not tangents
        clamped = min(max(predicted, lower[j]), upper[j])
        out[j] = clamped - w.q[j] if predicted != clamped else np.nan


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _substep(phys, fk, springs, w, tau, h, phase, iterations, alpha, limits, targets):
    """One substep from ``w.pos/rot/vel/omega`` (solver.substep); velocities become chords."""
    frames_into(phys.local_parent, phys.local_child, w.pos, w.rot, w)
    accelerate_bodies(phys, fk, springs, w, tau, h, phase, limits)
    if limits:
        limit_targets(phys, w, h, targets)
    row_blocks(phys, w, h, limits, targets)
    factor_system(phys, w, alpha)
    predict_positions(w, h)
    _project(phys, w, alpha, iterations)
    close_substep(w, h)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def predict_positions(w, h):
    """Keep the substep's start poses and move every particle by ``h`` x its velocity (``phi``: the turn)."""
    for i in range(w.pos.shape[0]):
        for r in range(3):
            w.pos0[i, r] = w.pos[i, r]
            w.pos[i, r] += h * w.vel[i, r]
            w.phi[i, r] = h * w.omega[i, r]
            for c in range(3):
                w.rot0[i, r, c] = w.rot[i, r, c]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def close_substep(w, h):
    """Final orientations of the substep; the velocities become the chords."""
    turn_poses(w)
    for i in range(w.pos.shape[0]):
        for r in range(3):
            w.vel[i, r] = (w.pos[i, r] - w.pos0[i, r]) / h
            w.omega[i, r] = w.phi[i, r] / h


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def set_spin(w, chords):
    """``w.spin``: angular velocity at the current time from the start velocity and the chords (solver._spin)."""
    for i in range(w.spin.shape[0]):
        for r in range(3):
            if chords == 0:
                w.spin[i, r] = w.start[i, r]
            elif chords == 1:
                w.spin[i, r] = 2.0 * w.last[i, r] - w.start[i, r]
            else:
                w.spin[i, r] = 1.5 * w.last[i, r] - 0.5 * w.previous[i, r]


# Compiled once and called, not inlined into _integrate beside the inlined _substep: one function
# holding both copies of the phase helpers took LLVM ~225 s of CPU on a fresh install; apart,
# ~110 + 25 s. The call costs ~1.5 us per step (under 2 %), once per step; _substep, called
# every substep, stays inlined.
@njit(cache=True, error_model="numpy", fastmath=FASTMATH, no_cpython_wrapper=True, no_cfunc_wrapper=True)
def _finish(phys, fk, springs, w, tau, h, targets):
    """Closing half kick and velocity projection (solver.finish_velocities)."""
    frames_into(phys.local_parent, phys.local_child, w.pos, w.rot, w)
    accelerate_bodies(phys, fk, springs, w, tau, h, KICK_FINISH, False)
    row_blocks(phys, w, h, False, targets)
    factor_system(phys, w, 0.0)
    velocity_rhs(w, h)
    solve_system(phys, w, 0.0)
    apply_impulses(phys, w, -1.0, w.vel, w.omega)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def velocity_rhs(w, h):
    """``w.rhs``: row velocities J_c (v_c, w_c) + J_p (v_p, w_p); the free row keeps sigma x its rate
    less the positional offset over the substep ``h`` [s] (the armature's momentum)."""
    for j in range(w.q.shape[0]):
        rc, rp, d = w.lever_child[j], w.lever_parent[j], w.free[j]
        for side in range(2):
            k, sign, r = (j + 1, 1.0, rc) if side == 0 else (j, -1.0, rp)
            v, om = w.vel[k], w.omega[k]
            if side == 0:
                for row in range(6):
                    w.rhs[j, row] = 0.0
            w.rhs[j, 0] += sign * (v[0] + om[1] * r[2] - om[2] * r[1])
            w.rhs[j, 1] += sign * (v[1] + om[2] * r[0] - om[0] * r[2])
            w.rhs[j, 2] += sign * (v[2] + om[0] * r[1] - om[1] * r[0])
            for row in range(3):
                w.rhs[j, 3 + row] += sign * om[row]
        rate = d[0] * w.rhs[j, 3] + d[1] * w.rhs[j, 4] + d[2] * w.rhs[j, 5]
        for row in range(3):
            w.rhs[j, 3 + row] += d[row] * ((w.sigma[j] - 1.0) * rate - w.offset[j] / h)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _integrate(phys, fk, springs, w, tau, dt, substeps, iterations, compliance, limits, targets):
    """One control period in ``substeps`` substeps plus the closing half kick (solver.integrate)."""
    h = dt / substeps
    alpha = compliance / (h * h)
    w.start[:, :] = w.omega
    for index in range(substeps):
        set_spin(w, min(index, 2))
        _substep(phys, fk, springs, w, tau, h, KICK_START if index == 0 else KICK_FULL, iterations, alpha, limits, targets)
        w.previous[:, :] = w.last
        w.last[:, :] = w.omega
    set_spin(w, min(substeps, 2))
    _finish(phys, fk, springs, w, tau, h, targets)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def joint_step_into(fk, phys, springs, settings, w, targets, q, qd, tau, q_out, qd_out):
    """One step from a joint state, particles rebuilt from ``(q, qd)`` (PBDSimulator.joint_step).

    Any dtype (float64 in use; complex128 still compiles).

    Args:
        fk, phys, springs: The arrays of a :class:`FastPBD`.
        settings: ``(dt [s], substeps, iterations, compliance, limits)``.
        w: Work area (:func:`work_area`, the dtype of ``q``); ``targets``: (n,) scratch.
        q, qd, tau: Joint positions [rad], velocities [rad/s], torques [N·m], each (n,).
        q_out, qd_out: (n,) receive the joint state after the step; the frames of the
            final poses are left in ``w``.
    """
    dt, substeps, iterations, compliance, limits = settings
    state_from_joints(fk, phys.com, q, qd, w.pos, w.rot, w.vel, w.omega, w.z_ang, w.origin, w.placements)
    _integrate(phys, fk, springs, w, tau, dt, substeps, iterations, compliance, limits, targets)
    frames_into(phys.local_parent, phys.local_child, w.pos, w.rot, w)
    write_joint_state(w, q, q_out, qd_out)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def write_joint_state(w, q, q_out, qd_out):
    """Joint positions [rad] (the turn from ``q`` unwrapped) and rates [rad/s] from the frames in ``w``."""
    for j in range(q.shape[0]):
        turn = _angle(w, j) - q[j]
        q_out[j] = q[j] + turn - 2.0 * math.pi * np.rint(turn.real / (2.0 * math.pi))
        qd_out[j] = _rate(w, w.omega, j)


@njit(cache=True, error_model="numpy", fastmath=FASTMATH, inline="always")
def _rollout_one(fk, phys, springs, settings, q0, qd0, tau, out_q, out_qd, residual):
    """One joint-space rollout from ``q0``, ``qd0`` (n,) under ``tau`` (T, n): fills ``out_q``, ``out_qd``
    (T, n) and the worst constraint residual of every joint over it, ``residual`` (n,) [m or rad]."""
    steps, n = tau.shape
    w = work_area(n, q0)
    targets = np.full(n, np.nan)
    q, qd = q0.copy(), qd0.copy()
    for t in range(steps):
        joint_step_into(fk, phys, springs, settings, w, targets, q, qd, tau[t], out_q[t], out_qd[t])
        for j in range(n):
            a, c, e = w.axis_p[j], w.axis_c[j], w.anchor[j]
            h0, h1, h2 = a[1] * c[2] - a[2] * c[1], a[2] * c[0] - a[0] * c[2], a[0] * c[1] - a[1] * c[0]
            worst = max(math.sqrt(e[0] * e[0] + e[1] * e[1] + e[2] * e[2]), math.sqrt(h0 * h0 + h1 * h1 + h2 * h2))
            if residual[j] == residual[j] and not worst <= residual[j]:  # a NaN sticks
                residual[j] = worst
        q[:] = out_q[t]
        qd[:] = out_qd[t]


@njit(cache=True, error_model="numpy", fastmath=FASTMATH)
def _rollout(fk, phys, springs, settings, q0, qd0, tau, out_q, out_qd, residual):
    """Joint-space rollouts one after another: every step rebuilds the particles from (q, qd) (PBDSimulator.joint_step).

    Args:
        q0, qd0: (B, n); tau: (B, T, n). Fills ``out_q``, ``out_qd`` (B, T, n) and the worst
        constraint residual of every joint over the rollout, ``residual`` (B, n) [m or rad].
    """
    for b in range(tau.shape[0]):
        _rollout_one(fk, phys, springs, settings, q0[b], qd0[b], tau[b], out_q[b], out_qd[b], residual[b])


# A separate kernel, compiled at its first call only: numba's parallel lowering of the batch loop
# made the rollout kernel's cold compile 47 s of CPU against 13 s for the serial loop
# (benchmarks/bench_compile.py), and one thread per process is the default (diffsim_ros/threads.py).
@njit(cache=True, error_model="numpy", fastmath=FASTMATH, parallel=True)
def _rollout_threads(fk, phys, springs, settings, q0, qd0, tau, out_q, out_qd, residual):
    """:func:`_rollout` with one rollout per thread of numba's pool (``prange`` over the batch)."""
    for b in prange(tau.shape[0]):
        _rollout_one(fk, phys, springs, settings, q0[b], qd0[b], tau[b], out_q[b], out_qd[b], residual[b])


# ---------------------------------------------------------------- snapshot


@contextmanager
def keep_torch_threads():
    """Restore torch's thread count after a parallel kernel: numba's OpenMP threading layer shares
    the OpenMP runtime with torch and sets its thread count when it starts."""
    torch_threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)


def kernel_options(dt, settings):
    """The kernels' settings tuple ``(dt [s], substeps, iterations, compliance, limits)`` from a SolverSettings."""
    return (float(dt), int(settings.substeps), int(settings.iterations), float(settings.compliance), bool(settings.limits))


def _array(t):
    return np.ascontiguousarray(t.detach().to(dtype=torch.float64, device="cpu").numpy())


def physics_tensors(model):
    """The torch tensors a :class:`FastPBD` snapshot's ``phys`` holds, in ``_Physics`` order
    (but the friction velocity scale), differentiable in the model's parameters: inverse
    masses (N,), inertias and their inverses (N, 3, 3), dynamic flags (N,), COMs (N, 3),
    joint frame columns (n, 3, 3) of both sides, limits, damping, friction and armature (n,),
    gravity (3,)."""
    system = build_system(model)
    bodies, joints = system.bodies, system.joints
    return (
        bodies.inv_mass, bodies.inertia, bodies.inv_inertia, bodies.dynamic, bodies.com,
        joints.local_parent, joints.local_child, joints.lower, joints.upper, joints.damping,
        joints.friction, joints.armature, system.gravity,
    )


@dataclass(frozen=True)
class FastPBD:
    """Compiled forward PBD rollouts of a RobotModel snapshot (float64 numpy, no gradient).

    Build with :meth:`from_model`; rebuild when the model's parameters change.
    """

    fk: tuple
    """Forward-kinematics structure (parents, origin rotations and translations, axes, types)."""
    phys: tuple
    """Particles and joints (a ``_Physics`` named tuple): inverse masses, inertias, inverse
    inertias, dynamic flags, COMs, joint frame columns of both sides, limits, damping,
    friction, armature, gravity, friction velocity scale."""
    springs: tuple
    """Spring elements (dynamics.fast.SpringArrays)."""

    @classmethod
    def from_model(cls, model):
        """Snapshot ``model`` (see :func:`fast_rollout_supported` for what is supported)."""
        dynamics = FastDynamics.from_model(model)
        phys = _Physics(*(_array(t) for t in physics_tensors(model)), float(DEFAULT_FRICTION_VELOCITY_SCALE))
        fk = (dynamics.parents, dynamics.origin_rot, dynamics.origin_xyz, dynamics.axis, dynamics.is_revolute)
        return cls(fk=fk, phys=phys, springs=dynamics.springs)

    @property
    def nq(self):
        return self.fk[0].shape[0]

    def rollout(self, q0, qd0, tau_seq, dt, settings):
        """Joint-space rollouts of a batch, every step rebuilt from joint states.

        Args:
            q0: Initial joint positions [rad], shape (B, n).
            qd0: Initial joint velocities [rad/s], shape (B, n).
            tau_seq: Joint torques [N·m], shape (B, T, n).
            dt: Control period [s].
            settings: SolverSettings (substeps, iterations, compliance, limits).

        Returns:
            ``(q, qd, residual)``: joint positions and velocities after every step, each
            (B, T, n), and the largest constraint residual of every joint over the
            rollout [m or rad], (B, n) (NaN when the simulation diverged).
        """
        q0, qd0, tau_seq = (np.ascontiguousarray(x, dtype=np.float64) for x in (q0, qd0, tau_seq))
        batch, steps, n = tau_seq.shape
        if n != self.nq or q0.shape != (batch, n) or qd0.shape != (batch, n):
            raise ValueError(f"expected q0, qd0 (B, {self.nq}) and tau_seq (B, T, {self.nq}), got {q0.shape}, {qd0.shape}, {tau_seq.shape}")
        q, qd = np.empty_like(tau_seq), np.empty_like(tau_seq)
        residual = np.zeros((batch, n))
        options = kernel_options(dt, settings)
        kernel = _rollout_threads if batch > 1 and _numba_threads() > 1 else _rollout
        with keep_torch_threads():
            kernel(self.fk, self.phys, self.springs, options, q0, qd0, tau_seq, q, qd, residual)
        return q, qd, residual
