"""The friction-cone contact step compiled (numba), with exact Jacobians, for free objects.

Covers the scenes of :class:`~diffsim_ros.sim.contact.world.ContactWorld` with ``solver="cone"``,
no robot, and free boxes, spheres and capsules whose contacts are static planes or other boxes
(a box has 8 corner slots on a plane and 8 slots with another box, a sphere 1, a capsule 2).
The step is the torch one (:func:`~diffsim_ros.sim.contact.step.step`), operation for
operation (detection with the speculative margin and the broad phase, box-box slots by
:mod:`~diffsim_ros.sim.contact.fast_boxes`, contact frames, Delassus matrix, Baumgarte /
speculative / restitution bias, the regularized cone problem, semi-implicit integration, the
position correction of contacts bouncing within the step (the twist before the impact time and
the normal rows), and the world's impact substeps);
the cone problem is solved as :mod:`~diffsim_ros.sim.contact.cone` solves it (mode-wise Newton
with mode repairs, then the staggered projections of Algorithm 1 with the Newton polish), whose
converged solution is unique (the regularized problem), so both agree to round-off. Where no
solution passes the KKT check, both keep Algorithm 1's approximate impulses: the next state is
still valid (measured on 102 such problems saved from issue 19's collision fits: contact
velocities within 1e-8 m/s of torch's where neither converged, 7e-8 m/s on the 12 where torch's
search converged and this one did not), but :attr:`FastContactStep.status` is :data:`APPROXIMATE` and the Jacobians must come
from the torch step (the reference). The search for the solution is not the same to the operation: the
Newton steps solve their KKT systems by LU here and by an equilibrated pseudo-inverse with one
refinement in torch. On ill-conditioned mixed stick/slide problems (condition ~1e7, box
corners resting flat beside sliding or impacting contacts) torch's converged on 10 of 67
problems saved from issue 19's collision fits where this one did not; on most such problems
neither converges.

Jacobians of the next state in the state, the applied wrenches and the parameters (object
mass, friction, restitution and pair coefficients): forward mode through the whole step, with
the contact impulses differentiated implicitly at the converged solution,
``dx = -K⁻¹ [(dA x + db) on the velocity rows; -mu x_n² dmu on the sliding cone rows]``
(``K`` the KKT matrix of the modes: separated, sticking, sliding), i.e. the torch
``_ConeImpulse`` rule, and the bounce correction's pseudo-inverse by its constant-rank
derivative (torch's ``pinv`` rule), so the two agree in float64 to round-off. A step taken as
substeps has the substeps' Jacobians chained.

Usage::

    fast = FastContactStep(world)                  # ContactError if the world is not covered
    state = fast.step_state(state, warm=fast.modes)  # WorldState in, WorldState out
    nxt, d_state, d_wrench, d_params = fast.jacobians(position, orientation, linear, angular, wrench)

Cold compilation (``cache=True``: once per installation) takes about a minute of CPU: the
kernels are scalar loops, no numpy array expressions.
"""

import math

import numpy as np
import torch

from diffsim_ros._compiled import njit
from diffsim_ros.dynamics.derivatives import lu_factor, lu_solve_columns
from diffsim_ros.dynamics.spatial import quat_normalize, quat_to_matrix
from diffsim_ros.sim.contact.cone import (
    ADMM_ITERATIONS,
    ADMM_RELAXATION,
    LINE_SEARCH_STEPS,
    NEWTON_ITERATIONS,
    NEWTON_STEP_TOL,
    OUTER_ITERATIONS,
    REPAIR_ROUNDS,
    SEPARATED,
    SLIDING,
    STAGGERED_TOL,
    STICKING,
    ConeSolution,
)
from diffsim_ros.sim.contact.errors import ContactError
from diffsim_ros.sim.contact.fast_boxes import BOX_BOX_SLOTS, box_box_slots, boxes_separated
from diffsim_ros.sim.contact.shapes import Box, Capsule, Plane, Sphere, bounding_radius
from diffsim_ros.sim.contact.state import StepInfo, WorldState

__all__ = ["OK", "APPROXIMATE", "FastContactStep", "fast_support", "jacobian_kernel", "solve_cone_compiled",
           "step_kernel", "warm_info"]

# Status of a compiled step. APPROXIMATE: some contact problem had no solution passing the KKT
# check; the next state is still the torch step's (Algorithm 1's approximate impulses), but its
# Jacobians (implicit differentiation at a solution) are not valid.
OK, APPROXIMATE = 0, 1
PLANE_PAIR, BOX_PAIR = 0, 1  # kinds of the compiled pairs: an object on a static plane, two boxes
_EPS = np.finfo(np.float64).eps
_TINY = np.finfo(np.float64).tiny
_SMALL_ANGLE_SQUARED = 1e-8  # as diffsim_ros.dynamics.spatial.quat_exp


# ---------------------------------------------------------------- small kernels
# Explicit loops over small fixed sizes throughout: each numpy array expression in a kernel costs
# about 0.3 s of cold compilation (CI compiles from a fresh clone), a scalar loop about 0.01 s.


@njit(cache=True)
def _cross(a, b):
    """a × b for a, b (3,), (3,)."""
    out = np.empty(3)
    out[0] = a[1] * b[2] - a[2] * b[1]
    out[1] = a[2] * b[0] - a[0] * b[2]
    out[2] = a[0] * b[1] - a[1] * b[0]
    return out


@njit(cache=True)
def _dot(a, b):
    """a · b for 1-D arrays (loops: BLAS calls cost more than these tiny products)."""
    out = 0.0
    for i in range(a.shape[0]):
        out += a[i] * b[i]
    return out


@njit(cache=True)
def _mv(a, v):
    """a (n, c) @ v (c,)."""
    out = np.zeros(a.shape[0])
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i] += a[i, j] * v[j]
    return out


@njit(cache=True)
def _affine(a, v, c):
    """a (n, m) @ v (m,) + c (n,)."""
    out = _mv(a, v)
    for i in range(out.shape[0]):
        out[i] += c[i]
    return out


