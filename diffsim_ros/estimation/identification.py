"""Identification: choose parameter groups, stack residual blocks, optimize, report honestly.

The optimizer is Levenberg-Marquardt / trust-region Gauss-Newton
(``scipy.optimize.least_squares`` with Jacobians from torch forward-mode AD) or Adam, with a
robust loss against outliers. Before optimizing, the Jacobian's conditioning is analysed:
coordinates that the data cannot determine are flagged, kept at their nominal values and
reported as unidentifiable instead of returning arbitrary numbers. Standard deviations come
from the Gauss-Newton covariance scaled by the residual variance, mapped to physical
parameters by the delta method.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.autograd.forward_ad as fwad
from scipy.optimize import least_squares

from diffsim_ros.dynamics.kinematics import forward_kinematics
from diffsim_ros.dynamics.spatial import matrix_to_quat, quat_to_matrix
from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.parameters import GROUPS, ParameterSpace
from diffsim_ros.estimation.residuals import (
    CameraResidual,
    InverseDynamicsResidual,
    RolloutResidual,
    StaticSimulatorResidual,
    StaticTorqueResidual,
)
from diffsim_ros.sim.base import RigidBodySimulator

__all__ = ["IdentificationResult", "identify", "forward_jacobian", "camera_initial_guess", "ROBUST_LOSSES"]

ROBUST_LOSSES = ("linear", "huber", "soft_l1", "cauchy")
CONDITION_LIMIT = 1e7
"""Normalized singular values below s_max / CONDITION_LIMIT span unidentifiable directions."""
NULL_PARTICIPATION = 0.3
"""A coordinate whose unit vector has this much weight in the null space is unidentifiable."""

_NEEDS = {
    "payload": ("static", "trajectories"),
    "spring": ("static", "trajectories"),
    "inertia": ("static", "trajectories"),
    "link_lengths": ("static", "trajectories", "camera"),
    "damping": ("trajectories",),
    "friction": ("trajectories",),
    "camera": ("camera",),
}


@dataclass
class IdentificationResult:
    """What an identification run found.

    Attributes:
        model: Calibrated model (unidentifiable parameters at their nominal values).
        camera_pose: Estimated camera frame in the base frame, (4, 4), or None.
        values: Parameter name -> estimated value (numpy).
        stddev: Parameter name -> standard deviation (numpy, same shape as the value).
        unidentifiable: Parameter name -> reason it was not estimated.
        metrics_before: Residual block -> per-joint RMS (physical units) at the nominal values.
        metrics_after: The same at the estimate.
        history: Total cost after each residual evaluation.
        singular_values: Normalized Jacobian singular values at the start.
        success: Whether the optimizer reported convergence.
        message: Optimizer message.
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


def forward_jacobian(fn, x):
    """Jacobian of ``fn: (P,) -> (M,)`` by forward-mode AD, one pass per coordinate.

    Cheaper than reverse mode for identification, where residuals (M) far outnumber
    parameters (P).

    Returns:
        ``(value (M,), jacobian (M, P))``.
    """
    columns = []
    value = None
    eye = torch.eye(x.shape[0], dtype=x.dtype, device=x.device)
    for i in range(x.shape[0]):
        with fwad.dual_level():
            out = fwad.unpack_dual(fn(fwad.make_dual(x, eye[i])))
            value = out.primal if value is None else value
            columns.append(out.tangent if out.tangent is not None else torch.zeros_like(out.primal))
    if value is None:
        value = fn(x)
    return value.detach(), torch.stack(columns, dim=1).detach() if columns else value.new_zeros(value.shape[0], 0)


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
    mean = vecs[:, -1]
    pose = np.eye(4)
    pose[:3, :3] = quat_to_matrix(torch.as_tensor(mean)).numpy()
    pose[:3, 3] = pos.mean(0)
    return pose


def _check_data(dataset, groups, model):
    dataset.check_joints(model.nq)
    present = {
        "static": dataset.static is not None and len(dataset.static) > 0,
        "trajectories": len(dataset.trajectories) > 0,
        "camera": dataset.camera is not None and len(dataset.camera) > 0,
    }
    for group in groups:
        needs = _NEEDS[group]
        if not any(present[n] for n in needs):
            raise DataError(
                f"group '{group}' needs {' or '.join(n.replace('static', 'static poses') for n in needs)} "
                f"in the data; the data has {[k for k, v in present.items() if v] or 'nothing'}"
            )


