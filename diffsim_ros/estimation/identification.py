"""Identification: one joint problem over every kind of data, solved and reported honestly.

Every requested parameter group is estimated at once from all the data there is: rest poses
(static torque balance), motion (inverse-dynamics residuals on filtered states, or rollout
windows through the rigid-body or the PBD simulator, also from low-rate data with a fine
internal step) and camera poses. Each residual block is normalized by its noise, and the
noise of every block column is re-estimated from the fit (variance components), so that
blocks of different units and quality are weighted by what they are worth. Standard
deviations count the motion's residuals, correlated over the filter's span, for the
information they hold (:func:`~diffsim_ros.estimation.identifiability.serial_covariance`).

The optimizer is trust-region least squares (``scipy.optimize.least_squares``, box bounds
from :mod:`diffsim_ros.model.plausibility`, Jacobians from torch forward-mode AD) or Adam,
with a robust loss. Parameters the data do not determine (see
:mod:`~diffsim_ros.estimation.identifiability`) are never returned as values: they are named
in ``IdentificationResult.unidentifiable`` with the reason and the data that would determine
them.
"""

from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from diffsim_ros.dynamics.kinematics import forward_kinematics
from diffsim_ros.dynamics.spatial import matrix_to_quat, quat_to_matrix
from diffsim_ros.estimation import identifiability as ident
from diffsim_ros.estimation import simulator_jacobians, solvers
from diffsim_ros.estimation.base_parameters import linear_parameter_report
from diffsim_ros.estimation.data import DataError, UndeterminedError
from diffsim_ros.estimation.fit_quality import agreement_verdict, torque_agreement
from diffsim_ros.estimation.parameters import GROUPS, ParameterSpace
from diffsim_ros.estimation.residuals import (
    ARMATURE_PRIOR,
    INERTIA_PRIOR,
    CameraResidual,
    CoordinatePrior,
    InverseDynamicsResidual,
    RolloutResidual,
    SimulatorDynamicsResidual,
    StaticSimulatorResidual,
    StaticTorqueResidual,
)
from diffsim_ros.estimation.time_split import time_split
from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.plausibility import DEFAULT_BOUNDS, PlausibilityBounds, plausibility_violations
from diffsim_ros.sim.rigid import RigidBodySimulator
from diffsim_ros.sim.factory import make_simulator, steps_per_sample
from diffsim_ros.vocabulary import TRAJECTORY_LOSSES

__all__ = [
    "groups_with_data",
    "prediction_errors",
    "IdentificationResult",
    "IdentificationSettings",
    "TRAJECTORY_LOSSES",
    "identify",
    "forward_jacobian",
    "camera_initial_guess",
    "ROBUST_LOSSES",
]

ROBUST_LOSSES = solvers.ROBUST_LOSSES
forward_jacobian = solvers.forward_jacobian
JACOBIANS = ("auto", "tangents", "forward", "finite_difference")

_NEEDS = {
    "payload": ("static", "trajectories"),
    "spring": ("static", "trajectories"),
    "inertia": ("static", "trajectories"),
    "link_lengths": ("static", "trajectories", "camera"),
    "damping": ("trajectories",),
    "friction": ("trajectories",),
    "armature": ("trajectories",),
    "camera": ("camera",),
    "effort_bias": ("efforts",),
    "effort_delay": ("effort_motion",),
}


