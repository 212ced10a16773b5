"""Object parameter estimation from camera pose estimates (Le Lidec et al.'s identification).

Given a :class:`~diffsim_ros.sim.contact.ContactWorld` and timestamped poses of its objects
(``geometry_msgs/msg/PoseStamped``), fit ``<object>.friction``, ``<object>.mass`` and
``<object>.restitution`` by nonlinear least squares on the pose errors of a simulated
rollout. Each object's initial pose and twist are estimated alongside as nuisance
parameters (a camera never gives velocities, and a single noisy first pose would bias the
whole trajectory); an object at rest at the start keeps zero velocity, and only its place on
what holds it (a shift across gravity, a turn about it) is estimated. Mass only changes the
motion through collisions with objects of known mass (or known robot pushes), so include such
an event in the data to identify it.

The Jacobian of the residuals comes from torch by forward sensitivity propagation through
the rollout, each step's Jacobians taken by one reverse pass vmapped over the state
components. Standard deviations are ``sqrt(diag(s² (JᵀJ)⁻¹))`` with
``s²`` the residual variance at the solution.

Every fit is judged against the camera noise estimated from the poses alone: a fit whose
residuals are more than QUALITY_LIMIT times that noise reports ``success=False`` and says so,
whatever the optimizer's convergence. For data with contacts between objects, prefer
:func:`diffsim_ros.estimation.object_fit.fit_objects`, which also finds its starting point.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import least_squares

from diffsim_ros.dynamics.spatial import quat_conjugate, quat_log, quat_multiply, quat_normalize
from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.consistency import channel_consistency
from diffsim_ros.estimation.object_events import pose_noise
from diffsim_ros.estimation.streams import PoseSeries
from diffsim_ros.sim.contact.errors import ContactError
from diffsim_ros.sim.contact.fast import OK as FAST_OK
from diffsim_ros.sim.contact.fast import FastContactStep, fast_support, warm_info
from diffsim_ros.sim.contact.frames import contact_frames, integrate_orientation
from diffsim_ros.sim.contact.shapes import bounding_radius
from diffsim_ros.sim.contact.state import WorldState

__all__ = [
    "ObjectEstimate",
    "QUALITY_LIMIT",
    "quality_verdict",
    "as_pose_series",
    "estimate_object_parameters",
    "estimate_in_stages",
    "fitted_poses",
    "object_pose_residuals",
    "scan_parameters",
    "parameter_uncertainty",
    "row_noise",
]

# Bounds of the physical parameters (friction > 0 keeps its gradient alive).
LOWER = {"mass": 1e-6, "friction": 1e-6, "restitution": 0.0}
UPPER = {"mass": math.inf, "friction": math.inf, "restitution": 1.0}
# Samples used for the initial-velocity guess (finite differences of a line fit).
VELOCITY_GUESS_SAMPLES = 5
# Poses averaged for the pose of an object declared at rest, and how far a first pose may be
# moved onto the surface it lies on [m] (camera noise puts it slightly inside or above).
REST_SAMPLES = 5
SETTLE_DISTANCE = 0.005
NUISANCE_SUFFIXES = ("position", "rotation", "linear_velocity", "angular_velocity")
# An object at rest at the start keeps zero velocity and lies on what holds it, but its place
# is estimated too (a shift across gravity and a turn about it): fixed at the mean of its first
# REST_SAMPLES noisy poses, its ~0.5 mm error moved where and when a hit lands, and the hit's
# parameters spread over noise draws twice as far as their std (issue 19).
REST_SUFFIXES = ("placement",)
# Typical magnitudes of the unknowns (scipy's x_scale). Fixed scales rather than 'jac': contact
# makes some nuisance columns exactly zero (a resting object's vertical velocity, a sticking
# lateral velocity), and Jacobian-based scaling would turn those into unbounded steps.
PARAMETER_SCALE = {"mass": None, "friction": 0.1, "restitution": 0.1}
NUISANCE_SCALE = {"position": 0.01, "rotation": 0.01, "linear_velocity": 0.1, "angular_velocity": 1.0, "placement": 0.01}
# Weak Gaussian prior on the nuisances around their data-driven guess: standard deviations,
# and the residual [m] that one standard deviation costs. It only matters along directions
# the data cannot see (a resting object's vertical velocity is absorbed by the contact),
# which would otherwise drift and stall the solver.
NUISANCE_PRIOR_STD = {"position": 0.05, "rotation": 0.1, "linear_velocity": 1.0, "angular_velocity": 10.0, "placement": 0.05}
PRIOR_RESIDUAL = 1e-3
PRIOR_CHANNEL = 2  # the prior rows' noise channel (their sigma is PRIOR_RESIDUAL)
# Identifiability: singular values of the column-normalized parameter Jacobian below this
# fraction of the largest span directions the data cannot see; a parameter with more than
# NULL_PARTICIPATION of its unit vector in those directions (or a relative standard deviation
# above UNIDENTIFIABLE_RELATIVE_STD) is flagged unidentifiable and gets std = inf.
SINGULAR_RCOND = 1e-6
NULL_PARTICIPATION = 0.1
UNIDENTIFIABLE_RELATIVE_STD = 0.5
# Smallest column norm of the Jacobian [m per unit] that counts as "the data depends on it".
ZERO_COLUMN = 1e-12
MIN_POSES = 3
# Fit quality: a fit whose rms residual per axis exceeds QUALITY_LIMIT times the camera noise
# estimated from the data has not explained the data. Measured on MuJoCo scenes
# (benchmarks/RESULTS.md, contact-objects): good fits 1.0-2.2x (soft against rigid contact;
# the noise estimate of a 20-pose series is good to ~20 %), deliberately wrong scenes far above.
QUALITY_LIMIT = 3.0
NOISE_FLOOR = (2e-4, 2e-3)  # [m], [rad]: no camera is better; noise-free data are judged against these
# Rollouts and their sensitivities: "auto" by the compiled step (sim/contact/fast.py, exact
# one-step Jacobians, ~20x cheaper) wherever it covers the world, else torch's; "torch": always
# torch's step (the reference).
ENGINES = ("auto", "torch")


@dataclass(frozen=True)
class ObjectEstimate:
    """Result of :func:`estimate_object_parameters`.

    Attributes:
        values: Estimated parameters, name -> value (an unidentifiable one stays near its
            initial guess: do not use it).
        std: Standard deviations, name -> value (inf where not identifiable), from the
            position and orientation noise estimated separately (:func:`parameter_uncertainty`).
        identifiable: Name -> bool: whether the data determine the parameter (see
            :func:`parameter_uncertainty`); e.g. mass without a collision is not.
        initial_state: Estimated initial WorldState (the nuisance parameters).
        rms: Root-mean-square position-equivalent residual [m].
        cost: Final least-squares cost ``½ Σ r²`` [m²].
        success: scipy's convergence flag, and False when the fit failed its quality check
            (``fit_ratio`` above QUALITY_LIMIT: the residuals are far above the camera noise).
        message: scipy's message, preceded by the quality verdict when it failed.
        evaluations: Residual evaluations.
        fit_ratio: Object -> {"position", "orientation"}: rms residual per axis over the
            camera noise estimated from the data alone (:func:`~diffsim_ros.estimation.
            object_events.pose_noise`); about 1 for a model that explains the data. Empty
            when the series are too short to estimate the noise.
        noise: The camera noise (PoseNoise) those ratios use, or None.
        consistency: Split name -> Consistency: whether the position and orientation data
            alone ("position/orientation"), and the data before and after ``split_time``
            ("before/after"), agree on the parameters
            (:func:`~diffsim_ros.estimation.consistency.channel_consistency`).
    """

    values: dict
    std: dict
    identifiable: dict
    initial_state: WorldState
    rms: float
    cost: float
    success: bool
    message: str
    evaluations: int
    fit_ratio: dict = field(default_factory=dict)
    noise: object = None
    consistency: dict = field(default_factory=dict)

    @property
    def worst_ratio(self):
        """The largest of ``fit_ratio`` (0 when it is empty)."""
        return max((max(r.values()) for r in self.fit_ratio.values()), default=0.0)


class _Problem:
    """Packs parameters and per-object initial-state nuisances into one vector."""

    def __init__(self, world, observations, parameters, at_rest, engine="auto"):
        if engine not in ENGINES:
            raise ContactError(f"engine must be one of {ENGINES}, got {engine!r}")
        self.engine = engine
        if world.robot is not None:
            raise ContactError("object estimation needs a world without a robot (robot pushes are not observed here)")
        self.world = world
        if isinstance(parameters, str):
            raise ContactError(f"parameters must be a sequence of names, got the string {parameters!r}")
        self.names = list(parameters)
        if not self.names:
            raise ContactError(f"no parameters to estimate; choose from {world.parameter_names()}")
        repeated = sorted({n for n in self.names if self.names.count(n) > 1})
        if repeated:
            raise ContactError(f"parameters named more than once: {repeated}")
        for name in self.names:
            world.locate_parameter(name)  # raises for unknown names
        missing = [o for o in world.object_names if o not in observations]
        if missing:
            raise ContactError(f"every object needs pose observations; missing {missing}")
        unknown = [o for o in observations if o not in world.object_names]
        if unknown:
            raise ContactError(f"observations for unknown objects {unknown}; objects: {list(world.object_names)}")
        self.at_rest = set(at_rest)
        unknown_rest = self.at_rest - set(world.object_names)
        if unknown_rest:
            raise ContactError(f"at_rest names unknown objects {sorted(unknown_rest)}")
        self.observations = [as_pose_series(o, observations[o]) for o in world.object_names]
        self.t0 = min(series.times[0] for series in self.observations)
        t_end = max(series.times[-1] for series in self.observations)
        self.steps = int(math.ceil((t_end - self.t0) / world.dt - 1e-9))
        self.nuisance = [f"{name}.initial_{s}" for name in world.object_names
                         for s in (REST_SUFFIXES if name in self.at_rest else NUISANCE_SUFFIXES)]
        self.size = len(self.names) + 3 * len(self.nuisance)
        residuals = 6 * sum(len(series) for series in self.observations)
        if residuals < 2 * self.size:
            raise DataError(
                f"too few poses: {residuals // 6} poses give {residuals} residuals for {self.size} unknowns "
                f"({len(self.names)} parameters + initial pose and twist of each moving object, place of each resting one); "
                f"need at least {math.ceil(2 * self.size / 6)} poses"
            )
        self.start = self._start_poses()
        self._axes = None  # placement_axes, derived from the world's gravity at first use

    def _start_poses(self):
        """Initial poses: resting objects from the mean of their first poses, moving ones from
        their first pose; all settled onto the static geometry they nearly touch."""
        world = self.world
        positions, orientations = [], []
        for name, series in zip(world.object_names, self.observations):
            count = min(REST_SAMPLES, len(series)) if name in self.at_rest else 1
            positions.append(series.position[:count].mean(0))
            quats = series.orientation[:count] * np.sign(series.orientation[:count] @ series.orientation[0])[:, None]
            orientations.append(quats.mean(0) / np.linalg.norm(quats.mean(0)))
        state = world.initial_state(position=np.array(positions), orientation=np.array(orientations))
        return world.settle(state, max_shift=SETTLE_DISTANCE)

    def unpack(self, x):
        """Physical parameter dict and the initial WorldState from a vector x (..., size)."""
        values = {name: x[..., i] for i, name in enumerate(self.names)}
        offset = len(self.names)
        fields = {}
        for key in self.nuisance:
            fields[key] = x[..., offset : offset + 3]
            offset += 3
        return values, fields

    def initial_state(self, fields, like):
        """WorldState from the nuisance fields; ``like`` (..., size) fixes the batch shape."""
        world = self.world
        batch = like.shape[:-1]
        positions, orientations, linear, angular = [], [], [], []
        for j, name in enumerate(world.object_names):
            start_q = self.start.orientation[j].expand(*batch, 4)
            zero = torch.zeros(*batch, 3, dtype=world.dtype, device=world.device)
            if name in self.at_rest:
                shift, turn = self.placement(fields[f"{name}.initial_placement"])
                positions.append(self.start.position[j] + shift)
                orientations.append(integrate_orientation(start_q, turn))
                linear.append(zero)
                angular.append(zero)
                continue
            positions.append(fields[f"{name}.initial_position"])
            orientations.append(integrate_orientation(start_q, fields[f"{name}.initial_rotation"]))
            linear.append(fields[f"{name}.initial_linear_velocity"])
            angular.append(fields[f"{name}.initial_angular_velocity"])
        return WorldState(
            torch.stack(positions, -2), torch.stack(orientations, -2), torch.stack(linear, -2), torch.stack(angular, -2)
        )

    def placement_axes(self):
        """Across-gravity unit axes (2, 3) and the up axis (3,) of a resting object's placement
        (world x, y and z without gravity), float64."""
        if self._axes is not None:
            return self._axes
        gravity = self.world.gravity.detach().double().cpu()
        up = -gravity / gravity.norm() if float(gravity.norm()) > 0 else torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
        frame = contact_frames(up)  # rows: up and two tangents, as a contact's frame on a floor
        self._axes = frame[1:], frame[0]
        return self._axes

    def placement(self, field):
        """A resting object's ``(shift [m] (..., 3), rotation vector [rad] (..., 3))`` from its
        placement nuisance (..., 3): a shift across gravity and a turn about it."""
        axes, up = (v.to(field.dtype).to(field.device) for v in self.placement_axes())
        return field[..., :2] @ axes, field[..., 2:] * up

    def initial_guess(self, initial, state=None):
        """Vector x0 from the given parameter values and the first observations, or the
        initial pose and twist of ``state`` (a WorldState at ``t0``, e.g. an earlier fit's;
        of a resting object, its place across gravity and its turn about it)."""
        values = [float(initial.get(name, self.world.get_parameter(name).detach().reshape(-1)[0])) for name in self.names]
        flat = None if state is None else state.map(lambda v: v.detach().reshape(-1, v.shape[-1]).double().cpu())
        start = self.start.map(lambda v: v.detach().double().cpu())
        axes, up = self.placement_axes()
        for j, (name, series) in enumerate(zip(self.world.object_names, self.observations)):
            if flat is None:
                values += ([0.0, 0.0, 0.0] if name in self.at_rest else
                           start.position[j].tolist() + [0.0, 0.0, 0.0] + list(_velocity_guess(series)) + [0.0, 0.0, 0.0])
                continue
            rotation = quat_log(quat_multiply(flat.orientation[j], quat_conjugate(start.orientation[j])))
            if name in self.at_rest:
                values += (axes @ (flat.position[j] - start.position[j])).tolist() + [float(rotation @ up)]
                continue
            values += flat.position[j].tolist() + rotation.tolist() + flat.linear_velocity[j].tolist() + flat.angular_velocity[j].tolist()
        return np.array(values)

    def scales(self, x0):
        """x_scale for least_squares: typical magnitudes (mass: its initial guess)."""
        out = []
        for i, name in enumerate(self.names):
            kind = name.rpartition(".")[2]
            out.append(PARAMETER_SCALE[kind] or max(abs(x0[i]), 1e-3))
        for key in self.nuisance:
            out += [NUISANCE_SCALE[key.rpartition(".initial_")[2]]] * 3
        return np.array(out)

    def prior(self, x, guess):
        """Prior residuals [m] of the nuisances, shape (3 * len(nuisance),), and their Jacobian."""
        weights = []
        for key in self.nuisance:
            weights += [PRIOR_RESIDUAL / NUISANCE_PRIOR_STD[key.rpartition(".initial_")[2]]] * 3
        weights = np.array(weights)
        offset = len(self.names)
        residual = weights * (x[offset:] - guess[offset:])
        jac = np.zeros((weights.size, x.size))
        jac[:, offset:] = np.diag(weights)
        return residual, jac

    def channels(self):
        """Noise channel of every residual row: 0 position, 1 orientation, then PRIOR_CHANNEL."""
        poses = sum(len(series) for series in self.observations)
        data = np.tile(np.repeat([0, 1], 3), poses)
        return np.concatenate([data, np.full(3 * len(self.nuisance), PRIOR_CHANNEL)])

    def row_times(self):
        """Observation time [s] of every pose residual row (the prior rows excluded), (R,)."""
        return np.concatenate([np.repeat(series.times, 6) for series in self.observations])

    def consistency(self, jac, residual, x, split_time=None):
        """Channel consistency at the solution: position against orientation rows, and rows up
        to ``split_time`` [s] against the later ones (when given and both sides have rows)."""
        channels = self.channels()
        # No camera is better than NOISE_FLOOR: a noise-free channel must not weigh infinitely.
        floor = np.concatenate([np.tile(np.repeat([NOISE_FLOOR[0], NOISE_FLOOR[1] * bounding_radius(obj.shape)], 3), len(series))
                                for obj, series in zip(self.world.objects, self.observations)] + [np.full(3 * len(self.nuisance), PRIOR_RESIDUAL)])
        sigma = np.maximum(row_noise(jac, residual, channels, {PRIOR_CHANNEL: PRIOR_RESIDUAL}), floor)
        out = {"position/orientation": channel_consistency(jac, residual, sigma, channels, self.names, x, shared=PRIOR_CHANNEL)}
        if split_time is not None:
            segments = np.where(channels == PRIOR_CHANNEL, PRIOR_CHANNEL, 0)
            later = np.concatenate([self.row_times() > split_time, np.zeros(3 * len(self.nuisance), bool)])
            segments[later] = 1
            if later.any() and (segments == 0).any():
                out["before/after"] = channel_consistency(jac, residual, sigma, segments, self.names, x,
                                                          labels=("before", "after"), shared=PRIOR_CHANNEL)
        return out

    def bounds(self):
        lower, upper = [], []
        for name in self.names:
            kind = name.rpartition(".")[2]
            lower.append(LOWER[kind])
            upper.append(UPPER[kind])
        lower += [-np.inf] * (self.size - len(self.names))
        upper += [np.inf] * (self.size - len(self.names))
        return np.array(lower), np.array(upper)


def as_pose_series(name, value):
    """The observations of one object, checked for estimation: a PoseSeries of at least
    MIN_POSES poses, from a PoseSeries or a mapping of its fields (``times``, ``position``,
    ``orientation``); ``name`` (the object's) is for error messages.

    Raises:
        DataError: Anything else, malformed fields, or fewer than MIN_POSES poses.
    """
    if isinstance(value, Mapping) and {"times", "position", "orientation"} <= set(value):
        try:
            value = PoseSeries(value["times"], value["position"], value["orientation"])
        except DataError as error:
            raise DataError(f"observations of '{name}': {error}") from error
    if not isinstance(value, PoseSeries):
        raise DataError(f"observations of '{name}' must be a PoseSeries or a mapping with times, position, orientation; got {type(value).__name__}")
    if len(value) < MIN_POSES:
        raise DataError(f"observations of '{name}': a pose series needs at least {MIN_POSES} poses, got {len(value)}")
    return value


def _velocity_guess(series):
    """Linear velocity [m/s] from a line fit to the first few positions."""
    count = min(VELOCITY_GUESS_SAMPLES, len(series))
    t = series.times[:count] - series.times[0]
    return np.polyfit(t, series.position[:count], 1)[0]


def _interpolate(traj_pos, traj_quat, t0, dt, times):
    """Simulated poses at observation times: linear in position, normalized lerp in orientation.

    traj_pos (..., S, 3) and traj_quat (..., S, 4) hold the states at t0 + k dt, k = 0..S-1.
    """
    s = (torch.as_tensor(times, dtype=traj_pos.dtype, device=traj_pos.device) - t0) / dt
    index = s.floor().clamp(0, traj_pos.shape[-2] - 2).long()
    alpha = (s - index.to(s.dtype))[:, None]
    p = (1 - alpha) * traj_pos[..., index, :] + alpha * traj_pos[..., index + 1, :]
    q0, q1 = traj_quat[..., index, :], traj_quat[..., index + 1, :]
    q1 = torch.where(((q0 * q1).sum(-1, keepdim=True) < 0), -q1, q1)
    return p, quat_normalize((1 - alpha) * q0 + alpha * q1)


def object_pose_residuals(world, state0, observations, steps, t0):
    """Pose residuals of a rollout against observations.

    Args:
        world: ContactWorld (parameters may be batched).
        state0: Initial WorldState at time ``t0``.
        observations: PoseSeries per object, in ``world.object_names`` order.
        steps: Number of simulated steps.
        t0: Time of ``state0`` [s].

    Returns:
        Residuals [m], shape (..., R): per object and observation, the position error (3)
        then the orientation error as a rotation vector times the object's bounding radius (3).
    """
    states, _ = world.rollout(state0, steps, check_start=False)
    pos = torch.cat([state0.position[..., None, :, :], states.position], -3)
    quat = torch.cat([state0.orientation[..., None, :, :], states.orientation], -3)
    return _trajectory_residuals(world, observations, pos, quat, t0)


def _trajectory_residuals(world, observations, pos, quat, t0):
    """Pose residuals [m] (..., R) of object trajectories (..., S+1, M, 3) and (..., S+1, M, 4)."""
    parts = []
    for j, (obj, series) in enumerate(zip(world.objects, observations)):
        p, q = _interpolate(pos[..., j, :], quat[..., j, :], t0, world.dt, series.times)
        obs_p = torch.as_tensor(series.position, dtype=p.dtype, device=p.device)
        obs_q = torch.as_tensor(series.orientation, dtype=p.dtype, device=p.device)
        rot_err = quat_log(quat_multiply(quat_conjugate(obs_q), q)) * bounding_radius(obj.shape)
        parts.append(torch.cat([p - obs_p, rot_err], -1).flatten(-2))
    return torch.cat(parts, -1)


def _flatten_state(state):
    """Per-object ``[position, orientation, linear velocity, angular velocity]`` stacked, (..., 13 J)."""
    parts = torch.cat([state.position, state.orientation, state.linear_velocity, state.angular_velocity], -1)
    return parts.flatten(-2)


def _unflatten_state(flat, count):
    parts = flat.reshape(*flat.shape[:-1], count, 13)
    return WorldState(parts[..., :3], parts[..., 3:7], parts[..., 7:10], parts[..., 10:])


def _batched_jacobian(output, inputs):
    """d output / d inputs for a 1-D output, one vmapped reverse pass; tuple of (R, *input.shape)."""
    eye = torch.eye(output.numel(), dtype=output.dtype, device=output.device)
    grads = torch.autograd.grad(output, inputs, eye, is_grads_batched=True, allow_unused=True)
    return tuple(torch.zeros(output.numel(), *i.shape, dtype=output.dtype, device=output.device) if g is None else g
                 for g, i in zip(grads, inputs))


def _torch_step_jacobian(problem, x_leaf, flat, warm=None):
    """One torch step from the flat state (D,) and its Jacobians d next / d state (D, D) and
    d next / d x (D, P), by one reverse pass vmapped over the D state components."""
    leaf = flat.detach().requires_grad_(True)
    values, _ = problem.unpack(x_leaf)
    world = problem.world.with_parameters(values)
    state, info = world.step(_unflatten_state(leaf, len(world.objects)), warm=warm)
    following = _flatten_state(state)
    d_state, d_x = _batched_jacobian(following, (leaf, x_leaf))
    return following.detach(), d_state, d_x, info


def _rollout_sensitivity(problem, x_t):
    """States (S+1, D) and their sensitivities d state / d x (S+1, D, P) along a rollout.

    Forward sensitivity propagation ``S_{t+1} = (ds'/ds) S_t + ds'/dx`` with the one-step
    Jacobians of the compiled step (:func:`_compiled_sensitivity`) where it covers the world,
    else from a reverse pass vmapped over the D state components: the work scales with the
    state size, not with the number of residuals.
    """
    x_leaf = x_t.detach().clone().requires_grad_(True)
    values, fields = problem.unpack(x_leaf)
    flat = _flatten_state(problem.initial_state(fields, x_leaf))
    (sens,) = _batched_jacobian(flat, (x_leaf,))
    fast = _compiled_step(problem.world.with_parameters({n: float(v.detach()) for n, v in values.items()}), problem.names,
                          problem.engine)
    if fast is not None:
        return _compiled_sensitivity(problem, fast, x_leaf, flat.detach(), sens)
    flats, sensitivities = [flat.detach()], [sens]
    info = None
    for _ in range(problem.steps):
        flat, d_state, d_x, info = _torch_step_jacobian(problem, x_leaf, flat, info)
        sens = d_state @ sens + d_x
        flats.append(flat)
        sensitivities.append(sens)
    return torch.stack(flats), torch.stack(sensitivities)


def _compiled_step(world, names=(), engine="auto"):
    """The compiled step of ``world`` with parameter columns ``names``, or None (the torch step)
    when ``engine`` is "torch" or the world is not covered (:func:`~diffsim_ros.sim.contact.fast.fast_support`)."""
    if engine not in ENGINES:
        raise ContactError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "torch" or fast_support(world) is not None:
        return None
    return FastContactStep(world, list(names))


def _field_order(count):
    """Index (13J,) taking the compiled step's field-major state (positions, orientations, linear,
    angular velocities of all objects) to the object-major flat state of :func:`_flatten_state`."""
    order = []
    for j in range(count):
        order += [3 * j + c for c in range(3)] + [3 * count + 4 * j + c for c in range(4)]
        order += [7 * count + 3 * j + c for c in range(3)] + [10 * count + 3 * j + c for c in range(3)]
    return np.array(order)


def _split(flat, count):
    """Object-major flat state (13J,) -> (position (J, 3), orientation (J, 4), linear (J, 3), angular (J, 3))."""
    parts = np.asarray(flat, dtype=np.float64).reshape(count, 13)
    return parts[:, :3].copy(), parts[:, 3:7].copy(), parts[:, 7:10].copy(), parts[:, 10:].copy()


def _compiled_states(world, fast, state0, steps):
    """Object-major flat states (S+1, 13J) of an unbatched rollout by the compiled step. A step
    whose contact problem did not converge (status APPROXIMATE) is kept: its state is the torch
    step's (Algorithm 1's approximate impulses), only its Jacobians would not be valid."""
    count = len(world.objects)
    flat = _flatten_state(state0).detach().cpu().numpy().reshape(-1)
    out, modes = [flat], None
    for _ in range(int(steps)):
        fields = fast.step(*_split(flat, count), warm=modes)
        flat, modes = np.concatenate(fields, 1).reshape(-1), fast.modes
        out.append(flat)
    return torch.as_tensor(np.stack(out), dtype=world.dtype, device=world.device)


def _torch_solution(info):
    """``(modes, impulse, multiplier)`` of a torch step's StepInfo, as FastContactStep.solution."""
    return tuple(v.detach().cpu().numpy() for v in (info.solution.modes, info.solution.impulse, info.solution.multiplier))