def _blocks(model, dataset, groups, simulator, trajectory_loss, horizon, scheme, torque_std, checkpoint_every, stride):
    """Residual blocks that inform the requested groups.

    Static poses inform payload, spring, inertia and link lengths; trajectories inform the
    velocity-dependent groups (damping, friction, inertia) and, only when no static poses
    are given, the static groups too: static balance is the cleaner measurement, and mixing
    in rollout errors would let integration and torque-sampling errors bias it.
    """
    blocks = []
    rigid = simulator is None or isinstance(simulator, RigidBodySimulator)
    static_groups = {"payload", "spring", "inertia", "link_lengths"} & set(groups)
    if dataset.static is not None and static_groups:
        if rigid:
            blocks.append(StaticTorqueResidual(dataset.static, model))
        else:
            blocks.append(StaticSimulatorResidual(dataset.static, model, simulator))
    dynamic_groups = {"damping", "friction", "inertia"} & set(groups)
    if dataset.trajectories and (dynamic_groups or (static_groups and not blocks)):
        if trajectory_loss == "inverse_dynamics":
            blocks.append(InverseDynamicsResidual(dataset.trajectories, model, torque_std))
        elif trajectory_loss == "rollout":
            sim = simulator if simulator is not None else RigidBodySimulator(model, dataset.trajectories[0].dt)
            blocks.append(RolloutResidual(dataset.trajectories, model, sim, horizon, scheme, stride, checkpoint_every))
        else:
            raise ValueError(f"unknown trajectory_loss '{trajectory_loss}' (rollout or inverse_dynamics)")
    if dataset.camera is not None and "camera" in groups:
        blocks.append(CameraResidual(dataset.camera, model))
    return blocks


def _unidentifiable(jac):
    """Flag coordinates the data cannot determine; returns (flags, normalized singular values)."""
    norms = np.linalg.norm(jac, axis=0)
    flags = ~(norms > 0)
    active = ~flags
    if active.any():
        scaled = jac[:, active] / norms[active]
        _, sing, vt = np.linalg.svd(scaled, full_matrices=False)
        weak = sing < sing[0] / CONDITION_LIMIT
        if weak.any():
            participation = np.sqrt((vt[weak] ** 2).sum(0))
            index = np.flatnonzero(active)
            flags[index[participation > NULL_PARTICIPATION]] = True
    else:
        sing = np.zeros(0)
    return flags, sing


def _block_names(space):
    """Coordinate index ranges of each parameter block and the names they determine."""
    start = 0
    for block in space.blocks:
        yield slice(start, start + block.size), block.names
        start += block.size


def _per_block_metrics(blocks, residual, model):
    out, start = {}, 0
    for block in blocks:
        size = block.scale.numel()
        rms = block.per_joint_rms(residual[start : start + size]).cpu().numpy()
        out[block.name] = rms
        start += size
    return out