@dataclass(frozen=True)
class IdentificationSettings:
    """How an identification run treats its data.

    Attributes:
        trajectory_loss: Residual of the motion: ``"inverse_dynamics"`` (rigid model:
            ``rnea - passive - tau`` at every sample), ``"simulator_dynamics"`` (one short
            simulator step from every sample, torque-equivalent; any simulator),
            ``"rollout"`` (windows of samples simulated and compared; Liu et al., Wang et
            al.) or ``"auto"``: inverse dynamics for the rigid model, simulator dynamics
            through any other. Both instantaneous residuals work at any sample rate.
        simulator_step: [s] the step h of the simulator-dynamics and static-simulator
            residuals (their error is about (h / 2) M jerk).
        max_sim_step: [s] longest simulator step of rollouts: low-rate samples are simulated
            in several steps of at most this length.
        horizon: Rollout window length in samples (1 = one-step loss).
        scheme: Rollout residual, one of :data:`~diffsim_ros.estimation.residuals.ROLLOUT_SCHEMES`.
        window_stride: Samples between rollout windows (default: the horizon).
        checkpoint_every: Gradient checkpointing block for long rollouts.
        torque_std: Initial torque noise of the inverse-dynamics loss [N·m].
        stiction_velocity: [rad/s] entries of joints slower than this are left out of motion
            residuals while Coulomb friction is modelled (estimated or nonzero): a sticking
            joint's friction is any torque within +-mu. None: never.
        reweight: Re-estimate the noise of every residual block column from the fit.
        optimizer: ``"lm"`` (trust-region least squares) or ``"adam"``.
        robust: Robust loss, one of :data:`ROBUST_LOSSES`.
        robust_scale: Residual size (in standard deviations) where the robust loss bends.
        max_iterations: Residual evaluations (LM) or steps (Adam) per solve.
        spring_geometry: Also estimate spring lever lengths l1, l2.
        adam_lr: Adam step size in normalized coordinates.
        bounds: Plausibility bounds (box constraints and the final check).
        policy: :class:`~diffsim_ros.estimation.identifiability.DeterminationPolicy`.
        jacobian: Jacobians of simulator residuals: ``"tangents"`` (exact, from the compiled
            PBD step's parameter tangents: :mod:`~diffsim_ros.estimation.simulator_jacobians`),
            ``"forward"`` (forward-mode AD through the torch step), ``"finite_difference"``
            (central differences, no gradients: the compiled kernel where the simulator has
            one) or ``"auto"`` (tangents where they apply, else finite differences where a
            compiled kernel applies, else forward mode; ``IdentificationResult.jacobians``
            says which each block used and why).
    """

    trajectory_loss: str = "auto"
    simulator_step: float = 0.001
    max_sim_step: float = 0.01
    horizon: int = 1
    scheme: str = "torque"
    window_stride: int | None = None
    checkpoint_every: int | None = None
    torque_std: float = 0.05
    stiction_velocity: float | None = 0.05
    reweight: bool = True
    optimizer: str = "lm"
    robust: str = "huber"
    robust_scale: float = 3.0
    max_iterations: int = 50
    spring_geometry: bool = False
    adam_lr: float = 0.05
    bounds: PlausibilityBounds = DEFAULT_BOUNDS
    policy: ident.DeterminationPolicy = field(default_factory=ident.DeterminationPolicy)
    jacobian: str = "auto"

    def __post_init__(self):
        if self.trajectory_loss not in TRAJECTORY_LOSSES:
            raise ValueError(f"unknown trajectory_loss '{self.trajectory_loss}'; choose from {TRAJECTORY_LOSSES}")
        if self.robust not in ROBUST_LOSSES:
            raise ValueError(f"unknown robust loss '{self.robust}'; choose from {ROBUST_LOSSES}")
        if self.optimizer not in ("lm", "adam"):
            raise ValueError(f"unknown optimizer '{self.optimizer}' (lm or adam)")
        if self.jacobian not in JACOBIANS:
            raise ValueError(f"unknown jacobian '{self.jacobian}'; choose from {JACOBIANS}")
        if not (self.max_sim_step > 0 and self.simulator_step > 0 and self.torque_std > 0 and int(self.max_iterations) >= 1):
            raise ValueError("max_sim_step, simulator_step and torque_std must be positive and max_iterations >= 1")


@dataclass
class IdentificationResult:
    """What an identification run found.

    Attributes:
        model: Calibrated model (parameters not determined stay at their nominal values).
        camera_pose: Estimated camera frame in the base frame, (4, 4), or None.
        values: Parameter name -> estimated value (numpy); determined parameters only.
        stddev: Parameter name -> standard deviation (numpy, same shape as the value).
        unidentifiable: Parameter name -> why the data do not determine it, and which data would.
        metrics_before: Residual block -> per-column RMS (physical units) at the nominal values.
        metrics_after: The same at the estimate.
        history: Total cost after each residual evaluation.
        singular_values: Normalized Jacobian singular values at the start.
        success: Whether the optimizer reported convergence.
        message: Optimizer message.
        noise: Residual block -> estimated noise std per column (physical units).
        blocks: Names of the residual blocks used.
        errors_before: Residual block -> per-entry errors in physical units (model minus data
            in the block's own terms), shape (rows, columns), at the optimizer's start (the
            nominal values, clipped into the bounds; a zero payload starts at
            ``PAYLOAD_START_MASS``), as ``metrics_before``; entries the block leaves out are 0.
            What reports draw (they do not evaluate models again).
        errors_after: The same at the estimate.
        agreement: Per torque block, :class:`~diffsim_ros.estimation.fit_quality.TorqueAgreement`
            of the measured torques with the fitted model's.
        poor_fit: None, or why the fitted model does not explain the measured torques
            (:func:`~diffsim_ros.estimation.fit_quality.agreement_verdict`), or why the
            data before and after a cut disagree (``split``). Then no value is a
            result: callers must not apply ``values`` or ``model``.
        split: :class:`~diffsim_ros.estimation.time_split.TimeSplit` of the data's cuts
            (middle and quartiles) at the solution, or None without timed data on both sides.
        fitted: ``(model, camera_pose)`` at the solution with every coordinate the fit
            moved, determined or not: what these data alone prefer. For scoring only (the
            online change test asks whether any parameters explain the newest data much
            better); never to apply: undetermined values are noise.
        combined: Name -> why it is not determined on its own although in ``values`` (link
            inertials and armatures that the data determine only in combinations, held near
            the URDF's by the inertial prior); their std is NaN. The model carries them: the
            determined combinations hold only with every one of them.
        base_parameters: :class:`~diffsim_ros.estimation.base_parameters.BaseParameters` of
            the inertia group (None without it).
        jacobians: Residual block -> how its Jacobian was computed (``"tangents"``,
            ``"finite_difference"``, ``"forward"``), with why the exact tangents did not apply.
    """

    model: object
    camera_pose: np.ndarray | None
    values: dict
    stddev: dict
    unidentifiable: dict
    metrics_before: dict
    metrics_after: dict
    history: list = field(default_factory=list)
    singular_values: np.ndarray | None = None
    success: bool = True
    message: str = ""
    noise: dict = field(default_factory=dict)
    blocks: tuple = ()
    errors_before: dict = field(default_factory=dict)
    errors_after: dict = field(default_factory=dict)
    agreement: tuple = ()
    poor_fit: str | None = None
    split: object = None
    fitted: tuple | None = None
    combined: dict = field(default_factory=dict)
    jacobians: dict = field(default_factory=dict)
    base_parameters: object = None