def _compiled_sensitivity(problem, fast, x_leaf, flat, sens):
    """:func:`_rollout_sensitivity` by the compiled step's exact one-step Jacobians (in state and
    in the parameters ``problem.names``, the first entries of x), the torch step where it
    reports no convergence. ``flat`` (D,) and ``sens`` (D, P): the initial state and its sensitivity."""
    count, n = len(problem.world.objects), len(problem.names)
    order = _field_order(count)
    flats, sensitivities, solution = [flat], [sens], None
    current = flat.cpu().numpy()
    for _ in range(problem.steps):
        fields, d_state, _, d_params = fast.jacobians(*_split(current, count), warm=None if solution is None else solution[0])
        if fast.status == FAST_OK:
            sens = torch.as_tensor(d_state[np.ix_(order, order)], dtype=sens.dtype, device=sens.device) @ sens
            sens[:, :n] += torch.as_tensor(d_params[order], dtype=sens.dtype, device=sens.device)
            current, solution = np.concatenate(fields, 1).reshape(-1), fast.solution
        else:
            warm = None if solution is None else warm_info(solution)
            following, d_state, d_x, info = _torch_step_jacobian(problem, x_leaf, torch.as_tensor(current, dtype=sens.dtype,
                                                                                                 device=sens.device), warm)
            sens, current, solution = d_state @ sens + d_x, following.cpu().numpy(), _torch_solution(info)
        flats.append(torch.as_tensor(current, dtype=sens.dtype, device=sens.device))
        sensitivities.append(sens)
    return torch.stack(flats), torch.stack(sensitivities)