@njit(cache=True)
def _mm(a, b):
    """a (n, c) @ b (c, p)."""
    out = np.zeros((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            f = a[i, j]
            if f != 0.0:
                for r in range(b.shape[1]):
                    out[i, r] += f * b[j, r]
    return out


@njit(cache=True)
def _max_abs(v):
    """max |v| of a 1-D array (NaN if any is NaN, 0 if empty)."""
    out = 0.0
    for i in range(v.shape[0]):
        value = abs(v[i])
        if value > out or value != value:
            out = value
            if value != value:
                break
    return out


@njit(cache=True)
def _finite(v):
    """Every entry of the 1-D array v is finite."""
    for i in range(v.shape[0]):
        if not math.isfinite(v[i]):
            return False
    return True


@njit(cache=True)
def _trace(a):
    """Sum of the diagonal of a (n, n)."""
    out = 0.0
    for i in range(a.shape[0]):
        out += a[i, i]
    return out


@njit(cache=True)
def _add_diagonal(a, value):
    """a += value · I in place, a (n, n)."""
    for i in range(a.shape[0]):
        a[i, i] += value


@njit(cache=True)
def _scaled_grams(a, scale, b, inverse, direct):
    """``a diag(scale)⁻¹ bᵀ`` into inverse and ``a diag(scale) bᵀ`` into direct, (3, 3) each;
    a, b (3, 3), scale (3,)."""
    for r in range(3):
        for c in range(3):
            acc_inverse, acc_direct = 0.0, 0.0
            for i in range(3):
                acc_inverse += (a[r, i] / scale[i]) * b[c, i]
                acc_direct += (a[r, i] * scale[i]) * b[c, i]
            inverse[r, c], direct[r, c] = acc_inverse, acc_direct


@njit(cache=True)
def _rotation_into(q, out):
    """Rotation matrix of a unit quaternion q (4,) (w, x, y, z) into out (3, 3)."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    out[0, 0], out[0, 1], out[0, 2] = 1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)
    out[1, 0], out[1, 1], out[1, 2] = 2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)
    out[2, 0], out[2, 1], out[2, 2] = 2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)


@njit(cache=True)
def _rotation_tangent_into(q, dq, out):
    """Derivative of :func:`_rotation_into` at q (4,) along dq (4,) into out (3, 3)."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    dw, dx, dy, dz = dq[0], dq[1], dq[2], dq[3]
    out[0, 0] = 2.0 * (-2 * (y * dy + z * dz))
    out[0, 1] = 2.0 * (x * dy + dx * y - w * dz - dw * z)
    out[0, 2] = 2.0 * (x * dz + dx * z + w * dy + dw * y)
    out[1, 0] = 2.0 * (x * dy + dx * y + w * dz + dw * z)
    out[1, 1] = 2.0 * (-2 * (x * dx + z * dz))
    out[1, 2] = 2.0 * (y * dz + dy * z - w * dx - dw * x)
    out[2, 0] = 2.0 * (x * dz + dx * z - w * dy - dw * y)
    out[2, 1] = 2.0 * (y * dz + dy * z + w * dx + dw * x)
    out[2, 2] = 2.0 * (-2 * (x * dx + y * dy))


@njit(cache=True)
def _quat_multiply(a, b):
    """Hamilton product a * b of quaternions (4,) (w, x, y, z)."""
    out = np.empty(4)
    out[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3]
    out[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2]
    out[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1]
    out[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]
    return out


@njit(cache=True)
def _quat_exp(rv, drv):
    """Quaternion of the rotation vector ``rv`` [rad] and its derivative along ``drv``, (4,) each."""
    square = _dot(rv, rv)
    d_square = 2.0 * _dot(rv, drv)
    if square < _SMALL_ANGLE_SQUARED:
        c, s = 1.0 - square / 8.0, 0.5 - square / 48.0
        dc, ds = -d_square / 8.0, -d_square / 48.0
    else:
        a = math.sqrt(square)
        da = d_square / (2.0 * a)
        c, s = math.cos(0.5 * a), math.sin(0.5 * a) / a
        dc = -0.5 * math.sin(0.5 * a) * da
        ds = (0.5 * math.cos(0.5 * a) * a - math.sin(0.5 * a)) / (a * a) * da
    q, dq = np.empty(4), np.empty(4)
    q[0], dq[0] = c, dc
    for i in range(3):
        q[i + 1] = s * rv[i]
        dq[i + 1] = ds * rv[i] + s * drv[i]
    return q, dq


@njit(cache=True)
def _normalize(q, dq):
    """``q / |q|`` and its derivative along ``dq``; q, dq (n,)."""
    norm = math.sqrt(_dot(q, q))
    unit, d_unit = np.empty(q.shape[0]), np.empty(q.shape[0])
    for i in range(q.shape[0]):
        unit[i] = q[i] / norm
    along = _dot(unit, dq)
    for i in range(q.shape[0]):
        d_unit[i] = (dq[i] - unit[i] * along) / norm
    return unit, d_unit


@njit(cache=True)
def _solve(a, b):
    """``a⁻¹ b`` for a square ``a`` (n, n) and ``b`` (n, c); (ok, solution (n, c))."""
    lu = a.copy()
    pivots = np.zeros(a.shape[0], dtype=np.int64)
    rhs = b.copy()
    if not lu_factor(lu, pivots):
        return False, rhs
    lu_solve_columns(lu, pivots, rhs)
    return True, rhs


@njit(cache=True)
def _column(v):
    """v (n,) as a column (n, 1)."""
    out = np.empty((v.shape[0], 1))
    for i in range(v.shape[0]):
        out[i, 0] = v[i]
    return out


# ---------------------------------------------------------------- the cone problem (mode-wise Newton)


@njit(cache=True)
def _tolerances(a, b, x, rel):
    """``(tol_w, tol_x)`` of :func:`~diffsim_ros.sim.contact.linsolve.contact_tolerances`."""
    diag = -np.inf
    for i in range(a.shape[0]):
        if a[i, i] > diag or a[i, i] != a[i, i]:
            diag = a[i, i]
    diag = max(diag, _TINY)
    velocity = max(_max_abs(b), _max_abs(_mv(a, x)))
    impulse = max(_max_abs(x), velocity / diag)
    return rel * max(velocity, _TINY), rel * max(impulse, _TINY)


@njit(cache=True)
def _velocity_row(modes, mu, j):
    i = j // 3
    if modes[i] == SEPARATED:
        return False
    return j % 3 == 0 or mu[i] > 0.0


@njit(cache=True)
def _sliding(modes, mu, i):
    return modes[i] == SLIDING and mu[i] > 0.0


@njit(cache=True)
def _kkt_point(a, b, mu, z):
    """``(K, m = 3K, x, w = A x + b)`` of a cone KKT point z = [x (3K) [N·s], nu (K)]; w [m/s]."""
    k = mu.shape[0]
    x = z[: 3 * k]
    return k, 3 * k, x, _affine(a, x, b)


@njit(cache=True)
def _residual(a, b, mu, modes, z):
    """KKT residual F(x, nu) (4K,) of cone._residual; z = [x (3K), nu (K)]."""
    k, m, x, w = _kkt_point(a, b, mu, z)
    f = np.empty(m + k)
    for j in range(m):
        i = j // 3
        if _velocity_row(modes, mu, j):
            f[j] = w[j] + (2.0 * z[m + i] * x[j] if (_sliding(modes, mu, i) and j % 3 != 0) else 0.0)
        else:
            f[j] = x[j]
    for i in range(k):
        if _sliding(modes, mu, i):
            f[m + i] = 0.5 * (x[3 * i + 1] ** 2 + x[3 * i + 2] ** 2 - (mu[i] * x[3 * i]) ** 2)
        else:
            f[m + i] = z[m + i]
    return f


@njit(cache=True)
def _kkt(a, mu, modes, z):
    """dF/d(x, nu), (4K, 4K), of cone._kkt_matrix."""
    k = mu.shape[0]
    m = 3 * k
    out = np.zeros((m + k, m + k))
    for j in range(m):
        i = j // 3
        if _velocity_row(modes, mu, j):
            for c in range(m):
                out[j, c] = a[j, c]
            if _sliding(modes, mu, i) and j % 3 != 0:
                out[j, j] += 2.0 * z[m + i]
                out[j, m + i] = 2.0 * z[j]
        else:
            out[j, j] = 1.0
    for i in range(k):
        if _sliding(modes, mu, i):
            out[m + i, 3 * i] = -mu[i] * mu[i] * z[3 * i]
            out[m + i, 3 * i + 1] = z[3 * i + 1]
            out[m + i, 3 * i + 2] = z[3 * i + 2]
        else:
            out[m + i, m + i] = 1.0
    return out


@njit(cache=True)
def _newton(a, b, mu, modes, z):
    """cone._newton for one problem: damped Newton with backtracking on |F|²; returns z (4K,)."""
    n = z.shape[0]
    noise = (16.0 * _EPS * (_max_abs(b) + 1e-3 * _TINY)) ** 2 * n
    f = _residual(a, b, mu, modes, z)
    for _ in range(NEWTON_ITERATIONS):
        ok, step = _solve(_kkt(a, mu, modes, z), _column(f))
        if not ok:
            return z
        norm0 = _dot(f, f)
        alpha = 1.0
        for _ in range(LINE_SEARCH_STEPS):
            trial = np.empty(n)
            for i in range(n):
                trial[i] = z[i] + alpha * -step[i, 0]
            f_trial = _residual(a, b, mu, modes, trial)
            worse = _dot(f_trial, f_trial) > max(norm0 * (1.0 - 1e-4 * alpha), noise)
            if not worse:
                break
            alpha *= 0.5
        if worse or not (_finite(f_trial) and _finite(trial)):
            return z
        moved = 0.0
        for i in range(n):
            moved = max(moved, abs(trial[i] - z[i]))
        z, f = trial, f_trial
        if _dot(f, f) <= noise or moved <= NEWTON_STEP_TOL * max(_max_abs(z), _TINY):
            break
    return z


@njit(cache=True)
def _check(a, b, mu, modes, z):
    """cone._check: the KKT conditions of every mode hold at z."""
    if not _finite(z):
        return False
    k, m, x, w = _kkt_point(a, b, mu, z)
    tol_w, tol_x = _tolerances(a, b, x, math.sqrt(_EPS))
    f = _residual(a, b, mu, modes, z)
    for j in range(m):
        if _velocity_row(modes, mu, j) and abs(f[j]) > tol_w:
            return False
    for i in range(k):
        xn, norm_t = x[3 * i], math.hypot(x[3 * i + 1], x[3 * i + 2])
        if modes[i] == SEPARATED:
            if w[3 * i] < -tol_w:
                return False
            continue
        if xn < -tol_x:
            return False
        if _sliding(modes, mu, i):
            slip = w[3 * i + 1] * x[3 * i + 1] + w[3 * i + 2] * x[3 * i + 2]
            if abs(norm_t - mu[i] * xn) > tol_x or slip > tol_w * max(norm_t, tol_x):
                return False
        elif mu[i] > 0.0 and norm_t > mu[i] * xn + tol_x:
            return False
    return True


@njit(cache=True)
def _slip_directions(a, b, x):
    """cone._slip_directions: unit tangential velocity, else minus the friction direction, (K, 2)."""
    k = b.shape[0] // 3
    w = _affine(a, x, b)
    tol = math.sqrt(_EPS) * (_max_abs(b) + _TINY)
    out = np.zeros((k, 2))
    for i in range(k):
        norm_w = math.hypot(w[3 * i + 1], w[3 * i + 2])
        norm_x = math.hypot(x[3 * i + 1], x[3 * i + 2])
        if norm_w > tol:
            out[i, 0], out[i, 1] = w[3 * i + 1] / norm_w, w[3 * i + 2] / norm_w
        elif norm_x > _TINY:
            out[i, 0], out[i, 1] = -x[3 * i + 1] / norm_x, -x[3 * i + 2] / norm_x
    return out


@njit(cache=True)
def _guess(a, b, mu, modes, directions):
    """cone._fixed_direction_guess: sliding friction fixed at ``-mu x_n d``, a linear solve; z (4K,)."""
    k = mu.shape[0]
    m = 3 * k
    e = np.zeros((m, m))
    mask = np.zeros(m)
    for j in range(m):
        i = j // 3
        tangent_sliding = _sliding(modes, mu, i) and j % 3 != 0
        if _velocity_row(modes, mu, j) and not tangent_sliding:
            mask[j] = 1.0
            e[j, j] = 1.0
        if tangent_sliding:
            e[j, 3 * i] += -mu[i] * directions[i, j % 3 - 1]
    g = _mm(a, e)  # rows and columns of fixed impulses replaced by the identity
    rhs = np.empty((m, 1))
    for r in range(m):
        for c in range(m):
            g[r, c] = g[r, c] * (mask[r] * mask[c]) + (1.0 - mask[r] if r == c else 0.0)
        rhs[r, 0] = -(b[r] * mask[r])
    ok, y = _solve(g, rhs)
    z = np.zeros(m + k)
    if ok:
        for r in range(m):
            for c in range(m):
                z[r] += e[r, c] * y[c, 0]
    x = z[:m]
    w = _affine(a, x, b)
    for i in range(k):
        if _sliding(modes, mu, i):
            z[m + i] = math.hypot(w[3 * i + 1], w[3 * i + 2]) / (2.0 * max(math.hypot(x[3 * i + 1], x[3 * i + 2]), _TINY))
    return z


@njit(cache=True)
def _heuristic(a, b, mu):
    """cone._heuristic: approaching contacts touch, and slide where their free slip exceeds mu |b_n|."""
    k = mu.shape[0]
    modes = np.zeros(k, dtype=np.int8)
    for i in range(k):
        if b[3 * i] < 0.0:
            modes[i] = STICKING
            if math.hypot(b[3 * i + 1], b[3 * i + 2]) > mu[i] * abs(b[3 * i]) and mu[i] > 0.0:
                modes[i] = SLIDING
    return modes, _guess(a, b, mu, modes, _slip_directions(a, b, np.zeros(3 * k)))


@njit(cache=True)
def _repair(a, b, mu, modes, z):
    """cone._repair: new modes from a violating solution, restarted from their linear solve."""
    k, m, x, w = _kkt_point(a, b, mu, z)
    tol_w, tol_x = _tolerances(a, b, x, math.sqrt(_EPS))
    new = modes.copy()
    for i in range(k):
        xn, norm_t = x[3 * i], math.hypot(x[3 * i + 1], x[3 * i + 2])
        norm_wt = math.hypot(w[3 * i + 1], w[3 * i + 2])
        sep = modes[i] == SEPARATED
        sliding = _sliding(modes, mu, i)
        sticking = not sep and mu[i] > 0.0 and not sliding
        pulling = not sep and xn < -tol_x
        if pulling:
            new[i] = SLIDING if sticking else SEPARATED
        if sep and w[3 * i] < -tol_w:
            new[i] = SLIDING if (norm_wt > tol_w and mu[i] > 0.0) else STICKING
        if not pulling and sticking and norm_t > mu[i] * xn + tol_x:
            new[i] = SLIDING
        slip = w[3 * i + 1] * x[3 * i + 1] + w[3 * i + 2] * x[3 * i + 2]
        if not pulling and sliding and slip > tol_w * max(norm_t, tol_x):
            new[i] = STICKING
    return new, _guess(a, b, mu, new, _slip_directions(a, b, x))


@njit(cache=True)
def _with_repairs(a, b, mu, modes, z):
    """cone._attempt_with_repairs: Newton on the modes, repaired while the KKT check fails;
    ``(z, modes, ok)``."""
    z = _newton(a, b, mu, modes, z)
    ok = _check(a, b, mu, modes, z)
    for _ in range(REPAIR_ROUNDS):
        if ok:
            break
        modes, z = _repair(a, b, mu, modes, z)
        z = _newton(a, b, mu, modes, z)
        ok = _check(a, b, mu, modes, z)
    return z, modes, ok


@njit(cache=True)
def _project(v, radius):
    """v (n,) onto x >= 0 (``radius`` empty), or each pair of entries onto the disk of radius[i]."""
    out = np.empty(v.shape[0])
    if radius.shape[0] == 0:
        for i in range(v.shape[0]):
            out[i] = max(v[i], 0.0)
        return out
    for i in range(radius.shape[0]):
        norm = math.hypot(v[2 * i], v[2 * i + 1])
        scale = radius[i] / max(norm, _TINY) if norm > radius[i] else 1.0
        out[2 * i], out[2 * i + 1] = v[2 * i] * scale, v[2 * i + 1] * scale
    return out


@njit(cache=True)
def _admm(p, q, radius, x0):
    """cone._admm: over-relaxed ADMM for ``min ½ xᵀ P x + qᵀ x`` over the set of :func:`_project`."""
    n = p.shape[0]
    rho = max(_trace(p) / n, _TINY)
    shifted = p.copy()
    _add_diagonal(shifted, rho)
    inverse = np.linalg.inv(shifted)
    z, u, rhs, relaxed = _project(x0, radius), np.zeros(n), np.empty(n), np.empty(n)
    scale = STAGGERED_TOL * (1.0 + _max_abs(q) / rho)
    for it in range(ADMM_ITERATIONS):
        for i in range(n):
            rhs[i] = rho * (z[i] - u[i]) - q[i]
        x = _mv(inverse, rhs)
        for i in range(n):
            relaxed[i] = ADMM_RELAXATION * x[i] + (1.0 - ADMM_RELAXATION) * z[i]
        z_new = _project(relaxed + u, radius)
        primal, dual = 0.0, 0.0
        for i in range(n):
            u[i] += relaxed[i] - z_new[i]
            primal, dual = max(primal, abs(x[i] - z_new[i])), max(dual, abs(z_new[i] - z[i]))
        z = z_new
        if it % 10 == 9 and primal <= scale and dual <= scale:
            break
    return z


@njit(cache=True)
def _staggered(a, b, mu, x0):
    """cone.staggered_projections (Algorithm 1 of Le Lidec et al.): the normal QP and the friction
    QCQP alternated, each by ADMM; approximate impulses (3K,) [N·s]."""
    k = mu.shape[0]
    normal, tangent = np.arange(k) * 3, np.empty(2 * k, dtype=np.int64)
    for i in range(k):
        tangent[2 * i], tangent[2 * i + 1] = 3 * i + 1, 3 * i + 2
    a_nn, a_nt, a_tn, a_tt = a[normal][:, normal], a[normal][:, tangent], a[tangent][:, normal], a[tangent][:, tangent]
    xn, xt, none = x0[normal], x0[tangent], np.zeros(0)
    for _ in range(OUTER_ITERATIONS):
        xn_new = _admm(a_nn, _affine(a_nt, xt, b[normal]), none, xn)
        radius = np.empty(k)
        for i in range(k):
            radius[i] = mu[i] * xn_new[i]
        xt_new = _admm(a_tt, _affine(a_tn, xn_new, b[tangent]), radius, xt)
        change = max(_max_abs(xn_new - xn), _max_abs(xt_new - xt))
        size = max(_max_abs(xn_new), _max_abs(xt_new))
        xn, xt = xn_new, xt_new
        if change <= STAGGERED_TOL * (size + _TINY):
            break
    out = np.empty(3 * k)
    out[normal], out[tangent] = xn, xt
    return out


@njit(cache=True)
def _algorithm1(a, b, mu, x0):
    """cone._algorithm1: staggered projections, modes classified from them (cone._classify),
    then the Newton polish with repairs; ``(z, modes, ok)``."""
    k = mu.shape[0]
    x = _staggered(a, b, mu, x0)
    w = _affine(a, x, b)
    tol_w, tol_x = _tolerances(a, b, x, _EPS**0.25)
    modes = np.zeros(k, dtype=np.int8)
    z = np.zeros(4 * k)
    z[: 3 * k] = x
    for i in range(k):
        norm_t, norm_w = math.hypot(x[3 * i + 1], x[3 * i + 2]), math.hypot(w[3 * i + 1], w[3 * i + 2])
        if x[3 * i] > tol_x:
            modes[i] = STICKING
            if norm_t >= mu[i] * x[3 * i] - tol_x and norm_w > tol_w and mu[i] > 0.0:
                modes[i] = SLIDING
                z[3 * k + i] = norm_w / (2.0 * max(norm_t, _TINY))
    z, modes, ok = _with_repairs(a, b, mu, modes, z)
    if not ok:  # as torch: keep Algorithm 1's (feasible, approximate) impulses
        z[: 3 * k] = x
    return z, modes, ok


@njit(cache=True)
def solve_cone_compiled(a, b, mu, warm_modes):
    """The cone problem ``w = A x + b`` (A already regularized) for one scene, as cone.solve_cone:
    the warm modes, else the heuristic's with repairs, else Algorithm 1 with the Newton polish.

    Args:
        a: Delassus matrix (3K, 3K). b: bias [m/s] (3K,). mu: friction (K,).
        warm_modes: Previous modes (K,) int8, or an empty array for none.

    Returns:
        ``(z = [x (3K) N·s, nu (K)], modes (K,) int8, converged, warm_hit)``; not converged:
        ``x`` is Algorithm 1's approximate impulses (as cone.solve_cone keeps them).
    """
    k = mu.shape[0]
    start = np.zeros(3 * k)
    if warm_modes.shape[0] == k:
        modes = warm_modes.copy()
        z = _guess(a, b, mu, modes, _slip_directions(a, b, np.zeros(3 * k)))
        start = z[: 3 * k].copy()
        z = _newton(a, b, mu, modes, z)
        if _check(a, b, mu, modes, z):
            return z, modes, True, True
    modes, z = _heuristic(a, b, mu)
    z, modes, ok = _with_repairs(a, b, mu, modes, z)
    if not ok:
        z, modes, ok = _algorithm1(a, b, mu, start)
    # Touching with zero normal impulse: a tie, separated (no empty cone rows); as torch, also
    # on Algorithm 1's approximate impulses.
    _, tol_x = _tolerances(a, b, z[: 3 * k], math.sqrt(_EPS))
    for i in range(k):
        if modes[i] != SEPARATED and z[3 * i] <= tol_x:
            modes[i] = SEPARATED
            z[3 * i] = z[3 * i + 1] = z[3 * i + 2] = 0.0
            z[3 * k + i] = 0.0
    return z, modes, ok, False


# ---------------------------------------------------------------- the step


@njit(cache=True)
def _plane_slot(s, slots, rot_j, pos_j, gap, point, normal):
    """Slot s of an object-plane pair: gap [m], contact point [m] and normal (the plane's) into the slot arrays.

    ``slots`` (S, 10): local point (3) [m], radius [m], plane normal (3), plane point (3) [m].
    """
    p = _mv(rot_j, slots[s, 0:3])
    distance = 0.0
    for c in range(3):
        p[c] += pos_j[c]
        distance += (p[c] - slots[s, 7 + c]) * slots[s, 4 + c]
    gap[s] = distance - slots[s, 3]
    for c in range(3):
        point[s, c] = p[c] - slots[s, 4 + c] * (slots[s, 3] + 0.5 * gap[s])
        normal[s, c] = slots[s, 4 + c]


@njit(cache=True)
def _box_pair(a, b, start, rot, pos, scene, margin, tangents, point, normal, gap, active, d_point, d_normal, d_gap):
    """The 8 slots of boxes a and b from ``start``: inactive placeholders (step._inactive_slots)
    when the broad phase separates them (step._apart), else :func:`box_box_slots`."""
    obj_radius, halves = scene[7], scene[8]
    rel = np.empty(3)
    for c in range(3):
        rel[c] = pos[a, c] - pos[b, c]
    distance = math.sqrt(_dot(rel, rel))
    apart = distance > obj_radius[a] + obj_radius[b] + margin
    if apart or boxes_separated(rot[a], pos[a], halves[a], rot[b], pos[b], halves[b], margin):
        for s in range(start, start + BOX_BOX_SLOTS):
            for c in range(3):
                point[s, c], normal[s, c], d_point[s, c], d_normal[s, c] = pos[a, c], 0.0, 0.0, 0.0
            normal[s, 2], gap[s], active[s], d_gap[s] = 1.0, distance - obj_radius[a] - obj_radius[b], False, 0.0
        return
    end = start + BOX_BOX_SLOTS
    box_box_slots(rot[a], pos[a], halves[a], rot[b], pos[b], halves[b], margin, tangents, point[start:end],
                  normal[start:end], gap[start:end], active[start:end], d_point[start:end], d_normal[start:end],
                  d_gap[start:end])


@njit(cache=True)
def _margin(lin, ang, scene, options):
    """Activation distance of the step [m]: the margin plus twice what the fastest surface point
    (broadphase.speed_bound: ``|v| + |w| r`` and a step of gravity) covers in a step."""
    obj_radius = scene[7]
    speed = 0.0
    for j in range(lin.shape[0]):
        speed = max(speed, math.sqrt(_dot(lin[j], lin[j])) + math.sqrt(_dot(ang[j], ang[j])) * obj_radius[j])
    dt = options[0]
    speed += dt * math.sqrt(options[4] * options[4] + options[5] * options[5] + options[6] * options[6])
    return options[1] + 2.0 * dt * speed


@njit(cache=True)
def _unit_rotations(quat):
    """Unit quaternions (J, 4) and rotations (J, 3, 3) of the orientations quat (J, 4)."""
    count = quat.shape[0]
    unit, rot = np.empty((count, 4)), np.empty((count, 3, 3))
    for j in range(count):
        norm = math.sqrt(_dot(quat[j], quat[j]))
        for c in range(4):
            unit[j, c] = quat[j, c] / norm
        _rotation_into(unit[j], rot[j])
    return unit, rot


@njit(cache=True)
def _detect(pos, rot, scene, margin):
    """Per slot: gap [m] (S,), point [m] (S, 3), normal (S, 3) (from shape b to shape a), active (S,).

    ``scene``: see :meth:`FastContactStep._scene`; pairs (P, 5): kind, object a, object b (-1:
    a plane), first slot, slot count.
    """
    slots, pairs = scene[2], scene[9]
    s_count = slots.shape[0]
    gap, point, normal = np.empty(s_count), np.empty((s_count, 3)), np.empty((s_count, 3))
    active = np.zeros(s_count, dtype=np.bool_)
    d_point, d_normal, d_gap = np.zeros((s_count, 3)), np.zeros((s_count, 3)), np.zeros(s_count)
    still = (np.zeros((3, 3)), np.zeros(3), np.zeros((3, 3)), np.zeros(3))
    for p in range(pairs.shape[0]):
        kind, a, b, start, count = pairs[p, 0], pairs[p, 1], pairs[p, 2], pairs[p, 3], pairs[p, 4]
        if kind == BOX_PAIR:
            _box_pair(a, b, start, rot, pos, scene, margin, still, point, normal, gap, active, d_point, d_normal, d_gap)
            continue
        for s in range(start, start + count):
            _plane_slot(s, slots, rot[a], pos[a], gap, point, normal)
            active[s] = gap[s] < margin
    return gap, point, normal, active


@njit(cache=True)
def _frame_into(normal, out):
    """Contact frame rows (n, t1, t2) of frames.contact_frames for a unit normal (3,), into out (3, 3)."""
    anchor = np.zeros(3)
    anchor[1 if abs(normal[0]) > 0.9 else 0] = 1.0
    t2 = _cross(normal, anchor)
    norm = math.sqrt(_dot(t2, t2))
    for c in range(3):
        t2[c] /= norm
    t1 = _cross(t2, normal)
    for c in range(3):
        out[0, c], out[1, c], out[2, c] = normal[c], t1[c], t2[c]


@njit(cache=True)
def _frame_tangent(normal, d_normal, out):
    """Derivative of :func:`_frame_into` along d_normal (3,), into out (3, 3)."""
    anchor = np.zeros(3)
    anchor[1 if abs(normal[0]) > 0.9 else 0] = 1.0
    u, du = _cross(normal, anchor), _cross(d_normal, anchor)
    norm = math.sqrt(_dot(u, u))
    t2, dt2 = np.empty(3), np.empty(3)
    for c in range(3):
        t2[c] = u[c] / norm
    along = _dot(t2, du)
    for c in range(3):
        dt2[c] = (du[c] - t2[c] * along) / norm
    first, second = _cross(dt2, normal), _cross(t2, d_normal)
    for c in range(3):
        out[0, c], out[1, c], out[2, c] = d_normal[c], first[c] + second[c], dt2[c]


@njit(cache=True)
def _contact_jacobian(keep, slot_obj, slot_other, point, normal, pos, count):
    """Rows ``±[f, (point - pos) x f]`` of each active slot's frame (+ for shape a, - for an object b),
    (3k, 6J); and the frames (k, 3, 3)."""
    k = keep.shape[0]
    jac = np.zeros((3 * k, 6 * count))
    frames = np.empty((k, 3, 3))
    lever = np.empty(3)
    for a in range(k):
        s = keep[a]
        _frame_into(normal[s], frames[a])
        for j, sign in ((slot_obj[s], 1.0), (slot_other[s], -1.0)):
            if j < 0:
                continue
            for c in range(3):
                lever[c] = point[s, c] - pos[j, c]
            for r in range(3):
                moment = _cross(lever, frames[a, r])
                for c in range(3):
                    jac[3 * a + r, 6 * j + c] = sign * frames[a, r, c]
                    jac[3 * a + r, 6 * j + 3 + c] = sign * moment[c]
    return jac, frames


@njit(cache=True)
def _inertias(rot, principal):
    """World inverse inertia and inertia [kg·m²], (J, 3, 3) each."""
    count = rot.shape[0]
    inv, inertia = np.empty((count, 3, 3)), np.empty((count, 3, 3))
    for j in range(count):
        _scaled_grams(rot[j], principal[j], rot[j], inv[j], inertia[j])
    return inv, inertia


@njit(cache=True)
def _inverse_mass_jt(mass, inv, jac):
    """M⁻¹ jacᵀ (6J, c) for jac (c, 6J): linear rows / m, angular rows by the world inverse inertia."""
    out = np.empty((jac.shape[1], jac.shape[0]))
    for j in range(mass.shape[0]):
        for col in range(jac.shape[0]):
            for r in range(3):
                out[6 * j + r, col] = jac[col, 6 * j + r] / mass[j]
                acc = 0.0
                for i in range(3):
                    acc += inv[j, r, i] * jac[col, 6 * j + 3 + i]
                out[6 * j + 3 + r, col] = acc
    return out


@njit(cache=True)
def _free_velocity(lin, ang, wrench, mass, inv, inertia, options):
    """Velocities without contact (6J,) [m/s, rad/s]: gravity, applied wrench, gyroscopic torque."""
    count = mass.shape[0]
    h = options[0]
    out = np.empty(6 * count)
    torque = np.empty(3)
    for j in range(count):
        gyro = _cross(ang[j], _mv(inertia[j], ang[j]))
        for c in range(3):
            out[6 * j + c] = lin[j, c] + h * (options[4 + c] + wrench[j, c] / mass[j])
            torque[c] = wrench[j, 3 + c] - gyro[c]
        accel = _mv(inv[j], torque)
        for c in range(3):
            out[6 * j + 3 + c] = ang[j, c] + h * accel[c]
    return out


@njit(cache=True)
def _bias(jac, v_free, v_now, gap_k, e_k, options):
    """Contact bias b (3k,) [m/s] and the bouncing contacts (k,) of ContactWorld.step."""
    h, baumgarte, threshold = options[0], options[2], options[3]
    b = _mv(jac, v_free)
    current = _mv(jac, v_now)
    k = gap_k.shape[0]
    bouncing = np.zeros(k, dtype=np.bool_)
    for a in range(k):
        approach = b[3 * a]
        if e_k[a] > 0.0 and gap_k[a] + h * approach < 0.0:
            # Impact speed: the velocity interpolated to when the contact closes (step.impact_speed).
            fraction = min(max(gap_k[a] / max(-approach, _TINY), 0.0), h) / h
            bouncing[a] = current[3 * a] + fraction * (approach - current[3 * a]) < -threshold
        if bouncing[a]:
            b[3 * a] += e_k[a] * approach
        else:
            b[3 * a] += (gap_k[a] if gap_k[a] > 0.0 else baumgarte * gap_k[a]) / h
    return b, bouncing


@njit(cache=True)
def _integrate(pos, quat, v_next, displacement):
    """Positions + the displacement, orientations exp(rotation of the displacement) * quat
    renormalized; (J, 3), (J, 4), (J, 3), (J, 3). ``displacement`` (6J,): ``h v_next`` plus the
    bounce correction."""
    count = pos.shape[0]
    zero3, zero4, rv = np.zeros(3), np.zeros(4), np.empty(3)
    p, q, lin, ang = np.empty((count, 3)), np.empty((count, 4)), np.empty((count, 3)), np.empty((count, 3))
    for j in range(count):
        for c in range(3):
            p[j, c] = pos[j, c] + displacement[6 * j + c]
            rv[c] = displacement[6 * j + 3 + c]
            lin[j, c], ang[j, c] = v_next[6 * j + c], v_next[6 * j + 3 + c]
        rotation, _ = _quat_exp(rv, zero3)
        unit, _ = _normalize(_quat_multiply(rotation, quat[j]), zero4)
        for c in range(4):
            q[j, c] = unit[c]
    return p, q, lin, ang


@njit(cache=True)
def _active(active):
    """Indices (k,) int64 of the True entries of active (S,)."""
    keep = np.empty(active.shape[0], dtype=np.int64)
    k = 0
    for s in range(active.shape[0]):
        if active[s]:
            keep[k] = s
            k += 1
    return keep[:k].copy()


@njit(cache=True)
def _take(values, keep):
    """values[keep] for float values (S,) and indices keep (k,)."""
    out = np.empty(keep.shape[0])
    for i in range(keep.shape[0]):
        out[i] = values[keep[i]]
    return out


# ---------------------------------------------------------------- the bounce correction


@njit(cache=True)
def _pinv(a, floor):
    """Pseudo-inverse (r, r) as linsolve.pinv: singular values at most sqrt(eps) times the largest
    (or ``floor``, the unit singular values of the rows torch leaves out) are dropped."""
    r = a.shape[0]
    out = np.zeros((r, r))
    if r == 0:
        return out
    u, s, vt = np.linalg.svd(a)
    cutoff = math.sqrt(_EPS) * max(s[0], floor)
    for i in range(r):
        if s[i] > cutoff:
            for row in range(r):
                scaled = vt[i, row] / s[i]
                for col in range(r):
                    out[row, col] += scaled * u[col, i]
    return out


@njit(cache=True)
def _first_impacts(moving, impact, owners, count):
    """Each object's first impact time t*_j [s] (J,) within the step (0 when none) and the contact
    it comes from (J,) (-1 when none): step.impact_twist."""
    first, source = np.zeros(count), np.full(count, -1, dtype=np.int64)
    for i in range(moving.shape[0]):
        if not moving[i]:
            continue
        for side in range(2):
            j = owners[i, side]
            if j >= 0 and (source[j] < 0 or impact[i] < first[j]):
                first[j], source[j] = impact[i], i
    return first, source


@njit(cache=True)
def _bounce_correction(jac, minv_jt, a_normal, v_free, v_next, gap_k, bouncing, z, h, slots_total, owners):
    """step.bounce_correction: the displacement (6J,) placing bodies where the continuous-time
    bounce takes them, and what its tangent needs: ``(correction, (masked rows (r,), reduced
    Delassus block (r, r), its pseudo-inverse, targets (r,), multipliers (r,), impact times (k,),
    moving (k,), first impact per object (J,), its contact (J,), the twist part (6J,)))``."""
    k, count = gap_k.shape[0], minv_jt.shape[0] // 6
    approach, v_normal = _mv(jac, v_free), _mv(jac, v_next)
    impact, target = np.zeros(k), np.zeros(k)
    moving = np.zeros(k, dtype=np.bool_)
    pressed = 0.0
    for i in range(k):
        pressed = max(pressed, abs(z[3 * i]))
    rows = np.empty(k, dtype=np.int64)
    r = 0
    for i in range(k):
        impact[i] = min(max(gap_k[i] / max(-approach[3 * i], _TINY), 0.0), h)
        moving[i] = bouncing[i] and gap_k[i] > 0.0
        if moving[i]:
            target[i] = -gap_k[i] - v_normal[3 * i] * impact[i]
        if moving[i] or z[3 * i] > math.sqrt(_EPS) * pressed:
            rows[r] = i
            r += 1
    rows = rows[:r].copy()
    first, source = _first_impacts(moving, impact, owners, count)
    late = np.empty(6 * count)
    for row in range(6 * count):
        late[row] = first[row // 6] * (v_free[row] - v_next[row])
    reduced, goal = np.empty((r, r)), np.empty(r)
    for i in range(r):
        goal[i] = target[rows[i]] - _dot(jac[3 * rows[i]], late)
        for j in range(r):
            reduced[i, j] = a_normal[rows[i], rows[j]]
    inverse = _pinv(reduced, 1.0 if r < slots_total else 0.0)
    multipliers = _mv(inverse, goal)
    correction = late.copy()
    for i in range(r):
        for row in range(minv_jt.shape[0]):
            correction[row] += minv_jt[row, 3 * rows[i]] * multipliers[i]
    return correction, (rows, reduced, inverse, goal, multipliers, impact, moving, first, source, late)


@njit(cache=True)
def _pinv_tangent_apply(a, p, da, v):
    """``dP v`` for the pseudo-inverse P of a (r, r) along da (Golub-Pereyra, constant rank):
    ``dP = -P dA P + P Pᵀ dAᵀ (I - A P) + (I - P A) dAᵀ Pᵀ P``."""
    pv = _mv(p, v)
    out = _mv(p, _mv(da, pv))
    for i in range(out.shape[0]):
        out[i] = -out[i]
    rest = v - _mv(a, pv)
    first = _mv(p, _mv(p.T.copy(), _mv(da.T.copy(), rest)))
    ppv = _mv(p.T.copy(), pv)
    inner = _mv(da.T.copy(), ppv)
    second = inner - _mv(p, _mv(a, inner))
    for i in range(out.shape[0]):
        out[i] += first[i] + second[i]
    return out


@njit(cache=True)
def _impact_tangent(row, jac, v_free, gap, h, d_jac, d_v_free, d_gap):
    """Tangent of the impact time ``t* = gap / -approach`` of the contact on normal row ``row``
    (zero where t* is clamped to [0, h])."""
    approach = _dot(jac[row], v_free)
    d_approach = _dot(d_jac[row], v_free) + _dot(jac[row], d_v_free)
    closing, d_closing = (-approach, -d_approach) if -approach >= _TINY else (_TINY, 0.0)
    raw = gap / closing
    return (d_gap - raw * d_closing) / closing if 0.0 <= raw <= h else 0.0


@njit(cache=True)
def _correction_tangent(jac, minv_jt, v_free, v_next, gap_k, h, fix, d_jac, d_minv_jt, d_gap, d_v_free, d_v_next):
    """Tangent (6J,) of the bounce correction along one input direction (tangents of the contact
    Jacobian (3k, 6J), M⁻¹Jᵀ (6J, 3k), gaps (k,), free and next velocities (6J,))."""
    rows, reduced, inverse, goal, multipliers, impact, moving, first, source, late = fix
    r = rows.shape[0]
    d_late = np.zeros(late.shape[0])
    for j in range(first.shape[0]):
        i = source[j]
        d_first = 0.0 if i < 0 else _impact_tangent(3 * i, jac, v_free, gap_k[i], h, d_jac, d_v_free, d_gap[i])
        for c in range(6 * j, 6 * j + 6):
            d_late[c] = d_first * (v_free[c] - v_next[c]) + first[j] * (d_v_free[c] - d_v_next[c])
    d_reduced, d_goal = np.zeros((r, r)), np.zeros(r)
    for i in range(r):
        ri = 3 * rows[i]
        for j in range(r):
            rj = 3 * rows[j]
            acc = 0.0
            for c in range(jac.shape[1]):
                acc += d_jac[ri, c] * minv_jt[c, rj] + jac[ri, c] * d_minv_jt[c, rj]
            d_reduced[i, j] = acc
        d_goal[i] = -_dot(d_jac[ri], late) - _dot(jac[ri], d_late)
        if not moving[rows[i]]:
            continue
        v_normal = _dot(jac[ri], v_next)
        d_v_normal = _dot(d_jac[ri], v_next) + _dot(jac[ri], d_v_next)
        d_impact = _impact_tangent(ri, jac, v_free, gap_k[rows[i]], h, d_jac, d_v_free, d_gap[rows[i]])
        d_goal[i] += -d_gap[rows[i]] - d_v_normal * impact[rows[i]] - v_normal * d_impact
    d_mult = _pinv_tangent_apply(reduced, inverse, d_reduced, goal) + _mv(inverse, d_goal)
    out = d_late
    for i in range(r):
        for row in range(out.shape[0]):
            out[row] += d_minv_jt[row, 3 * rows[i]] * multipliers[i] + minv_jt[row, 3 * rows[i]] * d_mult[i]
    return out


# ---------------------------------------------------------------- one step, substeps


@njit(cache=True)
def _forward(pos, quat, lin, ang, wrench, scene, options, warm):
    """One step (no substeps) and what its Jacobians need (see :meth:`FastContactStep.step` for the state)."""
    mass, principal, slots, slot_obj, slot_other, slot_mu, slot_e = scene[:7]
    count, h = pos.shape[0], options[0]
    unit, rot = _unit_rotations(quat)
    margin = _margin(lin, ang, scene, options)
    gap, point, normal, active = _detect(pos, rot, scene, margin)
    keep = _active(active)
    k = keep.shape[0]
    jac, frames = _contact_jacobian(keep, slot_obj, slot_other, point, normal, pos, count)
    inv, inertia = _inertias(rot, principal)
    minv_jt = _inverse_mass_jt(mass, inv, jac)
    v_free = _free_velocity(lin, ang, wrench, mass, inv, inertia, options)
    v_now = np.empty(6 * count)
    for j in range(count):
        for c in range(3):
            v_now[6 * j + c], v_now[6 * j + 3 + c] = lin[j, c], ang[j, c]
    gap_k = _take(gap, keep)
    b, bouncing = _bias(jac, v_free, v_now, gap_k, _take(slot_e, keep), options)
    a = _mm(jac, minv_jt)
    a_normal = np.empty((k, k))  # the Delassus normal block before regularization (bounce correction)
    for i in range(k):
        for j in range(k):
            a_normal[i, j] = a[3 * i, 3 * j]
    if k > 0:
        _add_diagonal(a, options[8] * max(_trace(a) / (3 * k), _TINY))
    mu = _take(slot_mu, keep)
    warm_k = np.zeros(k if warm.shape[0] == slot_obj.shape[0] else 0, dtype=np.int8)
    for i in range(warm_k.shape[0]):
        warm_k[i] = warm[keep[i]]
    z, modes, converged, warm_hit = np.zeros(0), np.zeros(0, dtype=np.int8), True, False
    if k > 0:
        z, modes, converged, warm_hit = solve_cone_compiled(a, b, mu, warm_k)
    v_next = _affine(minv_jt, z[: 3 * k], v_free)
    slot_modes = np.zeros(slot_obj.shape[0], dtype=np.int8)
    slot_impulse, slot_multiplier = np.zeros((slot_obj.shape[0], 3)), np.zeros(slot_obj.shape[0])
    for i in range(k):
        slot_modes[keep[i]], slot_multiplier[keep[i]] = modes[i], z[3 * k + i]
        for c in range(3):
            slot_impulse[keep[i], c] = z[3 * i + c]
    displacement = np.empty(6 * count)
    for r in range(6 * count):
        displacement[r] = h * v_next[r]
    correction = np.zeros(6 * count)
    fix = (np.zeros(0, dtype=np.int64), np.zeros((0, 0)), np.zeros((0, 0)), np.zeros(0), np.zeros(0), np.zeros(k),
           np.zeros(k, dtype=np.bool_), np.zeros(count), np.full(count, -1, dtype=np.int64), np.zeros(6 * count))
    if bouncing.any():
        owners = np.empty((k, 2), dtype=np.int64)
        for i in range(k):
            owners[i, 0], owners[i, 1] = slot_obj[keep[i]], slot_other[keep[i]]
        correction, fix = _bounce_correction(jac, minv_jt, a_normal, v_free, v_next, gap_k, bouncing, z, h, slots.shape[0], owners)
        for r in range(6 * count):
            displacement[r] += correction[r]
    state = _integrate(pos, quat, v_next, displacement)
    work = (unit, rot, gap, keep, jac, frames, inv, inertia, minv_jt, v_free, a, b, mu, z, modes, bouncing, v_next,
            point, normal, margin, displacement, fix)
    return state, OK if converged else APPROXIMATE, (slot_modes, slot_impulse, slot_multiplier), warm_hit, work


@njit(cache=True)
def _objects_may_touch(pos, quat, lin, ang, scene, options):
    """Whether a slot between two objects is active at the step's margin (broadphase.objects_may_touch)."""
    slot_other = scene[4]
    _, rot = _unit_rotations(quat)
    _, _, _, active = _detect(pos, rot, scene, _margin(lin, ang, scene, options))
    for s in range(active.shape[0]):
        if active[s] and slot_other[s] >= 0:
            return True
    return False


@njit(cache=True)
def _substeps(pos, quat, lin, ang, scene, options):
    """``(substeps, options of one substep)``: ``options[7]`` substeps of ``dt / options[7]`` when
    objects may touch each other (ContactOptions.impact_substeps), else one step."""
    count = int(options[7])
    if count <= 1 or not _objects_may_touch(pos, quat, lin, ang, scene, options):
        return 1, options
    fine = options.copy()
    fine[0], fine[7] = options[0] / count, 1.0
    return count, fine


@njit(cache=True)
def step_kernel(pos, quat, lin, ang, wrench, scene, options, warm):
    """Compiled step: ``((position, orientation, linear, angular), status, (slot modes, impulses [N·s]
    (S, 3), cone multipliers (S,)), warm hit)`` (the solution of the last substep)."""
    count, fine = _substeps(pos, quat, lin, ang, scene, options)
    state, status, hit = (pos, quat, lin, ang), OK, True
    solution = (warm, np.zeros((0, 3)), np.zeros(0))
    for _ in range(count):
        state, flag, solution, first = _forward(state[0], state[1], state[2], state[3], wrench, scene, fine, solution[0])[:4]
        status, hit = max(status, flag), hit and first
    return state, status, solution, hit


# ---------------------------------------------------------------- Jacobians (forward mode)


@njit(cache=True)
def _rotation_tangents(d, quat, unit, rot, principal):
    """Along input column ``d`` < 7J (a position or quaternion component): d position (J, 3) and
    d rotation, d world inverse inertia, d world inertia (J, 3, 3) each."""
    count = rot.shape[0]
    dpos, dquat = np.zeros((count, 3)), np.zeros((count, 4))
    if d < 3 * count:
        dpos[d // 3, d % 3] = 1.0
    else:
        dquat[(d - 3 * count) // 4, (d - 3 * count) % 4] = 1.0
    d_rot, d_inv, d_inertia = np.zeros((count, 3, 3)), np.zeros((count, 3, 3)), np.zeros((count, 3, 3))
    for j in range(count):
        if d >= 3 * count:
            _, d_unit = _normalize(quat[j], dquat[j])
            _rotation_tangent_into(unit[j], d_unit, d_rot[j])
            sym_inv, sym = np.empty((3, 3)), np.empty((3, 3))
            _scaled_grams(d_rot[j], principal[j], rot[j], sym_inv, sym)
            for r in range(3):
                for c in range(3):
                    d_inv[j, r, c] = sym_inv[r, c] + sym_inv[c, r]
                    d_inertia[j, r, c] = sym[r, c] + sym[c, r]
    return dpos, d_rot, d_inv, d_inertia


@njit(cache=True)
def _slot_tangents(owner, dpos, d_rot, pos, rot, scene, margin):
    """Tangents of every slot's point [m] (S, 3), normal (S, 3) and gap [m] (S,) along a pose
    direction of object ``owner`` (d position (J, 3), d rotation (J, 3, 3))."""
    slots, slot_obj, pairs = scene[2], scene[3], scene[9]
    s_count = slots.shape[0]
    d_point, d_normal, d_gap = np.zeros((s_count, 3)), np.zeros((s_count, 3)), np.zeros(s_count)
    point, normal, gap = np.empty((8, 3)), np.empty((8, 3)), np.empty(8)
    active = np.empty(8, dtype=np.bool_)
    for p in range(pairs.shape[0]):
        kind, a, b, start, count = pairs[p, 0], pairs[p, 1], pairs[p, 2], pairs[p, 3], pairs[p, 4]
        if owner != a and owner != b:
            continue
        if kind == BOX_PAIR:
            shift = np.empty((8, 3)), np.empty((8, 3)), np.empty(8)
            _box_pair(a, b, 0, rot, pos, scene, margin, (d_rot[a], dpos[a], d_rot[b], dpos[b]), point, normal, gap,
                      active, shift[0], shift[1], shift[2])
            d_point[start : start + count] = shift[0]
            d_normal[start : start + count] = shift[1]
            d_gap[start : start + count] = shift[2]
            continue
        for s in range(start, start + count):
            dp = _mv(d_rot[a], slots[s, 0:3])
            for c in range(3):
                dp[c] += dpos[a, c]
            d_gap[s] = _dot(dp, slots[s, 4:7])
            for c in range(3):
                d_point[s, c] = dp[c] - 0.5 * slots[s, 4 + c] * d_gap[s]
    return d_point, d_normal, d_gap


@njit(cache=True)
def _jacobian_tangent(dpos, d_point, d_normal, keep, scene, point, normal, pos, frames):
    """d contact Jacobian (3k, 6J) and d gap [m] (k,) from the slot tangents and d position (J, 3)."""
    slot_obj, slot_other = scene[3], scene[4]
    count, k = pos.shape[0], keep.shape[0]
    d_jac, d_gap, d_lever, lever = np.zeros((3 * k, 6 * count)), np.zeros(k), np.empty(3), np.empty(3)
    d_frame = np.empty((3, 3))
    for i in range(k):
        s = keep[i]
        _frame_tangent(normal[s], d_normal[s], d_frame)
        for j, sign in ((slot_obj[s], 1.0), (slot_other[s], -1.0)):
            if j < 0:
                continue
            for c in range(3):
                lever[c] = point[s, c] - pos[j, c]
                d_lever[c] = d_point[s, c] - dpos[j, c]
            for r in range(3):
                moment = _cross(d_lever, frames[i, r])
                turn = _cross(lever, d_frame[r])
                for c in range(3):
                    d_jac[3 * i + r, 6 * j + c] = sign * d_frame[r, c]
                    d_jac[3 * i + r, 6 * j + 3 + c] = sign * (moment[c] + turn[c])
    return d_jac


@njit(cache=True)
def _geometric_tangent(d, pos, quat, ang, wrench, scene, options, work):
    """Along input column ``d`` < 7J (a position or quaternion component): the derivatives of the
    Delassus matrix (3k, 3k), bias (3k,), ``M⁻¹Jᵀ x`` (6J,) and free velocity (6J,); and of the
    contact Jacobian (3k, 6J), M⁻¹Jᵀ (6J, 3k) and gaps (k,) (the bounce correction's)."""
    mass, principal, slot_e = scene[0], scene[1], scene[6]
    unit, rot, gap, keep, jac, frames, inv, inertia, minv_jt, v_free, a, b, mu, z, modes, bouncing, v_next = work[:17]
    point, normal, margin = work[17], work[18], work[19]
    count, k, h = rot.shape[0], keep.shape[0], options[0]
    owner = d // 3 if d < 3 * count else (d - 3 * count) // 4
    dpos, d_rot, d_inv, d_inertia = _rotation_tangents(d, quat, unit, rot, principal)
    d_point, d_normal, d_gap_all = _slot_tangents(owner, dpos, d_rot, pos, rot, scene, margin)
    d_jac = _jacobian_tangent(dpos, d_point, d_normal, keep, scene, point, normal, pos, frames)
    d_gap = _take(d_gap_all, keep)
    d_minv_jt = _inverse_mass_jt(mass, inv, d_jac)
    d_v_free, torque = np.zeros(6 * count), np.empty(3)
    for j in range(count):
        for r in range(3):  # + d_inv Jᵀ on the angular rows
            for col in range(3 * k):
                acc = 0.0
                for i in range(3):
                    acc += d_inv[j, r, i] * jac[col, 6 * j + 3 + i]
                d_minv_jt[6 * j + 3 + r, col] += acc
        gyro = _cross(ang[j], _mv(inertia[j], ang[j]))
        for c in range(3):
            torque[c] = wrench[j, 3 + c] - gyro[c]
        d_torque = _cross(ang[j], _mv(d_inertia[j], ang[j]))
        for c in range(3):
            d_torque[c] = -d_torque[c]
        first, second = _mv(d_inv[j], torque), _mv(inv[j], d_torque)
        for c in range(3):
            d_v_free[6 * j + 3 + c] = h * (first[c] + second[c])
    d_a, d_a2 = _mm(d_jac, minv_jt), _mm(jac, d_minv_jt)
    for r in range(3 * k):
        for c in range(3 * k):
            d_a[r, c] += d_a2[r, c]
    if k > 0:
        _add_diagonal(d_a, options[8] * _trace(d_a) / (3 * k))
    d_b = _affine(d_jac, v_free, _mv(jac, d_v_free))
    for i in range(k):
        if bouncing[i]:
            d_b[3 * i] *= 1.0 + slot_e[keep[i]]  # b_n = (1 + e) approach
        else:
            d_b[3 * i] += (1.0 if gap[keep[i]] > 0.0 else options[2]) * d_gap[i] / h
    return d_a, d_b, _mv(d_minv_jt, z[: 3 * k]), d_v_free, d_jac, d_minv_jt, d_gap


@njit(cache=True)
def _velocity_inputs(ang, mass, inv, inertia, h):
    """d v_free / d [linear (3J), angular (3J), wrench (6J)], (6J, 12J): these inputs leave the
    geometry alone, so they enter the step through the free velocity only."""
    count = mass.shape[0]
    out = np.zeros((6 * count, 12 * count))
    e, gyro = np.zeros(3), np.empty(3)
    for j in range(count):
        momentum = _mv(inertia[j], ang[j])
        for c in range(3):
            e[0] = e[1] = e[2] = 0.0
            e[c] = 1.0
            out[6 * j + c, 3 * j + c] = 1.0
            first, second = _cross(e, momentum), _cross(ang[j], _mv(inertia[j], e))
            for r in range(3):
                gyro[r] = first[r] + second[r]
            turn = _mv(inv[j], gyro)
            for r in range(3):
                out[6 * j + 3 + r, 3 * count + 3 * j + c] = e[r] - h * turn[r]
                out[6 * j + 3 + r, 6 * count + 6 * j + 3 + c] = h * inv[j, r, c]
            out[6 * j + c, 6 * count + 6 * j + c] = h / mass[j]
    return out


@njit(cache=True)
def _orientation_rows(quat, displacement, d_disp, count, j):
    """d next orientation of object j (4, D) from the displacement derivatives ``d_disp`` (6J, D)."""
    rv, e3, e4 = np.empty(3), np.zeros(3), np.zeros(4)
    for c in range(3):
        rv[c] = displacement[6 * j + 3 + c]
    rotation, _ = _quat_exp(rv, e3)
    d_exp = np.zeros((4, 3))
    for c in range(3):
        e3[0] = e3[1] = e3[2] = 0.0
        e3[c] = 1.0
        _, d_col = _quat_exp(rv, e3)
        for r in range(4):
            d_exp[r, c] = d_col[r]
    product = _quat_multiply(rotation, quat[j])
    norm = math.sqrt(_dot(product, product))
    right, left = np.zeros((4, 4)), np.zeros((4, 4))  # a * q = right @ a, rotation * b = left @ b
    for c in range(4):
        e4[0] = e4[1] = e4[2] = e4[3] = 0.0
        e4[c] = 1.0
        by_right, by_left = _quat_multiply(e4, quat[j]), _quat_multiply(rotation, e4)
        for r in range(4):
            right[r, c], left[r, c] = by_right[r], by_left[r]
    d_product = _mm(_mm(right, d_exp), d_disp[6 * j + 3 : 6 * j + 6])
    project = np.empty((4, 4))  # I - unit unitᵀ: the tangent of the normalization
    for r in range(4):
        for c in range(4):
            d_product[r, 3 * count + 4 * j + c] += left[r, c]
            project[r, c] = (1.0 if r == c else 0.0) - (product[r] / norm) * (product[c] / norm)
    out = _mm(project, d_product)
    for r in range(4):
        for c in range(out.shape[1]):
            out[r, c] /= norm
    return out


@njit(cache=True)
def _mass_tangent(j, mass, inv, wrench, minv_jt, h):
    """d M⁻¹Jᵀ (6J, 3k) and d v_free (6J,) along the mass of object j (its inertia scales with it:
    ``M⁻¹`` scales with ``1 / m``, the gyroscopic term of the free angular velocity does not change)."""
    count = mass.shape[0]
    d_minv_jt = np.zeros(minv_jt.shape)
    for r in range(6 * j, 6 * j + 6):
        for col in range(minv_jt.shape[1]):
            d_minv_jt[r, col] = -minv_jt[r, col] / mass[j]
    d_v_free = np.zeros(6 * count)
    turn = _mv(inv[j], wrench[j, 3:])
    for c in range(3):
        d_v_free[6 * j + c] = -h * wrench[j, c] / mass[j] ** 2
        d_v_free[6 * j + 3 + c] = -h / mass[j] * turn[c]
    return d_minv_jt, d_v_free


@njit(cache=True)
def _parameter_inputs(work, wrench, scene, params, h, regularization):
    """Right-hand sides (3k + k, C) and ``d v_next`` without the impulse change (6J, C) of the
    parameter columns (``params``: kind per column (C,): 0 mass, 1 friction, 2 restitution;
    object of a mass column (C,); d slot coefficient / d column (S, C)).

    Friction enters the cone rows of sliding contacts, restitution the bias of bouncing ones.
    """
    mass, slot_e = scene[0], scene[6]
    kinds, owners, slot_d = params
    unit, rot, gap, keep, jac, frames, inv, inertia, minv_jt, v_free, a, b, mu, z, modes, bouncing, v_next = work[:17]
    count, k, columns = mass.shape[0], keep.shape[0], kinds.shape[0]
    m = 3 * k
    x = z[:m]
    rhs, dv = np.zeros((m + k, columns)), np.zeros((6 * count, columns))
    approach = _mv(jac, v_free)
    for col in range(columns):
        if kinds[col] == 1:
            for i in range(k):
                if _sliding(modes, mu, i):
                    rhs[m + i, col] = mu[i] * x[3 * i] ** 2 * slot_d[keep[i], col]
            continue
        if kinds[col] == 2:
            for i in range(k):
                if bouncing[i]:
                    rhs[3 * i, col] = -approach[3 * i] * slot_d[keep[i], col]  # b_n = (1 + e) approach
            continue
        d_minv_jt, d_v_free = _mass_tangent(owners[col], mass, inv, wrench, minv_jt, h)
        d_a = _mm(jac, d_minv_jt)
        d_b = _mv(jac, d_v_free)
        if k > 0:
            _add_diagonal(d_a, regularization * _trace(d_a) / m)
        for i in range(k):
            if bouncing[i]:
                d_b[3 * i] *= 1.0 + slot_e[keep[i]]
        d_ax = _affine(d_a, x, d_b)
        for r in range(m):
            rhs[r, col] = -d_ax[r]
        d_v = _affine(d_minv_jt, x, d_v_free)
        for r in range(6 * count):
            dv[r, col] = d_v[r]
    return rhs, dv


@njit(cache=True)
def _input_tangents(col, pos, quat, ang, wrench, scene, options, params, work, inputs):
    """Tangents of the contact Jacobian (3k, 6J), M⁻¹Jᵀ (6J, 3k), gaps (k,) and free velocity (6J,)
    along input column ``col`` (state, wrench, parameter), for the bounce correction."""
    count, h = pos.shape[0], options[0]
    jac, inv, minv_jt = work[4], work[6], work[8]
    k = work[3].shape[0]
    if col < 7 * count:
        tangents = _geometric_tangent(col, pos, quat, ang, wrench, scene, options, work)
        return tangents[4], tangents[5], tangents[6], tangents[3]
    d_jac, d_gap = np.zeros((3 * k, 6 * count)), np.zeros(k)
    if col < 19 * count:
        return d_jac, np.zeros(minv_jt.shape), d_gap, inputs[:, col - 7 * count].copy()
    param = col - 19 * count
    if params[0][param] == 0:
        d_minv_jt, d_v_free = _mass_tangent(params[1][param], scene[0], inv, wrench, minv_jt, h)
        return d_jac, d_minv_jt, d_gap, d_v_free
    return d_jac, np.zeros(minv_jt.shape), d_gap, np.zeros(6 * count)


@njit(cache=True)
def _state_rows(quat, displacement, dv, d_disp, count):
    """d next state (13J, D) from the velocity and displacement derivatives (6J, D) each, impulse change included."""
    dims = dv.shape[1]
    out = np.zeros((13 * count, dims))
    for j in range(count):
        for c in range(3):
            out[3 * j + c, 3 * j + c] = 1.0
            for col in range(dims):
                out[3 * j + c, col] += d_disp[6 * j + c, col]
                out[7 * count + 3 * j + c, col] = dv[6 * j + c, col]
                out[10 * count + 3 * j + c, col] = dv[6 * j + 3 + c, col]
        rows = _orientation_rows(quat, displacement, d_disp, count, j)
        for r in range(4):
            for col in range(dims):
                out[3 * count + 4 * j + r, col] = rows[r, col]
    return out


@njit(cache=True)
def _step_jacobian(pos, quat, lin, ang, wrench, scene, options, warm, params):
    """One step (no substeps) and its Jacobian (13J, 19J + C) in [state, wrench, parameters]."""
    state, status, solution, warm_hit, work = _forward(pos, quat, lin, ang, wrench, scene, options, warm)
    unit, rot, gap, keep, jac, frames, inv, inertia, minv_jt, v_free, a, b, mu, z, modes, bouncing, v_next = work[:17]
    mass = scene[0]
    count, k, h = pos.shape[0], keep.shape[0], options[0]
    m, geo, par = 3 * k, 7 * count, 19 * count
    dims = par + params[0].shape[0]
    x = z[:m]
    rhs = np.zeros((m + k, dims))
    dv = np.zeros((6 * count, dims))  # d v_next, without the impulse change
    for d in range(geo):
        d_a, d_b, d_minv_x, d_v_free = _geometric_tangent(d, pos, quat, ang, wrench, scene, options, work)[:4]
        d_ax = _affine(d_a, x, d_b)
        for r in range(m):
            rhs[r, d] = -d_ax[r]
        for r in range(6 * count):
            dv[r, d] = d_v_free[r] + d_minv_x[r]
    inputs = _velocity_inputs(ang, mass, inv, inertia, h)
    j_inputs = _mm(jac, inputs)
    for i in range(k):
        if bouncing[i]:  # b_n = (1 + e) approach
            for c in range(j_inputs.shape[1]):
                j_inputs[3 * i, c] *= 1.0 + scene[6][keep[i]]
    p_rhs, p_dv = _parameter_inputs(work, wrench, scene, params, h, options[8])
    for c in range(par - geo):
        for r in range(6 * count):
            dv[r, geo + c] = inputs[r, c]
        for r in range(m):
            rhs[r, geo + c] = -j_inputs[r, c]
    for c in range(dims - par):
        for r in range(6 * count):
            dv[r, par + c] = p_dv[r, c]
        for r in range(m + k):
            rhs[r, par + c] = p_rhs[r, c]
    for r in range(m):
        if not _velocity_row(modes, mu, r):
            for c in range(dims):
                rhs[r, c] = 0.0
    if k > 0:
        ok, dz = _solve(_kkt(a, mu, modes, z), rhs)
        status = status if ok else APPROXIMATE
        dv_impulse = _mm(minv_jt, dz[:m])
        for r in range(6 * count):
            for c in range(dims):
                dv[r, c] += dv_impulse[r, c]
    d_disp = np.empty((6 * count, dims))
    for r in range(6 * count):
        for c in range(dims):
            d_disp[r, c] = h * dv[r, c]
    if bouncing.any():
        for c in range(dims):
            d_jac, d_minv_jt, d_gap, d_v_free = _input_tangents(c, pos, quat, ang, wrench, scene, options, params, work, inputs)
            d_fix = _correction_tangent(jac, minv_jt, v_free, v_next, _take(gap, keep), h, work[21], d_jac, d_minv_jt, d_gap,
                                        d_v_free, dv[:, c].copy())
            for r in range(6 * count):
                d_disp[r, c] += d_fix[r]
    return state, status, solution, warm_hit, _state_rows(quat, work[20], dv, d_disp, count)


@njit(cache=True)
def jacobian_kernel(pos, quat, lin, ang, wrench, scene, options, warm, params):
    """Compiled step (substeps included) and its Jacobians.

    Returns:
        ``(state, status, solution, warm hit, jac (13J, 19J + C))`` (solution: see :func:`step_kernel`):
        d next ``[position, orientation,
        linear, angular]`` / d ``[position, orientation, linear, angular, wrench, parameters]``;
        substeps' Jacobians chained (the wrench and parameters are those of every substep).
    """
    steps, fine = _substeps(pos, quat, lin, ang, scene, options)
    state, status, solution, hit, jac = _step_jacobian(pos, quat, lin, ang, wrench, scene, fine, warm, params)
    n = 13 * pos.shape[0]
    for _ in range(steps - 1):
        state, flag, solution, first, step = _step_jacobian(state[0], state[1], state[2], state[3], wrench, scene, fine,
                                                            solution[0], params)
        chained = _mm(step[:, :n].copy(), jac)
        for r in range(n):
            for c in range(n, jac.shape[1]):
                chained[r, c] += step[r, c]
        jac, status, hit = chained, max(status, flag), hit and first
    return state, status, solution, hit, jac


# ---------------------------------------------------------------- Python side


def _covered_pair(pair):
    """Whether a pair's contacts are compiled: an object on a static plane, or two boxes."""
    if pair.a.kind == "object" and pair.b.kind == "static":
        return isinstance(pair.b.shape, Plane)
    return pair.a.kind == pair.b.kind == "object" and isinstance(pair.a.shape, Box) and isinstance(pair.b.shape, Box)


def fast_support(world):
    """Why ``world`` (a ContactWorld) has no compiled step, or None when it has one."""
    if world.options.solver != "cone":
        return f"solver {world.options.solver!r} (only 'cone' is compiled)"
    if world.robot is not None or world.proxies:
        return "a robot (only free objects are compiled)"
    for pair in world.pairs:
        if not _covered_pair(pair):
            return f"pair {pair.name} (only object-plane and box-box pairs are compiled)"
    if any(value.dim() != 1 for value in (*world.params.values(), *world.pair_params.values())):
        return "batched parameters"
    return None


def _slot_rows(shape, plane):
    """``(local points (c, 3) [m], radius [m])`` of an object's slots against a plane (detection.py order)."""
    if isinstance(shape, Box):
        signs = [[sx, sy, sz] for sx in (-1.0, 1.0) for sy in (-1.0, 1.0) for sz in (-1.0, 1.0)]
        return np.array(signs) * np.array(shape.half_extents), 0.0
    if isinstance(shape, Sphere):
        return np.zeros((1, 3)), shape.radius
    if isinstance(shape, Capsule):
        return np.array([[0.0, 0.0, -shape.half_length], [0.0, 0.0, shape.half_length]]), shape.radius
    raise ContactError(f"no compiled contact for {type(shape).__name__}")


def _numpy(value):
    return np.ascontiguousarray(value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value, dtype=np.float64)


def _scene(world):
    """The compiled scene of a covered world: ``(mass (J,) [kg], principal inertia (J, 3) [kg·m²],
    plane slot rows (S, 10), slot object a (S,), slot object b or -1 (S,), slot friction (S,),
    slot restitution (S,), bounding radii (J,) [m], box half extents (J, 3) [m], pairs (P, 5))``."""
    mass = _numpy(world.params["mass"])
    rows, owner, other, mu, restitution, pairs = [], [], [], [], [], []
    for index, pair in enumerate(world.pairs):
        if pair.b.kind == "object":
            local, radius, plane_rows = np.zeros((pair.count, 3)), 0.0, [[0.0] * 6] * pair.count
            other += [pair.b.index] * pair.count
        else:
            plane = world.static[pair.b.index]
            local, radius = _slot_rows(pair.a.shape, plane)
            plane_rows = [[*_numpy(_plane_rotation(plane.orientation))[:, 2], *plane.position]] * len(local)
            other += [-1] * len(local)
        rows += [[*point, radius, *plane_row] for point, plane_row in zip(local, plane_rows)]
        owner += [pair.a.index] * len(local)
        mu += [float(world.pair_value("friction", index))] * len(local)
        restitution += [float(world.pair_value("restitution", index))] * len(local)
        pairs.append([BOX_PAIR if pair.b.kind == "object" else PLANE_PAIR, pair.a.index,
                      pair.b.index if pair.b.kind == "object" else -1, pair.start, pair.count])
    halves = [o.shape.half_extents if isinstance(o.shape, Box) else (0.0, 0.0, 0.0) for o in world.objects]
    return (mass, mass[:, None] * _numpy(world.unit_inertia), np.array(rows, dtype=np.float64).reshape(-1, 10),
            np.array(owner, dtype=np.int64), np.array(other, dtype=np.int64), np.array(mu, dtype=np.float64),
            np.array(restitution, dtype=np.float64), np.array([bounding_radius(o.shape) for o in world.objects]),
            np.array(halves, dtype=np.float64).reshape(-1, 3), np.array(pairs, dtype=np.int64).reshape(-1, 5))


def warm_info(solution):
    """A contact solution of :class:`FastContactStep` (``(modes (S,), impulse (S, 3), multiplier (S,))``
    of a call, as its :attr:`~FastContactStep.solution`) as the ``warm`` of :meth:`ContactWorld.step`
    (a StepInfo holding only that solution): the torch step then starts from what a torch rollout
    would have passed it."""
    modes, impulse, multiplier = (torch.from_numpy(np.array(v)) for v in solution)
    flags = (torch.tensor(False), torch.tensor(True), torch.tensor(False))
    return StepInfo(None, impulse, ConeSolution(impulse, multiplier, modes, *flags), None, None)


def _max_rule_share(world, pair, kind, side):
    """d pair coefficient / d the object on ``side`` ("a" or "b") of the pair under the max rule
    (torch.maximum's gradient: 1 if larger, half on a tie, else 0); 0 if the pair's own value is set."""
    if kind in pair.explicit:
        return 0.0
    values = []
    for geom in (pair.a, pair.b):
        if geom.kind == "object":
            values.append(world.params[kind][geom.index].item())
        else:
            values.append(float(getattr(world.static[geom.index], kind)))
    mine, theirs = values if side == "a" else values[::-1]
    return 1.0 if mine > theirs else (0.5 if mine == theirs else 0.0)


def _parameter_table(world, names, slot_count):
    """``(kinds (C,), mass owners (C,), d slot coefficient / d parameter (S, C))`` of the parameter
    columns ``names`` (object parameters, or pair coefficients: 1 on the pair's slots)."""
    kinds, owners = np.zeros(len(names), dtype=np.int64), np.full(len(names), -1, dtype=np.int64)
    slot_d = np.zeros((slot_count, len(names)))
    codes = {"mass": 0, "friction": 1, "restitution": 2}
    for col, name in enumerate(names):
        table, kind, index = world.locate_parameter(name)
        kinds[col] = codes[kind]
        if table == "pair":
            pair = world.pairs[index]
            slot_d[pair.start : pair.start + pair.count, col] = 1.0
            continue
        if kind == "mass":
            owners[col] = index
            continue
        for pair in world.pairs:
            for side, geom in (("a", pair.a), ("b", pair.b)):
                if geom.kind == "object" and geom.index == index:
                    slot_d[pair.start : pair.start + pair.count, col] = _max_rule_share(world, pair, kind, side)
    return kinds, owners, slot_d


class FastContactStep:
    """Compiled :meth:`ContactWorld.step` of a covered world (see :func:`fast_support`), float64.

    A snapshot of the world's parameters (rebuild after :meth:`ContactWorld.with_parameters`).
    States are numpy arrays for J objects: position (J, 3) [m], orientation (J, 4) quaternion
    (w, x, y, z), linear (J, 3) [m/s] and angular (J, 3) [rad/s] velocity in the world; the
    wrench (J, 6) is ``[force (N), torque (N·m)]`` in the world.

    Args:
        world: A ContactWorld that :func:`fast_support` covers.
        parameters: Names of the parameter columns of :meth:`jacobians` (object parameters and
            pair coefficients); default ``world.parameter_names()``.

    Attributes:
        status: Of the last call: :data:`OK`, or :data:`APPROXIMATE` (no contact solution passed
            the KKT check: the next state is the torch step's, from Algorithm 1's approximate
            impulses, but the Jacobians are not valid; take them from the torch step,
            warm-started with :func:`warm_info`).
        modes: Per-slot contact modes of the last call (warm start of the next), int8 (S,).
        impulse: Per-slot contact impulses ``[n, t1, t2]`` of the last call [N·s], (S, 3).
        multiplier: Per-slot cone multipliers of the last call, (S,).
        warm_hit: The warm modes solved the last call on the first try.
    """

    @property
    def solution(self):
        """``(modes, impulse, multiplier)`` of the last call (see :func:`warm_info`)."""
        return self.modes, self.impulse, self.multiplier

    def __init__(self, world, parameters=None):
        reason = fast_support(world)
        if reason is not None:
            raise ContactError(f"no compiled contact step for this world: {reason}")
        self.count = len(world.objects)
        self.scene = _scene(world)
        self.parameters = tuple(world.parameter_names() if parameters is None else parameters)
        self.table = _parameter_table(world, self.parameters, self.scene[2].shape[0])
        options = world.options
        # [dt, margin, baumgarte, bounce threshold, gravity (3), impact substeps, regularization]: read by the kernels
        self.options = np.array([world.dt, options.margin, options.baumgarte, options.bounce_threshold, *_numpy(world.gravity),
                                 options.impact_substeps, options.regularization], dtype=np.float64)
        self.status, self.warm_hit = OK, False
        self.modes, self.impulse, self.multiplier = np.zeros(0, dtype=np.int8), np.zeros((0, 3)), np.zeros(0)

    def _args(self, position, orientation, linear, angular, wrench, warm):
        wrench = np.zeros((self.count, 6)) if wrench is None else _numpy(wrench).reshape(self.count, 6)
        warm = np.zeros(0, dtype=np.int8) if warm is None else np.asarray(warm, dtype=np.int8)
        state = [_numpy(v).reshape(self.count, n) for v, n in ((position, 3), (orientation, 4), (linear, 3), (angular, 3))]
        return (*state, wrench, self.scene, self.options, warm)

    def step(self, position, orientation, linear, angular, wrench=None, warm=None):
        """Next ``(position, orientation, linear, angular)``; ``warm``: :attr:`modes` of the previous step."""
        state, self.status, solution, self.warm_hit = step_kernel(*self._args(position, orientation, linear, angular,
                                                                             wrench, warm))
        self.modes, self.impulse, self.multiplier = solution
        return state

    def step_state(self, state, wrench=None, warm=None):
        """:meth:`step` on a :class:`~diffsim_ros.sim.contact.state.WorldState` (unbatched); returns a
        WorldState (float64 tensors, no autograd: use :meth:`jacobians` for derivatives).
        """
        out = self.step(state.position, state.orientation, state.linear_velocity, state.angular_velocity, wrench, warm)
        return WorldState(*(torch.from_numpy(v) for v in out))

    def jacobians(self, position, orientation, linear, angular, wrench=None, warm=None):
        """``(next state, d_state (13J, 13J), d_wrench (13J, 6J), d_parameters (13J, C))``.

        Rows and state columns are ``[position (3J), orientation (4J), linear (3J), angular (3J)]``,
        object-major within each block; wrench columns ``[force, torque]`` per object; parameter
        columns :attr:`parameters` (mass [kg], friction, restitution).
        """
        state, self.status, solution, self.warm_hit, jac = jacobian_kernel(
            *self._args(position, orientation, linear, angular, wrench, warm), self.table)
        self.modes, self.impulse, self.multiplier = solution
        n = 13 * self.count
        return state, jac[:, :n], jac[:, n : n + 6 * self.count], jac[:, n + 6 * self.count :]


def _plane_rotation(orientation):
    return quat_to_matrix(quat_normalize(torch.tensor(orientation, dtype=torch.float64)))