def camera_initial_guess(model, observations):
    """Closed-form camera pose: average of ``T_base_link(q_i) T_cam_link_i^-1`` (4, 4) numpy.

    Rotations are averaged with the quaternion eigenvector method (Markley et al. 2007).
    """
    like = model.params.mass
    q = torch.as_tensor(observations.q, dtype=like.dtype, device=like.device)
    link = forward_kinematics(model, q, observations.frame).detach().cpu().numpy()
    rot_cl = quat_to_matrix(torch.as_tensor(observations.quaternion, dtype=torch.float64)).numpy()
    rot = link[:, :3, :3] @ np.transpose(rot_cl, (0, 2, 1))
    pos = link[:, :3, 3] - np.einsum("nij,nj->ni", rot, observations.position)
    quats = matrix_to_quat(torch.as_tensor(rot)).numpy()
    _, vecs = np.linalg.eigh(quats.T @ quats)
    pose = np.eye(4)
    pose[:3, :3] = quat_to_matrix(torch.as_tensor(vecs[:, -1])).numpy()
    pose[:3, 3] = pos.mean(0)
    return pose


def _present(dataset):
    return {
        "static": dataset.static is not None and len(dataset.static) > 0,
        "trajectories": len(dataset.trajectories) > 0,
        "camera": dataset.camera is not None and len(dataset.camera) > 0,
        # Measured efforts: every rest pose, and motion whose torques are efforts (not commands).
        "efforts": (dataset.static is not None and len(dataset.static) > 0)
        or any(t.measured_efforts for t in dataset.trajectories),
        "effort_motion": any(t.measured_efforts and t.tau_rate is not None for t in dataset.trajectories),
    }


def groups_with_data(dataset, groups):
    """The groups among ``groups`` that some part of ``dataset`` informs (order kept)."""
    present = _present(dataset)
    return tuple(g for g in groups if any(present[n] for n in _NEEDS[g]))


_NEED_TEXT = {"static": "static poses", "efforts": "measured efforts (rest poses, or motion with effort torques)",
              "effort_motion": "motion with measured efforts (not commanded torques)"}


def _check_data(dataset, groups, model):
    dataset.check_joints(model.nq)
    present = _present(dataset)
    for group in groups:
        needs = _NEEDS[group]
        if not any(present[n] for n in needs):
            raise DataError(
                f"group '{group}' needs {' or '.join(_NEED_TEXT.get(n, n) for n in needs)} "
                f"in the data; the data has {[k for k, v in present.items() if v] or 'nothing'}"
            )


def _is_rigid(simulator):
    return simulator is None or simulator == "rigid" or isinstance(simulator, RigidBodySimulator)


def _trajectory_loss(settings, simulator):
    if settings.trajectory_loss != "auto":
        return settings.trajectory_loss
    return "inverse_dynamics" if _is_rigid(simulator) else "simulator_dynamics"


def _simulator(simulator, model, dt, kind_step):
    """A simulator instance: the given one, or one of the given kind stepping ``kind_step(dt)``."""
    if simulator is not None and not isinstance(simulator, str):
        return simulator
    return make_simulator(model, kind_step(dt), "rigid" if simulator is None else simulator, substeps=1)


def _friction_modelled(model, groups):
    return "friction" in groups or bool((model.params.friction != 0).any())


def _motion_block(model, trajectories, simulator, settings, stiction):
    loss = _trajectory_loss(settings, simulator)
    if loss == "inverse_dynamics":
        if not _is_rigid(simulator):
            raise ValueError("the inverse-dynamics loss is rigid-body only; use simulator_dynamics or rollout")
        return InverseDynamicsResidual(trajectories, model, settings.torque_std, stiction)
    if loss == "simulator_dynamics":
        sim = _simulator(simulator, model, trajectories[0].dt, lambda dt: settings.simulator_step)
        return SimulatorDynamicsResidual.from_trajectories(trajectories, model, sim, settings.torque_std, stiction)
    if isinstance(simulator, str) and simulator == "pbd":
        # Rollout windows through PBD at its operating step (several substeps per step).
        sim = make_simulator(model, trajectories[0].dt / steps_per_sample(trajectories[0].dt, settings.max_sim_step), "pbd")
    else:
        sim = _simulator(simulator, model, trajectories[0].dt,
                         lambda dt: dt / steps_per_sample(dt, settings.max_sim_step))
    return RolloutResidual(trajectories, model, sim, settings.horizon, settings.scheme, settings.window_stride,
                           settings.checkpoint_every, stiction, settings.torque_std)