def _residuals_of_trajectory(problem, flats):
    """Pose residuals from stacked states (S+1, D)."""
    world = problem.world
    traj = flats.reshape(flats.shape[0], len(world.objects), 13)
    return _trajectory_residuals(world, problem.observations, traj[..., :3], traj[..., 3:7], problem.t0)


def _evaluate(problem, x, with_jacobian):
    """Residuals (R,) and optionally the Jacobian (R, P) (forward sensitivities, see above)."""
    world = problem.world
    x_t = torch.as_tensor(x, dtype=world.dtype, device=world.device)
    if not with_jacobian:
        with torch.no_grad():
            values, fields = problem.unpack(x_t)
            state0 = problem.initial_state(fields, x_t)
            moved = world.with_parameters(values)
            fast = _compiled_step(moved, (), problem.engine)
            if fast is None:
                residual = object_pose_residuals(moved, state0, problem.observations, problem.steps, problem.t0)
            else:
                residual = _residuals_of_trajectory(problem, _compiled_states(moved, fast, state0, problem.steps))
        return residual.cpu().numpy(), None
    flats, sens = _rollout_sensitivity(problem, x_t)
    leaf = flats.clone().requires_grad_(True)
    residual = _residuals_of_trajectory(problem, leaf)
    (d_traj,) = _batched_jacobian(residual, (leaf,))
    jac = torch.einsum("rsd,sdp->rp", d_traj, sens)
    if not bool(torch.isfinite(jac).all()):
        bad = [n for n, ok in zip(problem.names, torch.isfinite(jac).all(0).tolist()) if not ok]
        raise ContactError(f"non-finite pose Jacobian at parameters {dict(zip(problem.names, x[: len(problem.names)].tolist()))} (columns {bad or 'of the initial state'})")
    return residual.detach().cpu().numpy(), jac.detach().cpu().numpy()


