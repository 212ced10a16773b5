"""Net-torque lookup maps built with the differentiable simulator (Liu et al., §IV-C, Fig. 12).

For joint j, the map answers: which torque takes the joint from angular velocity ``omega``
to ``q_j + dtheta`` in one simulator step ``dt`` (the other joints at rest, held in place)?
The key is ``(dtheta, omega)`` on a regular grid (paper: dt = 0.01 s, |omega| <= 0.5 rad/s,
|dtheta| <= 0.00625 rad).

**Conditioning on the other joints.** The net torque depends on the configuration in two
ways, handled separately:

1. The static holding torque ``h(q) = g(q) - tau_spring(q)`` (gravity, payload, springs)
   depends on every joint. It is *not* tabulated: the map stores the net torque minus
   ``h`` at the start configuration, and the lookup adds ``h`` back from the compiled
   model (:func:`~diffsim_ros.control.gravity.holding_torques`), exactly. (Evaluating h at
   the start is exact for a one-substep simulator and measured no worse than the mid-step
   or time-averaged configuration with five substeps.)
2. What remains is the dynamic part: ``M_jj(q) * acceleration + damping(omega)`` (the
   Coriolis term of a joint's own velocity on itself vanishes, since M_jj does not depend on
   q_j). It depends on the other joints only through the joint's effective inertia
   ``M_jj(q)``, which varies 40-fold for Baxter's s0. So each joint's map has a third axis:
   the inertia of ``inertia_contexts`` configurations chosen at the quantiles of M_jj over
   random configurations; lookups interpolate linearly along it (exact for a term affine
   in M_jj) and extrapolate linearly by at most ``INERTIA_EXTRAPOLATION`` of the axis span
   beyond its ends (random contexts never reach the extremes). ``inertia_contexts=1``
   gives the paper's unconditioned map at the median inertia, for comparison;
   :func:`validate_torque_map` measures both (benchmarks/RESULTS.md, "control experiments").

The lookup is a compiled trilinear interpolation; angle and velocity keys outside the grid
are clamped to its edges (the grid bounds the torque the map can ask for).

**Following the calibration.** Because h(q) and M_jj(q) come from the model at lookup time,
a map keeps serving a model whose parameters changed (payload, masses, springs): it is
*conditioned* on the new values through both. What is baked into the table (damping,
friction, the substeps' nonlinearity) is only approximate until the map is rebuilt:
:meth:`TorqueMap.check_model` tells exact from conditioned, and :func:`rebuild_torque_map`
builds the exact map for the new model with the same grid and simulator (the controller node
does so in the background and swaps it in). A different structure (joints, kinematic tree,
spring layout, gravity) is refused.
"""

import concurrent.futures
import dataclasses
import hashlib
import json
import multiprocessing
import os
import pickle
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.control.errors import TorqueMapError
from diffsim_ros.control.gravity import holding_torques
from diffsim_ros.control.jacobians import rowwise_jacobian
from diffsim_ros.control.vectors import to_numpy
from diffsim_ros.outputs import atomic_file
from diffsim_ros.resources import describe_path
from diffsim_ros.sim.factory import make_simulator
from diffsim_ros.model.poses import random_poses

from diffsim_ros._compiled import njit


__all__ = [
    "FORMAT_VERSION",
    "MAX_MAP_TORQUE",
    "TorqueMap",
    "TorqueMapGrid",
    "build_torque_map",
    "describe_simulator",
    "joint_inertias",
    "parameter_hash",
    "rebuild_torque_map",
    "rebuild_torque_map_in_process",
    "simulator_settings",
    "solve_one_step_torques",
    "structure_hash",
    "validate_torque_map",
]

FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # version 1 has no structure hash: it serves only its exact model
MAX_MAP_TORQUE = 1e5
"""[N·m] Largest plausible net torque in a map (a corrupted or hand-edited file holds more)."""
INERTIA_EXTRAPOLATION = 0.1
"""Largest linear extrapolation along the inertia axis, as a fraction of its span."""