def _blocks(model, dataset, groups, simulator, settings):
    """Every residual block the data provide for the requested groups (one joint problem)."""
    blocks = []
    informed = set(groups)
    stiction = settings.stiction_velocity if _friction_modelled(model, groups) else None
    if dataset.static is not None and informed & {"payload", "spring", "inertia", "link_lengths"}:
        if _is_rigid(simulator):
            blocks.append(StaticTorqueResidual(dataset.static, model))
        else:
            sim = _simulator(simulator, model, None, lambda dt: settings.simulator_step)
            blocks.append(StaticSimulatorResidual(dataset.static, model, sim))
    if dataset.trajectories and informed - {"camera"}:
        blocks.append(_motion_block(model, dataset.trajectories, simulator, settings, stiction))
    if dataset.camera is not None and "camera" in groups:
        blocks.append(CameraResidual(dataset.camera, model))
    return blocks


def _inertial_prior(space, like):
    """The URDF's link inertials (and the nominal armatures, when fitted) as a prior on their
    coordinates (:data:`~diffsim_ros.estimation.residuals.INERTIA_PRIOR`)."""
    index, std, start = [], [], 0
    armature = "armature" in space.groups
    for block in space.blocks:
        if block.kind == "log_cholesky":
            index += range(start, start + 10)
            std += INERTIA_PRIOR
        elif armature and block.names[0].endswith(".armature"):
            index.append(start)
            std.append(ARMATURE_PRIOR)
        start += block.size
    return CoordinatePrior(index, space.nominal[index], std, like, armature)


def _data_rows(blocks):
    """Rows of the stacked residual that are data (a prior's rows come last)."""
    return sum(b.scale.numel() for b in blocks if not getattr(b, "prior", False))


def _held_by_prior(block, blocks):
    """Whether a prior holds the parameter block (the data then determine combinations of it)."""
    prior = next((b for b in blocks if getattr(b, "prior", False)), None)
    if prior is None:
        return False
    return block.kind == "log_cholesky" or (prior.armature and block.names[0].endswith(".armature"))


def _jacobian_mode(block, settings, apply, z):
    """How a block's Jacobian is computed: ``(mode, why)``, mode one of ``"tangents"``
    (compiled exact tangents), ``"finite_difference"`` (central differences of compiled
    rollouts) or ``"forward"`` (forward-mode AD through torch)."""
    sim = getattr(block, "simulator", None)
    if sim is None or settings.jacobian in ("forward", "finite_difference"):
        return ("forward" if sim is None else settings.jacobian), ""
    why = simulator_jacobians.tangent_support(block, apply, z)
    if why is None:
        return "tangents", ""
    if settings.jacobian == "tangents":
        raise ValueError(f"jacobian='tangents' does not apply to the {block.name} block: {why}")
    supported = getattr(sim, "fast_rollout_supported", None)
    return ("finite_difference" if supported is not None and supported() is None else "forward"), why


