"""Exact Jacobians of the simulator residual blocks from the compiled PBD step's tangents.

A simulator block's residual depends on the candidate model through the simulator snapshot's
parameter arrays (masses, inertias, COMs, joint frames, damping, friction, armature, springs),
the torques it applies (efforts less their bias, read later by their delay) and, for the
simulator-dynamics loss, the mass matrices its velocity errors are weighed with. Their
Jacobians in the identification's coordinates come from one vectorized forward-mode pass of
the torch code that builds them (per model, not per sample); the step's come from the compiled
kernel's tangents along those directions (:func:`~diffsim_ros.sim.pbd.fast_jacobians.
pbd_rollout_parameter_tangents`), chained through every step of a rollout window. No finite
differences: exact to rounding (test/test_simulator_jacobians.py holds them to forward mode
through the torch step).
"""

import numpy as np
import torch

from diffsim_ros.dynamics import mass_matrix
from diffsim_ros.dynamics.regressor import inertial_parameters, joint_torque_regressor, regressor_torques
from diffsim_ros.estimation import solvers
from diffsim_ros.estimation.residuals import RolloutResidual, SimulatorDynamicsResidual, torques_applied
from diffsim_ros.sim.pbd import PBDError, PBDSimulator
from diffsim_ros.sim.pbd.fast import FastPBD
from diffsim_ros.sim.pbd.fast_jacobians import parameter_tensors, pbd_rollout_parameter_tangents
from diffsim_ros.sim.pbd.fast_tangents import PARAMETER_SEEDS

__all__ = ["tangent_support", "value_and_jacobian"]


def tangent_support(block, apply, z):
    """Why ``block``'s Jacobian cannot come from compiled tangents at coordinates ``z``, or None.

    Args:
        block: A residual block.
        apply: Coordinates (P,) -> candidate RobotModel (differentiable).
        z: Coordinates (P,).
    """
    sim = getattr(block, "simulator", None)
    if not isinstance(block, (SimulatorDynamicsResidual, RolloutResidual)) or not isinstance(sim, PBDSimulator):
        return "not a PBD simulator block"
    reason = sim.fast_rollout_supported()
    if reason is not None:
        return reason
    _, tangents, held = _linearization(apply, z, lambda model: ())
    if held:
        return f"the coordinates move {', '.join(held)}, which the compiled step's tangents hold constant"
    return None


_HELD_NAMES = ("joint origins", "lever spring geometry (alpha1)", "lever spring geometry (l1)",
               "lever spring geometry (l2)", "lever spring rest lengths", "torsion spring damping", "point spring ends (a)",
               "point spring ends (b)", "point spring stiffness", "point spring rest lengths", "point spring damping",
               "gravity")