def _channel_sigmas(residual, channels, basis, fixed):
    """Noise standard deviation of every residual row, estimated per channel.

    The residuals of a least-squares fit are ``r = (I - H) e`` with ``H = U Uᵀ`` the hat
    matrix, so ``E |r_c|² = sum_j σ_j² A_cj`` with ``A_cj = sum_{i in c, k in j} (I - H)_ik²``:
    a fit shared by channels moves noise of a loud channel into the residuals of a quiet one,
    which a per-channel mean square would count as the quiet channel's own. The small system
    is solved for the unknown variances (unbiased variance components).

    Args:
        residual: Residuals, shape (R,).
        channels: Channel of every row, shape (R,).
        basis: Orthonormal basis U of the Jacobian's column space, shape (R, k).
        fixed: Channel -> known sigma.

    Returns:
        Sigma of every row, shape (R,).
    """
    labels = list(np.unique(channels))
    masks = [channels == c for c in labels]
    grams = [basis[m].T @ basis[m] for m in masks]  # U_cᵀ U_c, (k, k)
    leverage = [float(np.trace(g)) for g in grams]  # sum of H_ii over the channel
    # sum_{i in c, k in j} H_ik² = |U_c U_jᵀ|² = <U_cᵀ U_c, U_jᵀ U_j>
    coupling = np.array([[float((gc * gj).sum()) for gj in grams] for gc in grams])
    counts = np.array([m.sum() for m in masks], float)
    system = np.diag(counts - 2.0 * np.array(leverage)) + coupling
    energy = np.array([float(residual[m] @ residual[m]) for m in masks])
    known = np.array([c in fixed for c in labels])
    variance = np.zeros(len(labels))
    variance[known] = [fixed[c] ** 2 for c, k in zip(labels, known) if k]
    if (~known).any():
        rhs = energy[~known] - system[np.ix_(~known, known)] @ variance[known]
        solved = np.linalg.lstsq(system[np.ix_(~known, ~known)], rhs, rcond=None)[0]
        variance[~known] = np.maximum(solved, 0.0)
    sigma = np.empty(residual.size)
    for mask, value in zip(masks, variance):
        sigma[mask] = math.sqrt(value)
    return sigma