class _Problem:
    """The stacked residual of all blocks over the free coordinates of a parameter space.

    Blocks through a simulator with a compiled rollout kernel are differentiated by central
    differences of that kernel (many times faster than forward-mode AD through the torch
    step); the others by vectorized forward-mode AD.
    """

    def __init__(self, space, blocks, x0, settings):
        self.space, self.blocks = space, blocks
        self.x0 = x0
        self.free = np.ones(space.size, dtype=bool)
        self.modes = [_jacobian_mode(block, settings, self._model_of, x0) for block in blocks]

    def _model_of(self, x):
        return self.space.apply(x)[0]

    def _free_model(self, z):
        return self.space.apply(self.full(z))[0]

    def residual(self, x):
        candidate, camera = self.space.apply(x)
        return torch.cat([self._block_rows(block, x, candidate, camera) for block in self.blocks])

    @staticmethod
    def _block_rows(block, x, candidate, camera):
        """One block's residual rows; by the chunks of its Jacobian where it has them (bounded memory
        on long recordings, and the same per-chunk regressors the Jacobian cached)."""
        if getattr(block, "prior", False):
            return block.of_coordinates(x)
        step = getattr(block, "chunk_rows", None)
        if step:
            return torch.cat([block(candidate, camera, rows=slice(a, a + step)) for a in range(0, block.samples, step)])
        return block(candidate, camera)

    def full(self, z, base=None):
        """Coordinates with the free ones set to ``z`` and the others from ``base`` (default x0)."""
        base = self.x0 if base is None else base
        index = torch.as_tensor(np.flatnonzero(self.free), device=base.device)
        return base.clone().index_put((index,), z)

    def free_residual(self, z):
        return self.residual(self.full(z))

    def _block_residual(self, index, z):
        if getattr(self.blocks[index], "prior", False):
            return self.blocks[index].of_coordinates(self.full(z))
        candidate, camera = self.space.apply(self.full(z))
        return self.blocks[index](candidate, camera)

    def _chunk_residual(self, index, rows, z):
        candidate, camera = self.space.apply(self.full(z))
        return self.blocks[index](candidate, camera, rows=rows)

    def value_and_jacobian(self, z):
        """Residual (M,) and Jacobian (M, P_free) at free coordinates ``z``; an infinite residual
        where ``z`` means no model (a trial step so long that a parameter overflows: the
        trust-region solver then shortens it)."""
        try:
            with torch.no_grad():
                self.space.apply(self.full(z))
        except RobotModelError:
            rows = sum(block.scale.numel() for block in self.blocks)
            return z.new_full((rows,), torch.inf), z.new_zeros(rows, z.shape[0])
        values, jacobians = [], []
        for index, (mode, _) in enumerate(self.modes):
            block = self.blocks[index]
            if mode == "tangents":
                parts = [simulator_jacobians.value_and_jacobian(block, self._free_model, z)]
            elif mode == "finite_difference":
                parts = [_central_differences(lambda w, i=index: self._block_residual(i, w), z)]
            elif getattr(block, "chunk_rows", None):  # sample chunks: bounded tangent memory on long recordings
                step = block.chunk_rows
                parts = [solvers.forward_jacobian(lambda w, i=index, r=slice(a, a + step): self._chunk_residual(i, r, w), z)
                         for a in range(0, block.samples, step)]
            else:
                parts = [solvers.forward_jacobian(lambda w, i=index: self._block_residual(i, w), z)]
            values.extend(p[0] for p in parts)
            jacobians.extend(p[1] for p in parts)
        return torch.cat(values), torch.cat(jacobians)

    def bounds(self):
        return self.space.lower[self.free], self.space.upper[self.free]

    def count(self):
        """Data residuals that count (a prior's rows are not data)."""
        return sum(block.active for block in self.blocks if not getattr(block, "prior", False))


FD_RELATIVE_STEP = 1e-6
"""Central-difference step relative to max(1, |coordinate|): truncation ~1e-12, rounding ~1e-10."""


def _central_differences(fn, z):
    """Residual and its Jacobian by central differences (no autograd: compiled kernels apply)."""
    with torch.no_grad():
        value = fn(z)
        columns = []
        for i in range(z.shape[0]):
            step = FD_RELATIVE_STEP * max(1.0, abs(float(z[i])))
            e = torch.zeros_like(z)
            e[i] = step
            columns.append((fn(z + e) - fn(z - e)) / (2.0 * step))
    return value, torch.stack(columns, dim=1) if columns else value.new_zeros(value.shape[0], 0)


def _flag_rank_deficient(problem, jac, unidentifiable):
    """Fix (at nominal) every parameter block with a coordinate the data cannot determine (from
    the data's rows alone), but those a prior holds: their combinations are reported instead."""
    flags, singular = ident.rank_flags(jac[: _data_rows(problem.blocks)])
    start = 0
    for block in problem.space.blocks:
        index = slice(start, start + block.size)
        if flags[index].any() and not _held_by_prior(block, problem.blocks):
            for name in block.names:
                unidentifiable[name] = (f"not determined by the data (no or redundant excitation: rank-deficient "
                                        f"Jacobian); would need {ident.data_hint(name)}")
            problem.free[index] = False
        start += block.size
    return singular


def _solve(problem, z0, settings, history, progress):
    lower, upper = problem.bounds()

    def on_evaluation(cost):
        history.append(cost)
        if progress is not None:
            progress(cost)

    if settings.optimizer == "adam":
        return solvers.adam(problem.free_residual, z0, lower, upper, settings.robust, settings.robust_scale,
                            settings.max_iterations, settings.adam_lr, on_evaluation)
    if settings.robust != "linear":
        # Far from the solution every residual looks like an outlier and a robust loss
        # degenerates to slow L1 steps: converge in plain least squares first, then refine.
        z0 = solvers.least_squares(problem.value_and_jacobian, z0, lower, upper, "linear", settings.robust_scale,
                                   settings.max_iterations, on_evaluation).z
    return solvers.least_squares(problem.value_and_jacobian, z0, lower, upper, settings.robust, settings.robust_scale,
                                 settings.max_iterations, on_evaluation)


def _reweight(problem, residual):
    """Scale each block column's noise to the robust spread of its normalized residual.

    Returns:
        Whether any noise changed by more than 10 %.
    """
    changed, start = False, 0
    for block in problem.blocks:
        size = block.scale.numel()
        part = residual[start : start + size].reshape(-1, block.columns)
        start += size
        if getattr(block, "fixed_noise", False):  # a prior's spread is a statement, not a noise to fit
            continue
        weight = torch.ones_like(part) if block.weight is None else block.weight.reshape(-1, block.columns)
        factors = []
        for j in range(block.columns):
            values = part[weight[:, j] > 0, j]
            factors.append(1.4826 * values.abs().median() if values.numel() >= 10 else torch.ones((), dtype=part.dtype))
        factors = torch.stack(factors).clamp_min(1e-6)
        changed |= bool(((factors - 1.0).abs() > 0.1).any())
        block.rescale(factors)
    return changed