def identify(
    model,
    dataset,
    groups,
    *,
    simulator=None,
    trajectory_loss="rollout",
    horizon=1,
    scheme="both",
    optimizer="lm",
    robust="huber",
    robust_scale=3.0,
    max_iterations=50,
    camera_guess=None,
    spring_geometry=False,
    torque_std=0.05,
    checkpoint_every=None,
    window_stride=None,
    adam_lr=0.05,
    progress=None,
):
    """Estimate the requested parameter groups from a dataset.

    Args:
        model: Nominal RobotModel (initial values; float64 recommended).
        dataset: :class:`~diffsim_ros.estimation.data.Dataset`.
        groups: Parameter groups, e.g. ``("payload", "spring")``.
        simulator: JointSpaceSimulator for rollout/static losses (``None`` = exact rigid-body
            dynamics; pass a PBD simulator to identify through PBD).
        trajectory_loss: ``"rollout"`` (simulate windows) or ``"inverse_dynamics"``.
        horizon: Rollout window length (1 = one-step loss).
        scheme: Rollout residual on ``"angle"``, ``"velocity"`` or ``"both"``.
        optimizer: ``"lm"`` (scipy least_squares, trust-region reflective with bounds) or ``"adam"``.
        robust: Robust loss (``"linear"``, ``"huber"``, ``"soft_l1"``, ``"cauchy"``).
        robust_scale: Residual size (in standard deviations) where the robust loss bends.
        max_iterations: Residual evaluations (LM) or steps (Adam).
        camera_guess: Initial camera pose (4, 4); default: closed form from the data.
        spring_geometry: Also estimate spring lever lengths l1, l2.
        torque_std: Torque noise for the inverse-dynamics loss [N·m].
        checkpoint_every: Gradient checkpointing block for long rollouts.
        window_stride: Samples between rollout windows (default: the horizon); larger strides
            trade data for speed on long recordings.
        adam_lr: Adam step size in normalized coordinates.
        progress: Optional callable ``progress(cost)`` called after every evaluation
            (e.g. a tqdm bar's update).

    Returns:
        IdentificationResult.

    Raises:
        DataError: Data missing for a group, too few residuals, or nothing identifiable.
        ValueError: Unknown groups, optimizer or loss.
    """
    if robust not in ROBUST_LOSSES:
        raise ValueError(f"unknown robust loss '{robust}'; choose from {ROBUST_LOSSES}")
    if optimizer not in ("lm", "adam"):
        raise ValueError(f"unknown optimizer '{optimizer}' (lm or adam)")
    groups = tuple(dict.fromkeys(groups))
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown parameter groups {unknown}; choose from {list(GROUPS)}")
    _check_data(dataset, groups, model)
    if "camera" in groups and camera_guess is None:
        camera_guess = camera_initial_guess(model, dataset.camera)
    space = ParameterSpace(model, groups, camera_guess, spring_geometry)
    blocks = _blocks(model, dataset, groups, simulator, trajectory_loss, horizon, scheme, torque_std, checkpoint_every, window_stride)
    like = model.params.mass

    def residual(x):
        candidate, camera = space.apply(x)
        return torch.cat([block(candidate, camera) for block in blocks])

    x0 = torch.as_tensor(space.x0, dtype=like.dtype, device=like.device)
    r0, jac0 = forward_jacobian(residual, x0)
    if r0.numel() < space.size:
        raise DataError(
            f"too few data: {r0.numel()} residuals for {space.size} unknowns of groups {list(groups)}; "
            "record more poses or a longer trajectory"
        )
    flags, singular = _unidentifiable(jac0.cpu().numpy())
    free = ~flags
    if not free.any():
        raise DataError(
            f"none of the parameters of groups {list(groups)} is identifiable from these data "
            "(too few or too similar poses, or no excitation)"
        )
    unidentifiable = {}
    for index, names in _block_names(space):
        if flags[index].any():
            for name in names:
                unidentifiable[name] = "not determined by the data (rank-deficient or ill-conditioned Jacobian); kept at nominal"
            flags[index] = True  # a block is estimated whole or not at all
    free = ~flags
    if not free.any():
        raise DataError(f"none of the parameters of groups {list(groups)} is identifiable from these data")

    history = []
    fixed = x0.clone()
    free_t = torch.as_tensor(free, device=like.device)

    def full(z):
        return torch.where(free_t, torch.zeros_like(fixed), fixed).index_put((free_t.nonzero().flatten(),), z)

    def free_residual(z):
        return residual(full(z))

    z0 = x0[free_t]
    lower, upper = space.lower[free], space.upper[free]
    if optimizer == "lm":
        # Far from the solution every residual looks like an outlier and a robust loss
        # degenerates to slow L1 steps: converge in plain least squares first, then refine.
        if robust != "linear":
            z0, _, _, _ = _least_squares(free_residual, z0, lower, upper, "linear", robust_scale, max_iterations, history, progress)
        z_opt, success, message, jac = _least_squares(free_residual, z0, lower, upper, robust, robust_scale, max_iterations, history, progress)
    else:
        z_opt, success, message, jac = _adam(free_residual, z0, lower, upper, robust, robust_scale, max_iterations, adam_lr, history, progress)
    x_opt = full(z_opt)

    r_opt = residual(x_opt).detach()
    dof = max(1, r_opt.numel() - int(free.sum()))
    variance = float(_robust_cost(r_opt.cpu().numpy(), robust, robust_scale) * 2.0 / dof)
    cov = variance * np.linalg.pinv(jac.T @ jac)
    values, stddev = _physical_report(space, x_opt, free_t, cov, unidentifiable)
    calibrated, camera = space.apply(x_opt)
    calibrated = calibrated.replace(params=calibrated.params.detach())
    return IdentificationResult(
        model=calibrated,
        camera_pose=None if camera is None else camera.detach().cpu().numpy(),
        values=values,
        stddev=stddev,
        unidentifiable=unidentifiable,
        metrics_before=_per_block_metrics(blocks, r0, model),
        metrics_after=_per_block_metrics(blocks, r_opt, calibrated),
        history=history,
        singular_values=singular,
        success=success,
        message=message,
    )


