"""Joint space <-> particle state (paper Algorithm 2, made exact and robust).

``state_from_joints`` places every particle by forward kinematics and gives it the exact
rigid-body velocity of the joint motion; ``joints_from_state`` reads joint positions as
signed twist angles (atan2) and joint velocities as relative particle velocities.
"""

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.kinematics import body_placements, motion_subspace
from diffsim_ros.dynamics.spatial import matrix_to_quat, matvec, quat_to_matrix
from diffsim_ros.sim.pbd.bodies import build_system
from diffsim_ros.sim.pbd.frames import frame_coordinates, joint_coordinates, joint_directions, joint_frames, joint_rates
from diffsim_ros.sim.pbd.state import PBDState

__all__ = ["state_from_joints", "joint_positions", "joint_velocities", "joints_from_state"]


def _with_base(rows, base_row):
    """Prepend the fixed base particle's row to per-body rows (..., n, k) -> (..., N, k)."""
    return torch.cat([base_row.expand(*rows.shape[:-2], 1, rows.shape[-1]), rows], dim=-2)


def state_from_joints(model, q, qd, system=None):
    """Particle state of the robot at joint positions ``q`` moving with velocities ``qd``.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).
        qd: Joint velocities [rad/s or m/s], shape (..., n).
        system: PBDSystem of ``model`` (built when None).

    Returns:
        PBDState with batch shape ``broadcast(q, qd)[:-1]``; differentiable in ``q``, ``qd``
        and the model parameters.
    """
    q = joint_tensor(model, "q", q)
    qd = joint_tensor(model, "qd", qd)
    q, qd = torch.broadcast_tensors(q, qd)
    system = build_system(model) if system is None else system
    rot, origin = body_placements(model, q)
    com = origin + matvec(rot, system.bodies.com[1:])
    s_ang, s_lin = motion_subspace(model)
    z_ang = matvec(rot, s_ang) * qd[..., None]  # world angular velocity contributed by each joint
    z_lin = matvec(rot, s_lin) * qd[..., None]
    support = model.support  # [body k, joint j]
    omega = torch.einsum("kj,...jd->...kd", support, z_ang)
    # v_k = sum_j (w_j x (c_k - o_j) + v_j) = omega_k x c_k - sum_j w_j x o_j + sum_j v_j
    moment = torch.cross(z_ang, origin, dim=-1) - z_lin
    vel = torch.cross(omega, com, dim=-1) - torch.einsum("kj,...jd->...kd", support, moment)
    zero3 = torch.zeros(3, dtype=model.dtype, device=model.device)
    identity = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=model.dtype, device=model.device)
    return PBDState(
        pos=_with_base(com, zero3),
        quat=_with_base(matrix_to_quat(rot), identity),
        vel=_with_base(vel, zero3),
        omega=_with_base(omega, zero3),
    )


def joint_positions(model, state, q_ref=None, system=None):
    """Joint positions [rad or m] of a particle state, shape (..., n).

    Args:
        model: RobotModel.
        state: PBDState.
        q_ref: Optional joint positions, shape (..., n): revolute angles are unwrapped to the
            branch nearest ``q_ref`` (continuous joints stay continuous across +-pi).
        system: PBDSystem of ``model`` (built when None).
    """
    system = build_system(model) if system is None else system
    return joint_coordinates(system.joints, state.pos, state.quat, q_ref)


def joint_velocities(model, state, system=None):
    """Joint velocities [rad/s or m/s] of a particle state, shape (..., n)."""
    return joints_from_state(model, state, system=system)[1]


def joints_from_state(model, state, q_ref=None, system=None):
    """``(q, qd)`` of a particle state, each shape (..., n) (see :func:`joint_positions`)."""
    system = build_system(model) if system is None else system
    frames = joint_frames(system.joints, state.pos, quat_to_matrix(state.quat))
    rates = joint_rates(system.joints, joint_directions(system.joints, frames), state.vel, state.omega)
    return frame_coordinates(system.joints, frames, q_ref), rates