def _per_block(blocks, residual):
    """``(block, its slice of the stacked residual)`` for every block."""
    start = 0
    for block in blocks:
        size = block.scale.numel()
        yield block, residual[start : start + size]
        start += size


def _agreements(blocks, residual, still):
    """TorqueAgreement of every block whose errors are torques, at the stacked ``residual``.

    Entries of a joint slower than ``still`` [rad/s] within its filter span are left out: a
    joint that sticks, or that a brake or an obstacle holds, holds any torque up to a limit
    no model here knows, as the fit's own stiction rule says.
    """
    out = []
    for block, part in _per_block(blocks, residual):
        measured = block.measured_torques()
        if measured is None:
            continue
        error = part.reshape(-1, block.columns) * block.scale.reshape(-1, block.columns)
        weight = torch.ones_like(error) if block.weight is None else block.weight.reshape(-1, block.columns)
        if block.speeds is not None:
            weight = weight * (block.speeds >= still).to(weight.dtype)
        out.append(torque_agreement(block.name, measured.detach().cpu().numpy(),
                                    block.torque_error_sign * error.detach().cpu().numpy(), weight.cpu().numpy(), block.span))
    return tuple(out)


def _per_block_metrics(blocks, residual):
    return {block.name: block.per_joint_rms(part).cpu().numpy() for block, part in _per_block(blocks, residual)}


def _per_block_errors(blocks, residual):
    """Block name -> physical errors (rows, columns): the normalized residual times its noise."""
    return {block.name: (part.reshape(-1, block.columns) * block.scale.reshape(-1, block.columns)).detach().cpu().numpy()
            for block, part in _per_block(blocks, residual)}


def _physical_map(problem, x, names):
    """``(value (Q,), jacobian (Q, P), layout)``: the parameters ``names`` stacked, their
    Jacobian over the free coordinates and ``[(name, shape)]``, numpy (the arguments of
    :func:`~diffsim_ros.estimation.identifiability.named_delta_method`)."""
    free_t = torch.as_tensor(problem.free, device=x.device)

    def flat(z):
        phys = problem.space.physical(x.detach().clone().index_put((free_t.nonzero().flatten(),), z))
        return torch.cat([phys[n].reshape(-1) for n in names])

    value, jac = forward_jacobian(flat, x[free_t].detach())
    phys = problem.space.physical(x.detach())
    return value.cpu().numpy(), jac.cpu().numpy(), [(n, tuple(phys[n].shape)) for n in names]


