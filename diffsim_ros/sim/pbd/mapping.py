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


def state_from_joints(model, q, qd, system=None, base_pose=None, base_twist=None):
    """Particle state of the robot at joint positions ``q`` moving with velocities ``qd``.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).
        qd: Joint velocities [rad/s or m/s], shape (..., n).
        system: PBDSystem of ``model`` (built when None).
        base_pose: Optional ``(position [m] (..., 3), quaternion (..., 4))`` of the base link
            frame in the world (free bases); identity when None.
        base_twist: Optional ``(linear velocity of the base link origin [m/s] (..., 3),
            angular velocity [rad/s] (..., 3))`` in the world; zero when None.

    Returns:
        PBDState with batch shape ``broadcast(q, qd)[:-1]``; differentiable in ``q``, ``qd``,
        the base pose and twist, and the model parameters.
    """
    q = joint_tensor(model, "q", q)
    qd = joint_tensor(model, "qd", qd)
    q, qd = torch.broadcast_tensors(q, qd)
    system = build_system(model) if system is None else system
    rot, origin = body_placements(model, q)
    s_ang, s_lin = motion_subspace(model)
    z_ang = matvec(rot, s_ang) * qd[..., None]  # world angular velocity contributed by each joint
    z_lin = matvec(rot, s_lin) * qd[..., None]
    zero3 = torch.zeros(3, dtype=model.dtype, device=model.device)
    identity = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=model.dtype, device=model.device)
    base_pos, base_quat = (zero3, identity) if base_pose is None else base_pose
    base_vel, base_omega = (zero3, zero3) if base_twist is None else base_twist
    base_rot = quat_to_matrix(base_quat)[..., None, :, :]
    rot, origin = base_rot @ rot, base_pos[..., None, :] + matvec(base_rot, origin)
    z_ang, z_lin = matvec(base_rot, z_ang), matvec(base_rot, z_lin)
    com = origin + matvec(rot, system.bodies.com[1:])
    support = model.support  # [body k, joint j]
    omega = base_omega[..., None, :] + torch.einsum("kj,...jd->...kd", support, z_ang)
    # v_k = v_b + w_b x (c_k - p_b) + sum_j (w_j x (c_k - o_j) + v_j)
    moment = torch.cross(z_ang, origin, dim=-1) - z_lin
    joint_part = torch.cross(omega - base_omega[..., None, :], com, dim=-1) - torch.einsum("kj,...jd->...kd", support, moment)
    vel = base_vel[..., None, :] + torch.cross(base_omega[..., None, :].expand_as(com), com - base_pos[..., None, :], dim=-1) + joint_part
    base_com = base_pos + matvec(base_rot[..., 0, :, :], system.bodies.com[0])
    base_row = (base_com, base_quat, base_vel + torch.cross(base_omega, base_com - base_pos, dim=-1), base_omega)
    batch = torch.broadcast_shapes(com.shape[:-2], *(t.shape[:-1] for t in base_row))
    rows = (com, matrix_to_quat(rot), vel, omega)
    return PBDState(
        *(
            torch.cat([b.expand(*batch, b.shape[-1])[..., None, :], r.expand(*batch, *r.shape[-2:])], dim=-2)
            for b, r in zip(base_row, rows)
        )
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