def _column_space(jac):
    """Column norms (P,), non-zero columns (P,), SVD of the column-normalized Jacobian and the
    singular values kept (above SINGULAR_RCOND of the largest)."""
    norms = np.linalg.norm(jac, axis=0)
    seen = norms > ZERO_COLUMN
    svd = np.linalg.svd(jac[:, seen] / norms[seen], full_matrices=False)
    singular = svd[1]
    keep = singular > SINGULAR_RCOND * singular[0] if singular.size else np.zeros(0, bool)
    return norms, seen, svd, keep


def row_noise(jac, residual, channels, fixed_sigma=None):
    """Noise standard deviation of every residual row, estimated per channel as in
    :func:`parameter_uncertainty` (same arguments), shape (R,)."""
    _, _, (u, _, _), keep = _column_space(jac)
    return _channel_sigmas(residual, np.asarray(channels), u[:, keep], dict(fixed_sigma or {}))


def parameter_uncertainty(jac, residual, channels=None, fixed_sigma=None):
    """Standard deviations of least-squares unknowns and which ones the data determine.

    The estimate is the unweighted least-squares solution, so its covariance is the sandwich
    ``(JᵀJ)⁻¹ Jᵀ Σ J (JᵀJ)⁻¹`` with ``Σ`` the diagonal noise variance of the rows, estimated
    per channel of residuals (positions and orientations of a camera have different noise;
    pooling them would misstate both). With one channel this is ``s² (JᵀJ)⁻¹``. It is
    computed on the column-normalized Jacobian by SVD: singular values below SINGULAR_RCOND
    of the largest span unobservable directions, dropped from the inverse. An unknown whose
    column is zero, or whose unit vector lies more than NULL_PARTICIPATION in those
    directions, is not determined by the data (a plain pseudo-inverse would report std 0).

    Args:
        jac: Jacobian of the residuals, shape (R, P).
        residual: Residuals at the solution, shape (R,).
        channels: Noise channel of every row (ints), shape (R,); default one channel.
        fixed_sigma: Channels whose noise is known, channel -> standard deviation in
            residual units (e.g. prior rows).

    Returns:
        ``(std, seen)``: standard deviations (P,) (inf where not seen) and a bool mask (P,).
    """
    rows, size = jac.shape
    channels = np.zeros(rows, int) if channels is None else np.asarray(channels)
    if channels.shape != (rows,):
        raise ValueError(f"channels must have shape ({rows},), got {channels.shape}")
    norms, seen, (u, singular, vt), keep = _column_space(jac)
    sigma = _channel_sigmas(residual, channels, u[:, keep], dict(fixed_sigma or {}))
    null = vt[~keep]
    participation = np.linalg.norm(null, axis=0) if null.size else np.zeros(int(seen.sum()))
    # Pseudo-inverse rows V S⁻¹ Uᵀ applied to the row noise: cov = P Σ Pᵀ.
    weighted = (vt[keep].T / singular[keep]) @ (u[:, keep].T * sigma)
    cov_diag = (weighted**2).sum(1)
    std = np.full(size, math.inf)
    std[seen] = np.sqrt(cov_diag) / norms[seen]
    seen_index = np.flatnonzero(seen)
    blind = seen_index[participation > NULL_PARTICIPATION]
    seen[blind] = False
    std[blind] = math.inf
    return std, seen