@dataclass(frozen=True)
class TorqueMapGrid:
    """Grid and build settings of a torque map.

    Attributes:
        dt: Simulator step the map is built for [s] (= the simulator's dt).
        max_angle_step: Largest |dtheta| key [rad].
        max_velocity: Largest |omega| key [rad/s].
        angle_points: Grid points along dtheta (odd: 0 is on the grid).
        velocity_points: Grid points along omega (odd: 0 is on the grid).
        inertia_contexts: Configurations per joint along the inertia axis (1: unconditioned).
        context_pool: Random configurations the contexts are chosen from.
        limit_margin: Contexts stay this far inside the position limits [rad].
        newton_iterations: Most Newton (or chord) iterations of the direct optimization.
        tolerance: Goal-position residual [rad] at which Newton stops.
        seed: Seed of the context pool.
        batch_size: Problems optimized together (bounds memory: a Newton iteration through
            the PBD simulator's autograd graph takes ~10 MB per problem).
    """

    dt: float = 0.01
    max_angle_step: float = 0.00625
    max_velocity: float = 0.5
    angle_points: int = 21
    velocity_points: int = 21
    inertia_contexts: int = 5
    context_pool: int = 512
    limit_margin: float = 0.3
    newton_iterations: int = 10
    tolerance: float = 1e-11
    seed: int = 0
    batch_size: int = 256

    def axes(self):
        """``(angle_axis (A,) [rad], velocity_axis (V,) [rad/s])``."""
        return (
            np.linspace(-self.max_angle_step, self.max_angle_step, self.angle_points),
            np.linspace(-self.max_velocity, self.max_velocity, self.velocity_points),
        )

    def check(self):
        """Raise TorqueMapError for unusable settings."""
        if not (self.dt > 0 and self.max_angle_step > 0 and self.max_velocity > 0):
            raise TorqueMapError("torque map dt, max_angle_step and max_velocity must be positive")
        if self.angle_points < 2 or self.velocity_points < 2 or self.inertia_contexts < 1:
            raise TorqueMapError("torque map needs >= 2 angle and velocity points and >= 1 inertia context")
        if self.context_pool < self.inertia_contexts:
            raise TorqueMapError("context_pool must be at least inertia_contexts")
        if self.batch_size < 1:
            raise TorqueMapError("batch_size must be >= 1")


def _hash(model, with_parameters):
    digest = hashlib.sha256()
    structure = [model.name, list(model.joint_names), model.payload_frame, list(model.spring_joints)]
    others = [element for element in model.spring_layout() if element[0] != "lever"]
    digest.update(json.dumps(structure + ([others] if others else [])).encode())  # lever-only: hashes as before
    tensors = [model.gravity, model.joint_axis, model.joint_origin_rot]
    if with_parameters:
        tensors += [getattr(model.params, f.name) for f in dataclasses.fields(model.params)]
    for tensor in tensors:
        digest.update(np.ascontiguousarray(to_numpy(tensor)).tobytes())
    return digest.hexdigest()


def parameter_hash(model):
    """SHA-256 (hex) of a model's structure and parameter values: identifies what a map is exact for."""
    return _hash(model, True)


def structure_hash(model):
    """SHA-256 (hex) of a model's structure without the parameter values: what a map can serve at all."""
    return _hash(model, False)


def describe_simulator(simulator):
    """One line naming a simulator and its settings (stored in map metadata)."""
    settings = {k: v for k, v in vars(simulator).items() if isinstance(v, (int, float, str, bool)) and k != "model"}
    extra = getattr(simulator, "settings", None)
    if dataclasses.is_dataclass(extra):
        settings.update(dataclasses.asdict(extra))
    return f"{type(simulator).__name__}({', '.join(f'{k}={v}' for k, v in sorted(settings.items()))})"


def simulator_settings(description):
    """``(kind, substeps)`` of a :func:`describe_simulator` line, for rebuilding with the same simulator.

    Raises:
        TorqueMapError: A description this package did not write.
    """
    kinds = {"PBDSimulator": "pbd", "RigidBodySimulator": "rigid"}
    name, _, rest = description.partition("(")
    settings = dict(item.split("=", 1) for item in rest.rstrip(")").split(", ") if "=" in item)
    try:
        return kinds[name], int(settings["substeps"])
    except (KeyError, ValueError):
        raise TorqueMapError(f"torque map simulator {description!r} cannot be rebuilt (unknown simulator)") from None