def _robust_cost(residual, robust, scale):
    """0.5 * sum rho(r^2) with scipy's robust-loss definitions."""
    z = (residual / scale) ** 2
    if robust == "linear":
        rho = z
    elif robust == "huber":
        rho = np.where(z <= 1, z, 2 * np.sqrt(z) - 1)
    elif robust == "soft_l1":
        rho = 2 * (np.sqrt(1 + z) - 1)
    else:
        rho = np.log1p(z)
    return 0.5 * scale**2 * rho.sum()


def _least_squares(fn, z0, lower, upper, robust, scale, max_iterations, history, progress):
    cache = {}

    def evaluate(z):
        key = z.tobytes()
        if key not in cache:
            cache.clear()
            value, jac = forward_jacobian(fn, torch.as_tensor(z, dtype=z0.dtype, device=z0.device))
            cache[key] = (value.cpu().numpy(), jac.cpu().numpy())
            cost = _robust_cost(cache[key][0], robust, scale)
            history.append(cost)
            if progress is not None:
                progress(cost)
        return cache[key]

    bounded = np.isfinite(lower).any() or np.isfinite(upper).any()
    result = least_squares(
        lambda z: evaluate(z)[0],
        z0.cpu().numpy(),
        jac=lambda z: evaluate(z)[1],
        bounds=(lower, upper) if bounded else (-np.inf, np.inf),
        method="trf",
        loss=robust,
        f_scale=scale,
        x_scale="jac",
        max_nfev=max_iterations,
        ftol=1e-12,
        xtol=1e-12,
        gtol=1e-12,
    )
    z = torch.as_tensor(result.x, dtype=z0.dtype, device=z0.device)
    return z, bool(result.success), str(result.message), result.jac


def _adam(fn, z0, lower, upper, robust, scale, steps, lr, history, progress):
    """Adam in coordinates normalized by their magnitude, projected onto the bounds."""
    typical = torch.clamp(z0.abs(), min=1e-2)
    u = torch.zeros_like(z0, requires_grad=True)
    opt = torch.optim.Adam([u], lr=lr)
    low = torch.as_tensor(lower, dtype=z0.dtype, device=z0.device)
    high = torch.as_tensor(upper, dtype=z0.dtype, device=z0.device)
    huber = torch.nn.HuberLoss(reduction="sum", delta=scale)
    for _ in range(int(steps)):
        opt.zero_grad()
        r = fn(z0 + typical * u)
        loss = 0.5 * r.square().sum() if robust == "linear" else huber(r, torch.zeros_like(r))
        loss.backward()
        opt.step()
        with torch.no_grad():
            u.copy_(((z0 + typical * u).clamp(low, high) - z0) / typical)
        history.append(float(loss))
        if progress is not None:
            progress(float(loss))
    z = (z0 + typical * u).detach()
    _, jac = forward_jacobian(fn, z)
    return z, True, f"Adam: {int(steps)} steps", jac.cpu().numpy()


def _physical_report(space, x_opt, free_t, cov, unidentifiable):
    """Named values and delta-method standard deviations of the identified parameters."""
    names = [n for block in space.blocks for n in block.names if n not in unidentifiable]

    def flat(z):
        full = x_opt.detach().clone()
        full = full.index_put((free_t.nonzero().flatten(),), z)
        phys = space.physical(full)
        return torch.cat([phys[n].reshape(-1) for n in names])

    z = x_opt[free_t].detach()
    value, jac = forward_jacobian(flat, z)
    jac = jac.cpu().numpy()
    std = np.sqrt(np.clip(np.einsum("ij,jk,ik->i", jac, cov, jac), 0.0, None))
    values, stddev, start = {}, {}, 0
    phys = space.physical(x_opt.detach())
    for name in names:
        shape = tuple(phys[name].shape)
        size = int(np.prod(shape)) if shape else 1
        values[name] = value[start : start + size].cpu().numpy().reshape(shape)
        stddev[name] = std[start : start + size].reshape(shape)
        start += size
    return values, stddev