def _checked_initial(problem, initial):
    """The initial guesses as a dict; ContactError for names not estimated or values out of bounds."""
    initial = dict(initial or {})
    lower, upper = problem.bounds()
    for name, value in initial.items():
        if name not in problem.names:
            raise ContactError(f"initial guess for '{name}', which is not estimated; estimated: {problem.names}")
        i = problem.names.index(name)
        if not (math.isfinite(float(value)) and lower[i] <= float(value) <= upper[i]):
            raise ContactError(f"initial guess {name} = {value} outside [{lower[i]}, {upper[i]}]")
    return initial


def estimate_object_parameters(world, observations, parameters, initial=None, at_rest=(), max_evaluations=60, verbose=0,
                               initial_state=None, cost_tolerance=1e-8, engine="auto", split_time=None):
    """Fit object parameters to camera pose observations.

    Args:
        world: ContactWorld containing the observed objects (its current parameter values
            are the fixed values and the default initial guesses).
        observations: Mapping object name -> :class:`PoseSeries` (every object of the world).
        parameters: Names to estimate, e.g. ``["cube.friction"]`` or
            ``["cube.mass", "cube.friction", "cube.restitution"]``.
        initial: Optional mapping name -> initial guess.
        at_rest: Objects at rest at the start (e.g. a target waiting to be hit): zero initial
            velocity, lying where the mean of their first poses settles, and only their place
            across gravity and their turn about it estimated (from all their poses).
        max_evaluations: Budget of residual evaluations.
        verbose: scipy verbosity.
        initial_state: Optional WorldState at the first observation time to start the
            initial pose and twist from (e.g. the ``initial_state`` of an earlier fit on the
            same data); default from the first poses.
        cost_tolerance: scipy's ``ftol``: stop when a step lowers the cost by less than this
            fraction of it.
        engine: "auto" (the compiled step where it covers the world) or "torch" (see ENGINES).
        split_time: Optional time [s] (e.g. just before a first contact): the data up to it
            and after it are also checked for agreement on the parameters (``consistency``).

    Returns:
        ObjectEstimate.

    Raises:
        ContactError: Unknown or repeated parameter names, unknown object names, objects
            without observations, a world with a robot, a non-finite Jacobian.
        DataError: Malformed observations (NaN, unordered stamps, fewer than MIN_POSES poses
            per object, or too few poses in total for the unknowns).
    """
    problem = _Problem(world, observations, parameters, at_rest, engine)
    initial = _checked_initial(problem, initial)
    lower, upper = problem.bounds()
    x0 = problem.initial_guess(initial, initial_state)
    x0 = np.clip(x0, lower + 1e-12, upper - 1e-12)
    guess = x0.copy()

    def residuals(x):
        return np.concatenate([_evaluate(problem, x, with_jacobian=False)[0], problem.prior(x, guess)[0]])

    def jacobian(x):
        return np.concatenate([_evaluate(problem, x, with_jacobian=True)[1], problem.prior(x, guess)[1]])

    result = least_squares(
        residuals, x0, jac=jacobian, bounds=(lower, upper), method="trf",
        x_scale=problem.scales(x0), max_nfev=max_evaluations, verbose=verbose, ftol=cost_tolerance,
    )
    residual, jac = result.fun, result.jac
    values = {name: float(result.x[i]) for i, name in enumerate(problem.names)}
    std_all, seen = parameter_uncertainty(jac, residual, problem.channels(), {PRIOR_CHANNEL: PRIOR_RESIDUAL})
    std, identifiable = {}, {}
    for i, name in enumerate(problem.names):
        relative = std_all[i] / max(abs(result.x[i]), np.finfo(float).tiny)
        identifiable[name] = bool(seen[i] and relative <= UNIDENTIFIABLE_RELATIVE_STD)
        std[name] = float(std_all[i]) if seen[i] else math.inf
    with torch.no_grad():
        _, fields = problem.unpack(torch.as_tensor(result.x, dtype=world.dtype, device=world.device))
        state0 = problem.initial_state(fields, torch.zeros(1, dtype=world.dtype, device=world.device))
    noise, ratio = _fit_ratio(problem, residual)
    verdict = quality_verdict(ratio, noise)
    consistency = problem.consistency(jac, residual, result.x, split_time)
    return ObjectEstimate(
        values=values,
        std=std,
        identifiable=identifiable,
        initial_state=state0,
        rms=float(np.sqrt(np.mean(residual**2))),
        cost=float(0.5 * residual @ residual),
        success=bool(result.success) and verdict is None,
        message=str(result.message) if verdict is None else f"{verdict} (optimizer: {result.message})",
        evaluations=int(result.nfev),
        fit_ratio=ratio,
        noise=noise,
        consistency=consistency,
    )