def _linearization(apply, z, extra):
    """Values and tangents (P, *shape) of the snapshot's seeded arrays and of ``extra(model)``,
    and the names of the held arrays the coordinates move."""
    shapes = []

    def flat(w):
        model = apply(w)
        seeded, held = parameter_tensors(model)
        parts = list(seeded) + list(held) + list(extra(model))
        shapes[:] = [(len(seeded), len(held))] + [tuple(p.shape) for p in parts]
        return torch.cat([p.reshape(-1) for p in parts])

    value, jac = solvers.forward_jacobian(flat, z)
    (seeded, held), shapes = shapes[0], shapes[1:]
    values, tangents, start = [], [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        values.append(value[start : start + size].reshape(shape))
        tangents.append(jac[start : start + size].T.reshape(z.shape[0], *shape))
        start += size
    moved = [_HELD_NAMES[k] for k in range(held) if bool((tangents[seeded + k] != 0).any())]
    return values[: seeded] + values[seeded + held :], tangents[: seeded] + tangents[seeded + held :], moved


def value_and_jacobian(block, apply, z):
    """Residual (M,) and its exact Jacobian (M, P) of a PBD simulator block at coordinates ``z``.

    Args:
        block: SimulatorDynamicsResidual or RolloutResidual through a PBDSimulator whose
            compiled kernel applies (:func:`tangent_support` is None).
        apply: Coordinates (P,) -> candidate RobotModel (differentiable).
        z: Coordinates (P,).
    """
    if isinstance(block, RolloutResidual):
        return _rollout(block, apply, z)
    return _simulator_dynamics(block, apply, z)


def _steps(block, apply, z, extra, q0, qd0):
    """Rollouts of the candidate model from ``(q0, qd0)`` (B, n) with their tangents.

    ``extra(model)`` returns the applied torques (B, T, n) first, then anything else to
    linearize. Returns ``(q, qd, dq, dqd, others, other_tangents)``: states (B, T, n), their
    tangents (B, T, P, n), and the values and tangents (P, ...) of the rest of ``extra``.
    """
    values, tangents, moved = _linearization(apply, z, extra)
    if moved:
        raise ValueError(f"the coordinates move {', '.join(moved)}: outside the compiled tangents' scope")
    count = len(PARAMETER_SEEDS)  # the seeded arrays come first
    seeds = [t.numpy() for t in tangents[:count]]
    tau, dtau = values[count], tangents[count]  # (B, T, n), (P, B, T, n)
    with torch.no_grad():
        model = apply(z)
    sim = block.simulator.with_model(model)
    batch, n = q0.shape
    zeros = np.zeros((batch, z.shape[0], n))
    q, qd, dq, dqd = pbd_rollout_parameter_tangents(
        FastPBD.from_model(model), sim.dt, sim.settings, seeds, q0.numpy(), qd0.numpy(), zeros, zeros, tau.numpy(),
        dtau.permute(1, 2, 0, 3).numpy())
    if not (np.isfinite(q).all() and np.isfinite(qd).all()):
        raise PBDError("PBD simulation diverged: non-finite joint states; reduce dt or increase substeps")
    like = block.scale
    states = [torch.as_tensor(x, dtype=like.dtype, device=like.device) for x in (q, qd, dq, dqd)]
    return (*states, values[count + 1 :], tangents[count + 1 :])


def _finish(block, error, d_error):
    """``block._finish`` of errors (..., c) and of their tangents (..., P, c): (M,), (M, P)."""
    residual = block._finish(error)
    scaled = d_error / block.scale.reshape(error.shape).unsqueeze(-2)
    if block.weight is not None:
        scaled = scaled * block.weight.reshape(error.shape).unsqueeze(-2)
    return residual, scaled.movedim(-2, -1).reshape(residual.shape[0], -1)


def _simulator_dynamics(block, apply, z):
    """``M(q) (qd + h qdd - qd_1) / h`` over the samples and its Jacobian.

    ``M v`` is linear in the inertial parameters and the armature (the joint-torque regressor
    at ``(q, 0, v)`` less its gravity part), so only those few (n, 10) and (n,) are linearized
    in torch, not a mass matrix per sample.
    """
    def extra(model):
        return (torques_applied(block.tau, block.efforts, model, block.rate)[:, None, :], inertial_parameters(model),
                model.params.armature)

    _, qd1, _, dqd1, (inertials, armature), (d_inertials, d_armature) = _steps(block, apply, z, extra, block.q, block.qd)
    h = block.simulator.dt
    missing = (block.qd + h * block.qdd - qd1[:, 0]) / h  # (N, n)
    with torch.no_grad():
        model = apply(z)
        rest = torch.zeros_like(missing)
        regressor = joint_torque_regressor(model, block.q, rest, missing) - joint_torque_regressor(model, block.q, rest, rest)
        inertia = mass_matrix(model, block.q)
    error = regressor_torques(regressor, inertials) + armature * missing
    flat = regressor.reshape(*regressor.shape[:2], -1)  # (N, n, n * 10)
    d_error = (torch.einsum("nik,pk->npi", flat, d_inertials.reshape(d_inertials.shape[0], -1))
               + d_armature[None] * missing[:, None, :] - torch.einsum("nij,npj->npi", inertia, dqd1[:, 0]) / h)
    return _finish(block, error, d_error)


def _rollout(block, apply, z):
    """Simulated minus measured states at the windows' samples (``block.scheme``) and the Jacobian."""
    d = block.data
    q, qd, dq, dqd, _, _ = _steps(block, apply, z, lambda model: (torques_applied(d["tau"], block.efforts, model),),
                                  d["q0"], d["qd0"])
    m = block.steps_per_sample
    q, qd, dq, dqd = q[:, m - 1 :: m], qd[:, m - 1 :: m], dq[:, m - 1 :: m], dqd[:, m - 1 :: m]
    errors = {"angle": (q - d["q"], dq), "velocity": (qd - d["qd"], dqd)}
    if block.scheme == "both":
        error, d_error = (torch.cat([errors["angle"][k], errors["velocity"][k]], -1) for k in (0, 1))
    elif block.scheme == "torque":
        error = (block.metric @ errors["velocity"][0][..., None])[..., 0]
        d_error = torch.einsum("wkij,wkpj->wkpi", block.metric, dqd)
    else:
        error, d_error = errors[block.scheme]
    return _finish(block, error, d_error)