def joint_inertias(fast, q):
    """Diagonal of the joint-space inertia M(q) [kg·m² or kg], shape (n,), compiled.

    Args:
        fast: FastDynamics snapshot of the model.
        q: Joint positions [rad or m], shape (n,).
    """
    return fast.mass_matrix_diagonal(q)


# ---------------------------------------------------------------------- direct optimization
def solve_one_step_torques(simulator, q, qd, q_goal, tau0, iterations=6, tolerance=1e-11, jacobian=None):
    """Direct optimization: torques that take ``(q, qd)`` to ``q_goal`` in one simulator step.

    Newton's method on the square residual ``q_next(tau) - q_goal``, with the Jacobian
    ``d q_next / d tau`` from autograd through the simulator; or, given a fixed
    ``jacobian``, chord iterations (plain forward steps, no autograd graph: far cheaper and
    lighter, converging linearly where the map is nearly affine in tau). Problems the chord
    iterations leave above ``tolerance`` are finished by Newton.

    Args:
        simulator: JointSpaceSimulator (its ``dt`` is the step).
        q: Start positions [rad], shape (..., n).
        qd: Start velocities [rad/s], shape (..., n).
        q_goal: Goal positions after one step [rad], shape (..., n).
        tau0: Initial torques [N·m], shape (..., n).
        iterations: Most Newton (or chord) iterations.
        tolerance: Stop when every goal residual is below this [rad].
        jacobian: Fixed Jacobian [rad/(N·m)], shape (..., n, n), for chord iterations.

    Returns:
        ``(tau (..., n) [N·m], residual (..., n) [rad])``, detached.
    """
    tau = tau0.detach().clone()
    if jacobian is None:
        return _newton(simulator, q, qd, q_goal, tau, iterations, tolerance)
    with torch.no_grad():
        for _ in range(iterations):
            residual = simulator.joint_step(q, qd, tau)[0] - q_goal
            if float(residual.abs().max()) < tolerance:
                return tau, residual
            tau = tau - torch.linalg.solve(jacobian, residual.unsqueeze(-1)).squeeze(-1)
        residual = simulator.joint_step(q, qd, tau)[0] - q_goal
    bad = residual.abs().amax(-1) >= tolerance
    if bool(bad.any()):
        tau, residual = tau.clone(), residual.clone()
        tau[bad], residual[bad] = _newton(simulator, q[bad], qd[bad], q_goal[bad], tau[bad], iterations, tolerance)
    return tau, residual