def _fit_ratio(problem, residual):
    """Camera noise from the data and, per object, rms residual per axis over it (position,
    orientation); ``(None, {})`` when no series is long enough to estimate the noise."""
    try:
        noise = pose_noise(problem.observations)
    except ValueError:
        return None, {}
    ratio, offset = {}, 0
    for obj, series in zip(problem.world.objects, problem.observations):
        rows = residual[offset : offset + 6 * len(series)].reshape(len(series), 6)
        offset += 6 * len(series)
        position = math.sqrt(float(np.mean(rows[:, :3] ** 2)))
        orientation = math.sqrt(float(np.mean(rows[:, 3:] ** 2))) / bounding_radius(obj.shape)
        ratio[obj.name] = {"position": position / max(noise.position, NOISE_FLOOR[0]),
                           "orientation": orientation / max(noise.orientation, NOISE_FLOOR[1])}
    return noise, ratio


def quality_verdict(ratio, noise, limit=QUALITY_LIMIT):
    """None for a fit within ``limit`` times the camera noise, else a message naming the worst
    residual (``ratio``: ObjectEstimate.fit_ratio; ``noise``: its PoseNoise)."""
    if not ratio:
        return None
    name, channels = max(ratio.items(), key=lambda item: max(item[1].values()))
    channel = max(channels, key=channels.get)
    if channels[channel] <= limit:
        return None
    unit, sigma = ("mm", noise.position * 1e3) if channel == "position" else ("deg", math.degrees(noise.orientation))
    return (f"poor fit: the {channel} residual of '{name}' is {channels[channel]:.1f}x the camera noise estimated from the "
            f"data (rms {channels[channel] * sigma:.3g} {unit} per axis vs {sigma:.3g} {unit}; limit {limit:g}x): "
            "the model does not explain the data (check the known values, the scene's objects and pairs, the camera "
            "calibration and the time window)")