def _serial_rows(blocks):
    """:class:`~diffsim_ros.estimation.identifiability.SerialRows` of the blocks whose entries
    are time series (motion from filtered data), at their offsets in the stacked residual."""
    out, start = [], 0
    for block in blocks:
        series = block.serial_segments()
        if series is not None:
            lengths, reach = series
            out.append(ident.SerialRows(start, block.scale.numel() // sum(lengths), lengths, reach))
        start += block.scale.numel()
    return out


def _coordinate_blocks(problem):
    """Per coordinate: the parameter block (index into space.blocks) it belongs to."""
    return np.concatenate([np.full(block.size, i) for i, block in enumerate(problem.space.blocks)])


def _determine(problem, solution, settings):
    """Values and stds of the free parameters, and the ones the data do not determine.

    Returns:
        ``(values, stddev, rejected, refit, split)``: ``rejected`` maps names to reasons;
        ``refit`` lists parameter blocks to fix at nominal and solve again without
        (held at a bound against the data, or implausible); ``split`` is the
        :class:`~diffsim_ros.estimation.time_split.TimeSplit` of the data's cuts, or None.
    """
    z = solution.z
    x = problem.full(z)
    r, jac = problem.value_and_jacobian(z)
    r, jac = r.cpu().numpy(), jac.cpu().numpy()
    dof = max(1, problem.count() - int(problem.free.sum()))
    variance = 2.0 * solvers.robust_cost(r, settings.robust, settings.robust_scale) / dof
    psi = solvers.robust_influence(r, settings.robust, settings.robust_scale)
    serial = _serial_rows(problem.blocks)
    cov = ident.serial_covariance(jac, psi, variance, serial)
    lower, upper = problem.bounds()
    pinned = ident.pinned_coordinates(z.cpu().numpy(), solution.active, jac, r, cov, lower, upper,
                                      settings.policy.bound_sigmas)
    coordinate_block = _coordinate_blocks(problem)
    owner = coordinate_block[problem.free]
    blocks = problem.space.blocks
    names = [n for i, b in enumerate(blocks) if problem.free[coordinate_block == i].all() for n in b.names]
    mapped = _physical_map(problem, x, names)
    values, stddev = ident.named_delta_method(*mapped, cov)
    split = time_split(jac, psi, variance, problem.blocks, serial, mapped, settings.policy.resolution)
    rows = _data_rows(problem.blocks)
    base, combined = linear_parameter_report(problem.space, problem.free, jac[:rows], x.detach().cpu().numpy(),
                                             psi[:rows], variance, serial)
    for name in combined:  # the prior's spread, not the data's: no std to report
        stddev[name] = np.full(np.shape(stddev[name]), np.nan)
    rejected, refit = {}, set()
    for index, (side, bound, free_value, std) in pinned.items():
        block = int(owner[index])
        refit.add(block)
        for name in blocks[block].names:
            rejected[name] = (f"held at its {side} plausibility bound {bound:.4g} by the optimizer: the data alone put "
                              f"it at {free_value:.4g} +- {std:.2g} (unmodelled effects, or too little excitation); "
                              f"would need {ident.data_hint(name)}")
    for name, reason in plausibility_violations(values, settings.bounds).items():
        refit.update(i for i, b in enumerate(blocks) if name in b.names)
        rejected.setdefault(name, f"implausible estimate: {reason}; would need {ident.data_hint(name)}")
    for index in refit:  # a block is fixed whole: its other parameters go with it
        first = next(n for n in blocks[index].names if n in rejected)
        for name in blocks[index].names:
            rejected.setdefault(name, f"kept nominal with {first}, which the data do not determine")
    for name in values:
        reason = None if name in rejected or name in combined else ident.imprecise(name, values[name], stddev[name],
                                                                                   settings.policy)
        if reason:
            rejected[name] = f"{reason}; would need {ident.data_hint(name)}"
    return values, stddev, rejected, sorted(refit), split, (combined, base)


def _settings(settings, overrides):
    settings = settings or IdentificationSettings()
    known = {f.name for f in fields(IdentificationSettings)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"identify() got unknown settings {unknown}; IdentificationSettings has {sorted(known)}")
    if "max_iterations" in overrides:
        overrides["max_iterations"] = int(overrides["max_iterations"])
    return replace(settings, **overrides)


def _groups(groups):
    groups = tuple(dict.fromkeys(groups))
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown parameter groups {unknown}; choose from {list(GROUPS)}")
    if not groups:
        raise ValueError(f"no parameter groups to estimate; choose from {list(GROUPS)}")
    return groups


def identify(model, dataset, groups, *, settings=None, simulator=None, camera_guess=None, progress=None, **overrides):
    """Estimate the requested parameter groups from all the data, as one joint problem.

    Args:
        model: Nominal RobotModel (initial values; float64 recommended).
        dataset: :class:`~diffsim_ros.estimation.data.Dataset` (rest poses, trajectories,
            camera observations; any mix).
        groups: Parameter groups, e.g. ``("payload", "spring", "damping")``.
        settings: :class:`IdentificationSettings` (default settings if None).
        simulator: The differentiable model of the motion and rest residuals: ``None`` or
            ``"rigid"`` (exact rigid-body dynamics), ``"pbd"`` (the PBD simulator, built at
            the step each residual needs), or a JointSpaceSimulator instance used as is (its
            period must divide the trajectories' sample period for rollouts).
        camera_guess: Initial camera pose (4, 4); default: closed form from the data.
        progress: Optional callable ``progress(cost)`` after every residual evaluation.
        **overrides: Fields of :class:`IdentificationSettings` (e.g. ``max_iterations=20``).

    Returns:
        IdentificationResult. Parameters the data do not determine are in
        ``unidentifiable`` (with reasons), never in ``values``; the model keeps their
        nominal values.

    Raises:
        DataError: Data missing for a group, too few residuals, or nothing identifiable.
        ValueError: Unknown groups or settings.
    """
    settings = _settings(settings, overrides)
    groups = _groups(groups)
    _check_data(dataset, groups, model)
    if "camera" in groups and camera_guess is None:
        camera_guess = camera_initial_guess(model, dataset.camera)
    space = ParameterSpace(model, groups, camera_guess, settings.spring_geometry, settings.bounds)
    like = model.params.mass
    blocks = _blocks(model, dataset, groups, simulator, settings)
    if "inertia" in groups:  # last: its rows follow the data's (_data_rows)
        blocks.append(_inertial_prior(space, like))
    problem = _Problem(space, blocks, torch.as_tensor(space.x0, dtype=like.dtype, device=like.device), settings)
    r0, jac0 = problem.value_and_jacobian(problem.x0)
    if problem.count() < space.size:
        raise DataError(f"too few data: {problem.count()} residuals for {space.size} unknowns of groups {list(groups)}; "
                        "record more poses or a longer trajectory")
    unidentifiable = {}
    singular = _flag_rank_deficient(problem, jac0.cpu().numpy(), unidentifiable)
    nominal = torch.as_tensor(space.nominal, dtype=like.dtype, device=like.device)
    problem.x0 = torch.where(torch.as_tensor(problem.free), problem.x0, nominal)  # fixed blocks: at nominal
    if not problem.free.any():
        raise UndeterminedError(f"none of the parameters of groups {list(groups)} is identifiable from these data "
                        "(too few or too similar poses, or no excitation)")
    before = (_per_block_metrics(blocks, r0), _per_block_errors(blocks, r0))
    history = []
    solution = _solve(problem, problem.x0[torch.as_tensor(problem.free)], settings, history, progress)
    if settings.reweight and _reweight(problem, problem.free_residual(solution.z).detach()):
        solution = _solve(problem, solution.z, settings, history, progress)
    values, stddev, rejected, refit, split, linear = _determine(problem, solution, settings)
    if refit:
        # Blocks held up by a bound or implausible are fixed at nominal; the rest is solved again.
        held = problem.full(solution.z)
        for index in refit:
            start = sum(b.size for b in space.blocks[:index])
            problem.free[start : start + space.blocks[index].size] = False
        if not problem.free.any():
            raise UndeterminedError(f"no parameter of groups {list(groups)} is determined by these data: "
                            + "; ".join(f"{k}: {v}" for k, v in rejected.items()))
        problem.x0 = torch.where(torch.as_tensor(problem.free), held, nominal)
        solution = _solve(problem, problem.x0[torch.as_tensor(problem.free)], settings, history, progress)
        values, stddev, again, _, split, linear = _determine(problem, solution, settings)
        rejected = {**again, **rejected}
    return _result(model, problem, solution, values, stddev, {**unidentifiable, **rejected}, before, history, singular,
                   settings, split, linear)


def prediction_errors(candidates, dataset, groups, *, settings=None, simulator=None):
    """How well each candidate model predicts the data: mean squared normalized residual.

    Every candidate is scored on the same residual blocks with the same noise weights (those
    of the data, not re-estimated), so the scores compare: an online estimate is accepted only
    if it predicts held-back data no worse than the current model.

    Args:
        candidates: Sequence of ``(model, camera_pose)``; camera_pose (4, 4) or None (then
            camera observations are not scored for any candidate).
        dataset: Dataset to score on.
        groups: Parameter groups (they select the residual blocks, as in :func:`identify`).
        settings, simulator: As :func:`identify`.

    Returns:
        list of floats (one per candidate); nan when the data give no residual.
    """
    settings = _settings(settings, {})
    groups = _groups(groups)
    blocks = _blocks(candidates[0][0], dataset, groups, simulator, settings)
    if any(pose is None for _, pose in candidates):
        blocks = [block for block in blocks if not isinstance(block, CameraResidual)]
    count = sum(block.active for block in blocks)
    scores = []
    for model, pose in candidates:
        if not count:
            scores.append(float("nan"))
            continue
        like = model.params.mass
        camera = None if pose is None else torch.as_tensor(pose, dtype=like.dtype, device=like.device)
        with torch.no_grad():
            residual = torch.cat([block(model, camera) for block in blocks])
        scores.append(float(residual.square().sum()) / count)
    return scores


def _result(nominal, problem, solution, values, stddev, unidentifiable, before, history, singular, settings, split,
            linear=({}, None)):
    """The calibrated model holds the determined values only (with those determined in
    combination); the rest stay nominal.

    ``before``: ``(metrics, errors)`` per block at the nominal values; ``split``: TimeSplit or
    None; ``linear``: ``(combined, base parameters)`` of :func:`_determine`.
    """
    determined = {k: v for k, v in values.items() if k not in unidentifiable}
    like = nominal.params.mass
    camera = determined.pop("camera.pose", None)
    model = nominal.with_parameters({k: torch.as_tensor(v, dtype=like.dtype, device=like.device) for k, v in determined.items()})
    camera_pose, x = None, problem.full(solution.z)
    fitted_model, fitted_pose = problem.space.apply(x)
    fitted_pose = None if fitted_pose is None else fitted_pose.detach().cpu().numpy()
    if camera is not None:
        camera_pose = fitted_pose
        determined["camera.pose"] = camera
    residual = problem.residual(x).detach()
    noise = {b.name: b.scale.reshape(-1, b.columns).median(0).values.cpu().numpy() for b in problem.blocks}
    agreement = _agreements(problem.blocks, residual, settings.stiction_velocity or 0.0)
    return IdentificationResult(
        model=model.replace(params=model.params.detach()),
        camera_pose=camera_pose,
        values=determined,
        stddev={k: stddev[k] for k in determined},
        unidentifiable=unidentifiable,
        metrics_before=before[0],
        metrics_after=_per_block_metrics(problem.blocks, residual),
        history=history,
        singular_values=singular,
        success=solution.success,
        message=solution.message,
        noise=noise,
        blocks=tuple(b.name for b in problem.blocks),
        jacobians={b.name: (mode if not why else f"{mode} ({why})") for b, (mode, why) in zip(problem.blocks, problem.modes)},
        errors_before=before[1],
        errors_after=_per_block_errors(problem.blocks, residual),
        agreement=agreement,
        poor_fit=agreement_verdict(agreement, nominal.joint_names) or (split.verdict() if split else None),
        split=split,
        fitted=(fitted_model.replace(params=fitted_model.params.detach()), fitted_pose),
        combined={k: v for k, v in linear[0].items() if k in determined},
        base_parameters=linear[1],
    )