def _newton(simulator, q, qd, q_goal, tau, iterations, tolerance):
    """Newton iterations with a fresh autograd Jacobian each: ``(tau, residual)``."""
    n = q.shape[-1]

    def step(t):
        return simulator.joint_step(q.unsqueeze(-2), qd.unsqueeze(-2), t)[0]

    for _ in range(iterations):
        q_next, jac = rowwise_jacobian(step, tau, n)
        residual = q_next - q_goal
        if float(residual.abs().max()) < tolerance:
            return tau, residual
        tau = tau - torch.linalg.solve(jac, residual.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        residual = simulator.joint_step(q, qd, tau)[0] - q_goal
    return tau, residual


def _holding_torch(model, q):
    return dyn.gravity_torques(model, q) - dyn.spring_torques(model, q)


def _single_joint_problem(model, contexts, joint, dtheta, omega):
    """Start state and goal of joint ``joint`` moving alone from each context.

    Args:
        contexts: (B, n) configurations; dtheta, omega: (B,) keys.

    Returns:
        ``(q, qd, q_goal)``, each (B, n) tensors of the model's dtype/device.
    """
    unit = torch.zeros(model.nq, dtype=model.dtype, device=model.device)
    unit[joint] = 1.0
    q = torch.as_tensor(contexts, dtype=model.dtype, device=model.device)
    dtheta = torch.as_tensor(dtheta, dtype=model.dtype, device=model.device)[:, None]
    omega = torch.as_tensor(omega, dtype=model.dtype, device=model.device)[:, None]
    return q, omega * unit, q + dtheta * unit


def _net_residual(simulator, grid, contexts, joint, dtheta, omega, jacobians=None):
    """Optimized net torque of ``joint`` minus the holding torque [N·m], (B,), and the worst goal residual.

    Args:
        contexts: (B, n) start configurations; dtheta, omega: (B,) keys.
        jacobians: Optional (B, n, n) fixed Jacobians for chord iterations (else Newton).
    """
    values, worst = [], 0.0
    for start in range(0, len(contexts), grid.batch_size):
        chunk = slice(start, start + grid.batch_size)
        jac = None if jacobians is None else jacobians[chunk]
        value, residual = _net_residual_batch(simulator, grid, contexts[chunk], joint, dtheta[chunk], omega[chunk], jac)
        values.append(value)
        worst = max(worst, residual)
    return np.concatenate(values), worst


def _guess(model, grid, q, qd, q_goal):
    """Holding torque and the rigid-body estimate of the accelerating torque: ``(hold, guess)``."""
    with torch.no_grad():
        hold = _holding_torch(model, q)
        inertia = torch.diagonal(dyn.mass_matrix(model, q), dim1=-2, dim2=-1)
        return hold, hold + inertia * ((q_goal - q) / grid.dt - qd) / grid.dt


def _net_residual_batch(simulator, grid, contexts, joint, dtheta, omega, jacobians):
    q, qd, q_goal = _single_joint_problem(simulator.model, contexts, joint, dtheta, omega)
    hold, guess = _guess(simulator.model, grid, q, qd, q_goal)
    tau, residual = solve_one_step_torques(
        simulator, q, qd, q_goal, guess, grid.newton_iterations, grid.tolerance, jacobians
    )
    return to_numpy(tau[:, joint] - hold[:, joint]), float(residual.abs().max())


def _context_jacobians(simulator, configs):
    """d q_next / d tau at rest at each context with the holding torque, (K, n, n)."""
    model = simulator.model
    q = torch.as_tensor(configs, dtype=model.dtype, device=model.device)
    hold = _holding_torch(model, q).detach()
    zero = torch.zeros_like(q)
    _, jac = rowwise_jacobian(lambda t: simulator.joint_step(q.unsqueeze(-2), zero.unsqueeze(-2), t)[0], hold, model.nq)
    return jac


# ---------------------------------------------------------------------- the map
@njit(cache=True)
def _cell(x, lo, step, points):
    """Clamped grid cell and fraction of coordinate x on a regular axis."""
    u = (min(max(x, lo), lo + step * (points - 1)) - lo) / step
    i = min(int(u), points - 2)
    return i, u - i


@njit(cache=True)
def _lookup(angle_lo, angle_step, velocity_lo, velocity_step, inertia_axis, extrapolation, residual, dtheta, omega, inertia):
    """Trilinear lookup of every joint's residual torque [N·m], (n,)."""
    n, contexts, angles, velocities = residual.shape
    out = np.empty(n)
    for j in range(n):
        ia, fa = _cell(dtheta[j], angle_lo, angle_step, angles)
        iv, fv = _cell(omega[j], velocity_lo, velocity_step, velocities)
        k0, fk = 0, 0.0
        if contexts > 1:
            first, last = inertia_axis[j, 0], inertia_axis[j, contexts - 1]
            reach = extrapolation * (last - first)
            m = min(max(inertia[j], first - reach), last + reach)
            while k0 < contexts - 2 and m > inertia_axis[j, k0 + 1]:
                k0 += 1
            span = inertia_axis[j, k0 + 1] - inertia_axis[j, k0]
            fk = (m - inertia_axis[j, k0]) / span if span > 0 else 0.0
        value = 0.0
        for dk in range(2 if contexts > 1 else 1):
            table = residual[j, k0 + dk]
            bilinear = (
                (1 - fa) * (1 - fv) * table[ia, iv]
                + fa * (1 - fv) * table[ia + 1, iv]
                + (1 - fa) * fv * table[ia, iv + 1]
                + fa * fv * table[ia + 1, iv + 1]
            )
            value += (fk if dk else (1.0 - fk if contexts > 1 else 1.0)) * bilinear
        out[j] = value
    return out


@dataclass(frozen=True)
class TorqueMap:
    """Per-joint net-torque maps with their metadata (see the module docstring).

    Attributes:
        robot: Model name.
        joint_names: Joint order, length n.
        parameter_hash: :func:`parameter_hash` of the model the map was built for.
        structure_hash: :func:`structure_hash` of that model ('' in version-1 files: the map
            then serves only its exact model).
        grid: TorqueMapGrid it was built with.
        simulator: :func:`describe_simulator` of the simulator used.
        inertia_axis: Joint inertia M_jj of each context [kg·m²], (n, K), non-decreasing.
        contexts: The context configurations [rad], (n, K, n).
        residual: Net torque minus holding torque h(q) [N·m], (n, K, A, V).
        build_seconds: Wall time of the build [s].
        max_goal_residual: Largest goal-position error of the optimized torques [rad].
    """

    robot: str
    joint_names: tuple
    parameter_hash: str
    grid: TorqueMapGrid
    simulator: str
    inertia_axis: np.ndarray
    contexts: np.ndarray
    residual: np.ndarray
    build_seconds: float = 0.0
    max_goal_residual: float = 0.0
    structure_hash: str = ""

    @property
    def dt(self):
        return self.grid.dt

    @property
    def angle_axis(self):
        return self.grid.axes()[0]

    @property
    def velocity_axis(self):
        return self.grid.axes()[1]

    # ------------------------------------------------------------------ lookup
    def lookup(self, dtheta, omega, inertia):
        """Residual (dynamic) torques [N·m], (n,), for per-joint keys, each (n,).

        Args:
            dtheta: Angle step to the goal [rad] (clamped to the grid).
            omega: Angular velocity [rad/s] (clamped to the grid).
            inertia: Joint inertia M_jj(q) [kg·m²] (clamped to the contexts' range widened by
                ``INERTIA_EXTRAPOLATION``).
        """
        g = self.grid
        return _lookup(
            -g.max_angle_step,
            2 * g.max_angle_step / (g.angle_points - 1),
            -g.max_velocity,
            2 * g.max_velocity / (g.velocity_points - 1),
            self.inertia_axis,
            INERTIA_EXTRAPOLATION,
            self.residual,
            np.asarray(dtheta, dtype=np.float64),
            np.asarray(omega, dtype=np.float64),
            np.asarray(inertia, dtype=np.float64),
        )

    def torques(self, fast, q, qd, q_goal):
        """Net torques [N·m], (n,), to move each joint from ``(q, qd)`` towards ``q_goal`` in ``dt``.

        Each joint's key is its own ``(clamp(q_goal - q), qd)``; the holding torque h(q) is
        added back from the compiled model.

        Args:
            fast: FastDynamics of the model the map was built for.
            q: Positions [rad], (n,). qd: velocities [rad/s], (n,). q_goal: [rad], (n,).
        """
        limit = self.grid.max_angle_step
        dtheta = np.clip(np.asarray(q_goal, dtype=np.float64) - q, -limit, limit)
        return holding_torques(fast, q) + self.lookup(dtheta, qd, joint_inertias(fast, q))

    # ------------------------------------------------------------------ compatibility
    def check_model(self, model):
        """Whether the map is exact for ``model`` (True) or conditioned on its parameters (False).

        Raises:
            TorqueMapError: Other joints or another structure (or, for a version-1 map without
                a structure hash, other parameter values): the map cannot serve this model.
        """
        if tuple(model.joint_names) != tuple(self.joint_names):
            raise TorqueMapError(
                f"torque map joints {list(self.joint_names)} differ from the model's {list(model.joint_names)}"
            )
        if parameter_hash(model) == self.parameter_hash:
            return True
        if self.structure_hash and structure_hash(model) == self.structure_hash:
            return False
        what = "structure" if self.structure_hash else "parameters (a version-1 map serves only its exact model)"
        raise TorqueMapError(
            f"torque map was built for robot '{self.robot}', but this model ('{model.name}') differs in its "
            f"{what}; rebuild it with `diffsim-ros torque-map build`"
        )

    # ------------------------------------------------------------------ files
    def save(self, path):
        """Write an ``.npz`` atomically (metadata as JSON in the ``metadata`` entry)."""
        path = Path(path)
        metadata = {
            "format_version": FORMAT_VERSION,
            "robot": self.robot,
            "joint_names": list(self.joint_names),
            "parameter_hash": self.parameter_hash,
            "structure_hash": self.structure_hash,
            "grid": dataclasses.asdict(self.grid),
            "dt": self.grid.dt,
            "simulator": self.simulator,
            "build_seconds": self.build_seconds,
            "max_goal_residual": self.max_goal_residual,
        }
        arrays = {"inertia_axis": self.inertia_axis, "contexts": self.contexts, "residual": self.residual}
        with atomic_file(path, "wb") as handle:
            np.savez(handle, metadata=np.array(json.dumps(metadata)), **arrays)

    @classmethod
    def load(cls, path, model=None):
        """Read and check a map; with ``model``, refuse (TorqueMapError) a map built for another model.

        Raises:
            TorqueMapError: Missing file, not a torque map, metadata of the wrong types, a grid
                that cannot be used, arrays that do not match it, non-finite or implausible
                values (each named).
        """
        path = Path(path)
        if not path.is_file():
            raise TorqueMapError(f"torque map not found: {describe_path(path)}")
        try:
            with np.load(path, allow_pickle=False) as data:
                metadata = json.loads(str(data["metadata"]))
                arrays = {k: np.array(data[k], dtype=np.float64) for k in ("inertia_axis", "contexts", "residual")}
        except (zipfile.BadZipFile, EOFError) as err:
            raise TorqueMapError(f"{path} is not a diffsim_ros torque map: not a complete .npz archive "
                                 f"(truncated or corrupt: {err})") from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            if "pickled" in str(err):  # numpy's advice to load it unsafely is not for a torque map
                raise TorqueMapError(f"{path} is not a diffsim_ros torque map: it holds pickled objects, which are "
                                     "never loaded") from None
            raise TorqueMapError(f"{path} is not a diffsim_ros torque map: {err}") from None
        if not isinstance(metadata, dict) or metadata.get("format_version") not in _READABLE_VERSIONS:
            version = metadata.get("format_version") if isinstance(metadata, dict) else None
            raise TorqueMapError(f"{path}: unsupported torque map format {version}")
        try:
            tmap = cls(
                robot=str(metadata["robot"]),
                joint_names=tuple(str(name) for name in metadata["joint_names"]),
                parameter_hash=str(metadata["parameter_hash"]),
                structure_hash=str(metadata.get("structure_hash", "")),
                grid=_grid_from_metadata(metadata["grid"]),
                simulator=str(metadata["simulator"]),
                build_seconds=float(metadata["build_seconds"]),
                max_goal_residual=float(metadata["max_goal_residual"]),
                **arrays,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise TorqueMapError(f"{path}: invalid torque map metadata: {type(err).__name__}: {err}") from None
        try:
            tmap.grid.check()
        except TorqueMapError as err:
            raise TorqueMapError(f"{path}: {err}") from None
        tmap._check_arrays(path)
        if model is not None:
            tmap.check_model(model)
        return tmap

    def _check_arrays(self, where):
        n, g = len(self.joint_names), self.grid
        expected = (n, g.inertia_contexts, g.angle_points, g.velocity_points)
        if self.residual.shape != expected or self.inertia_axis.shape != expected[:2]:
            raise TorqueMapError(f"{where}: torque map arrays do not match its grid {expected}")
        if not (np.all(np.isfinite(self.residual)) and np.all(np.isfinite(self.inertia_axis))
                and np.all(np.diff(self.inertia_axis, axis=1) >= 0)):
            raise TorqueMapError(f"{where}: torque map contains non-finite values or an unsorted inertia axis")
        if not np.all(self.inertia_axis > 0):
            raise TorqueMapError(f"{where}: torque map inertia axis has non-positive joint inertias")
        worst = float(np.abs(self.residual).max(initial=0.0))
        if worst > MAX_MAP_TORQUE:
            raise TorqueMapError(f"{where}: torque map holds a torque of {worst:.4g} N·m, beyond any plausible "
                                 f"joint torque ({MAX_MAP_TORQUE:g} N·m)")


def _grid_from_metadata(raw):
    """TorqueMapGrid of a map's metadata (unknown keys or non-numbers: TypeError/ValueError)."""
    if not isinstance(raw, dict):
        raise TypeError(f"grid must be a mapping, got {raw!r}")
    known = {f.name: f.type for f in dataclasses.fields(TorqueMapGrid)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"unknown grid settings {unknown}")
    values = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise ValueError(f"grid.{key} must be a finite number, got {value!r}")
        values[key] = int(value) if known[key] in (int, "int") else float(value)
    return TorqueMapGrid(**values)


# ---------------------------------------------------------------------- building
def _context_pool(model, grid):
    """Random configurations (P, n) and their joint inertias (P, n)."""
    rng = np.random.default_rng(grid.seed)
    pool = random_poses(model, grid.context_pool, rng, margin=grid.limit_margin)
    with torch.no_grad():
        q = torch.as_tensor(pool, dtype=model.dtype, device=model.device)
        inertia = to_numpy(torch.diagonal(dyn.mass_matrix(model, q), dim1=-2, dim2=-1))
    return pool, inertia


def _choose_contexts(pool, inertia, joint, count):
    """Configurations at evenly spaced quantiles of M_jj (the median for count = 1)."""
    order = np.argsort(inertia[:, joint], kind="stable")
    positions = [0.5] if count == 1 else np.linspace(0.0, 1.0, count)
    picks = order[np.round(np.asarray(positions) * (len(order) - 1)).astype(int)]
    return pool[picks], inertia[picks, joint]


def build_torque_map(simulator, grid=TorqueMapGrid(), progress=None):
    """Build every joint's map by direct optimization through the simulator.

    Each grid point is solved to ``grid.tolerance``: chord iterations with the autograd
    Jacobian of its context (one per context and joint), finished by Newton where needed.

    Args:
        simulator: JointSpaceSimulator with ``dt == grid.dt``; its model is the one the map
            is for (e.g. the calibrated model).
        grid: TorqueMapGrid.
        progress: Optional callable ``progress(done, total)`` after each joint.

    Returns:
        TorqueMap.

    Raises:
        TorqueMapError: Bad grid settings, a simulator step different from ``grid.dt``, or an
            optimization that does not reach the goals (residual above 1e-6 rad).
    """
    grid.check()
    model = simulator.model
    if abs(simulator.dt - grid.dt) > 1e-12:
        raise TorqueMapError(f"simulator dt {simulator.dt} differs from the map dt {grid.dt}")
    start = time.perf_counter()
    angles, velocities = grid.axes()
    keys_a, keys_v = (k.reshape(-1) for k in np.meshgrid(angles, velocities, indexing="ij"))
    pool, pool_inertia = _context_pool(model, grid)
    n, K = model.nq, grid.inertia_contexts
    residual = np.empty((n, K, len(angles), len(velocities)))
    axis, contexts, worst = np.empty((n, K)), np.empty((n, K, n)), 0.0
    for joint in range(n):
        configs, axis[joint] = _choose_contexts(pool, pool_inertia, joint, K)
        contexts[joint] = configs
        batch = np.repeat(configs, len(keys_a), axis=0)
        # One Jacobian per context: the chord iterations then need forward steps only.
        jacobians = _context_jacobians(simulator, configs).repeat_interleave(len(keys_a), dim=0)
        values, err = _net_residual(simulator, grid, batch, joint, np.tile(keys_a, K), np.tile(keys_v, K), jacobians)
        residual[joint] = values.reshape(K, len(angles), len(velocities))
        worst = max(worst, err)
        if progress is not None:
            progress(joint + 1, n)
    if not worst < 1e-6:
        raise TorqueMapError(f"direct optimization did not reach the goals (residual {worst:.3g} rad)")
    return TorqueMap(
        robot=model.name,
        joint_names=tuple(model.joint_names),
        parameter_hash=parameter_hash(model),
        structure_hash=structure_hash(model),
        grid=grid,
        simulator=describe_simulator(simulator),
        inertia_axis=axis,
        contexts=contexts,
        residual=residual,
        build_seconds=time.perf_counter() - start,
        max_goal_residual=worst,
    )


def rebuild_torque_map(tmap, model, progress=None):
    """The map ``tmap`` rebuilt for ``model`` (same grid, same simulator kind and substeps).

    Raises:
        TorqueMapError: Another structure, a simulator that cannot be rebuilt, or a build failure.
    """
    tmap.check_model(model)
    kind, substeps = simulator_settings(tmap.simulator)
    return build_torque_map(make_simulator(model, tmap.grid.dt, substeps=substeps, kind=kind), tmap.grid, progress)


def _rebuild_in_child(payload, niceness):
    os.nice(niceness)
    torch.set_num_threads(1)
    return rebuild_torque_map(*pickle.loads(payload))


def rebuild_torque_map_in_process(tmap, model, niceness=10):
    """:func:`rebuild_torque_map` in a separate, lower-priority process; blocks until it is done.

    A build is seconds (rigid) to minutes (PBD) of Python and torch work: in a thread it would
    hold the interpreter lock against a control loop in the same process, so it runs in a
    spawned child at ``niceness`` and only the waiting happens here.

    Raises:
        TorqueMapError: As :func:`rebuild_torque_map`, or the child process ended abnormally.
    """
    tmap.check_model(model)  # refuse another structure before starting a process
    context = multiprocessing.get_context("spawn")  # no fork of a process with DDS and torch threads
    # Plain pickle bytes: handing tensors to multiprocessing moves their storage to shared memory,
    # which leaves the numpy views of compiled snapshots (FastDynamics) pointing at freed memory.
    payload = pickle.dumps((tmap, model))
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            return pool.submit(_rebuild_in_child, payload, int(niceness)).result()
        except concurrent.futures.process.BrokenProcessPool as err:
            raise TorqueMapError(f"torque map rebuild process ended abnormally: {err}") from None


def validate_torque_map(tmap, simulator, fast, samples=20, seed=1):
    """Map lookups against direct optimization at random off-grid keys and configurations.

    Args:
        tmap: TorqueMap.
        simulator: The simulator (and model) the map was built with.
        fast: FastDynamics of that model.
        samples: Random (configuration, dtheta, omega) triples per joint.
        seed: Random seed.

    Returns:
        dict with per-joint arrays (n,) [N·m]: ``rms``, ``max`` (absolute error of the net
        torque) and ``scale`` (largest |net - holding| torque among the samples), plus
        ``lookup_seconds`` (mean time of one :meth:`TorqueMap.torques` call).
    """
    model, grid = simulator.model, tmap.grid
    rng = np.random.default_rng(seed)
    zero = np.zeros(model.nq)
    tmap.torques(fast, zero, zero, zero)  # compile (or load the numba cache) outside the timing
    rms, worst, scale, lookup_time = [], [], [], []
    for joint in range(model.nq):
        configs = random_poses(model, samples, rng, margin=grid.limit_margin)
        dtheta = rng.uniform(-grid.max_angle_step, grid.max_angle_step, samples)
        omega = rng.uniform(-grid.max_velocity, grid.max_velocity, samples)
        direct, _ = _net_residual(simulator, grid, configs, joint, dtheta, omega)
        q, qd, q_goal = (to_numpy(x) for x in _single_joint_problem(model, configs, joint, dtheta, omega))
        errors = []
        for i in range(samples):
            t0 = time.perf_counter()
            net = tmap.torques(fast, q[i], qd[i], q_goal[i])[joint]
            lookup_time.append(time.perf_counter() - t0)
            errors.append(net - (direct[i] + holding_torques(fast, q[i])[joint]))
        errors = np.asarray(errors)
        rms.append(np.sqrt(np.mean(errors**2)))
        worst.append(np.abs(errors).max())
        scale.append(np.abs(direct).max())
    return {"rms": np.array(rms), "max": np.array(worst), "scale": np.array(scale), "lookup_seconds": float(np.mean(lookup_time))}