def estimate_in_stages(world, observations, stages, at_rest=(), max_evaluations=60, initial=None):
    """Several fits in sequence, each starting from the previous ones' estimates.

    Contact problems are non-convex in the parameters (a collision moves in time with them),
    so a joint fit needs a good start. The usual recipe for a collision with a known object:
    friction from the sliding before the collision, then mass and restitution with that
    friction, then everything together::

        stages = [(["cube.friction"], t_collision), (["cube.mass", "cube.restitution"], None),
                  (["cube.mass", "cube.friction", "cube.restitution"], None)]

    :func:`diffsim_ros.estimation.object_fit.fit_objects` finds the collision time in the
    data, starts the collision stage from a scan and judges the fit; prefer it.

    Args:
        world: ContactWorld (initial guesses from its parameter values).
        observations: Mapping object name -> PoseSeries.
        stages: Sequence of ``(parameter names, end time [s] or None)``; a stage fits the poses
            stamped up to its end time.
        at_rest: Objects at rest at the start.
        max_evaluations: Budget of each stage.
        initial: Optional mapping parameter name -> initial guess (applied to the world
            before the first stage; any parameter of the world).

    Returns:
        List of ObjectEstimate, one per stage (the last is the final estimate).
    """
    results, values = [], dict(initial or {})
    for names, end in stages:
        window = observations if end is None else {k: as_pose_series(k, v).between(end=end) for k, v in observations.items()}
        estimate = estimate_object_parameters(
            world.with_parameters(values), window, names, at_rest=at_rest, max_evaluations=max_evaluations
        )
        values.update(estimate.values)
        results.append(estimate)
    return results


def scan_parameters(world, observations, grid, at_rest=(), initial_state=None, engine="auto"):
    """Pose-residual cost at many parameter values, in one batched rollout (torch) or candidate
    by candidate (the compiled step, where it covers the world).

    The initial pose and twist are held at ``initial_state`` (or the data's guess): a scan
    locates the basin of a fit, it does not replace it. Each candidate's compiled rollout is
    the one a fit at its values computes; torch's batched rollout decides a step's impact
    substeps and speculative margin for the whole batch (one candidate about to touch splits
    every candidate's step), so its costs differ slightly (issue 19's scene 1: 1.7 % at the
    best candidate, same ranking at the top).

    Args:
        world: ContactWorld (parameters not in ``grid`` keep its values).
        observations: Mapping object name -> PoseSeries.
        grid: Mapping parameter name -> values, each shape (B,) (one column per candidate).
        at_rest: Objects at rest at the start.
        initial_state: Optional WorldState at the first observation time.
        engine: "auto" or "torch" (see ENGINES).

    Returns:
        Costs ``½ Σ r²`` [m²], shape (B,) (inf where a rollout failed).
    """
    names = list(grid)
    columns = [np.asarray(grid[name], dtype=np.float64).reshape(-1) for name in names]
    if len({c.size for c in columns}) != 1:
        raise ContactError(f"every scanned parameter needs the same number of values, got {[c.size for c in columns]}")
    problem = _Problem(world, observations, names, at_rest, engine)
    x0 = problem.initial_guess({}, initial_state)
    if _compiled_step(world, (), engine) is not None:
        return _compiled_scan(problem, x0, columns)
    x = np.tile(x0, (columns[0].size, 1))
    for i, column in enumerate(columns):
        x[:, i] = column
    x_t = torch.as_tensor(x, dtype=world.dtype, device=world.device)
    with torch.no_grad():
        values, fields = problem.unpack(x_t)
        state0 = problem.initial_state(fields, x_t)
        try:
            residual = object_pose_residuals(world.with_parameters(values), state0, problem.observations, problem.steps, problem.t0)
        except ContactError:
            return _scan_one_by_one(world, observations, names, columns, at_rest, initial_state)
    return 0.5 * (residual**2).sum(-1).cpu().numpy()


def _compiled_scan(problem, x0, columns):
    """:func:`scan_parameters` by compiled rollouts, one candidate after the other (inf where one fails)."""
    world = problem.world
    with torch.no_grad():
        x_t = torch.as_tensor(x0, dtype=world.dtype, device=world.device)
        state0 = problem.initial_state(problem.unpack(x_t)[1], x_t)
    costs = np.full(columns[0].size, math.inf)
    for b in range(costs.size):
        try:
            moved = world.with_parameters({n: float(c[b]) for n, c in zip(problem.names, columns)})
            residual = _residuals_of_trajectory(problem, _compiled_states(moved, FastContactStep(moved), state0, problem.steps))
        except ContactError:
            continue
        cost = 0.5 * float((residual**2).sum())
        costs[b] = cost if math.isfinite(cost) else math.inf
    return costs


def _scan_one_by_one(world, observations, names, columns, at_rest, initial_state):
    """:func:`scan_parameters` candidate by candidate (a batch stops at its first failure)."""
    costs = np.full(columns[0].size, math.inf)
    for b in range(costs.size):
        try:
            costs[b] = scan_parameters(world, observations, {n: c[b : b + 1] for n, c in zip(names, columns)}, at_rest, initial_state)[0]
        except ContactError:
            pass
    return costs


def fitted_poses(world, estimate, observations, engine="auto"):
    """Poses of the fitted model at the observation times: ``{name: PoseSeries}``.

    Args:
        world: The ContactWorld the estimate was made with.
        estimate: ObjectEstimate (its values and initial state).
        observations: Mapping object name -> PoseSeries (the stamps to sample).
        engine: "auto" or "torch" (see ENGINES).
    """
    series = [as_pose_series(name, observations[name]) for name in world.object_names]
    t0 = min(s.times[0] for s in series)
    steps = int(math.ceil((max(s.times[-1] for s in series) - t0) / world.dt - 1e-9))
    fitted = world.with_parameters(estimate.values)
    fast = _compiled_step(fitted, (), engine)
    with torch.no_grad():
        if fast is None:
            states, _ = fitted.rollout(estimate.initial_state, steps, check_start=False)
            pos = torch.cat([estimate.initial_state.position[None], states.position], 0)
            quat = torch.cat([estimate.initial_state.orientation[None], states.orientation], 0)
        else:
            traj = _compiled_states(fitted, fast, estimate.initial_state, steps).reshape(steps + 1, len(world.objects), 13)
            pos, quat = traj[..., :3], traj[..., 3:7]
        out = {}
        for j, (name, obs) in enumerate(zip(world.object_names, series)):
            p, q = _interpolate(pos[:, j, :], quat[:, j, :], t0, world.dt, obs.times)
            out[name] = PoseSeries(obs.times, p.cpu().numpy(), q.cpu().numpy())
    return out
