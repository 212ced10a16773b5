"""Forward kinematics and geometric Jacobians (batched over leading dimensions).

"World" below means the frame of the model's base link, in which gravity is expressed.
"""

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.spatial import axis_angle_to_matrix, matvec
from diffsim_ros.model.robot_model import PRISMATIC, REVOLUTE

__all__ = [
    "joint_placements",
    "body_placements",
    "forward_kinematics",
    "frame_jacobian",
    "motion_subspace",
]


def motion_subspace(model):
    """Angular and linear parts of each joint's motion subspace in its own frame.

    Returns:
        ``(s_ang, s_lin)``, each shape (n, 3): the unit axis in ``s_ang`` for revolute joints
        and in ``s_lin`` for prismatic joints, zeros elsewhere.
    """
    revolute = torch.tensor([t == REVOLUTE for t in model.joint_types], dtype=model.dtype, device=model.device)
    return model.joint_axis * revolute[:, None], model.joint_axis * (1.0 - revolute)[:, None]


def joint_placements(model, q):
    """Placement of every body frame in its parent body frame.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n), already validated.

    Returns:
        ``(rot, pos)``: rotations shape (..., n, 3, 3) and translations [m] shape (..., n, 3)
        of body i's frame expressed in body parents[i]'s frame.
    """
    s_ang, s_lin = motion_subspace(model)
    is_rev = s_ang.abs().sum(-1) > 0
    angle = torch.where(is_rev, q, torch.zeros_like(q))
    rot = model.joint_origin_rot @ axis_angle_to_matrix(model.joint_axis, angle)
    slide = torch.where(is_rev, torch.zeros_like(q), q)
    pos = model.params.joint_origin_xyz + matvec(model.joint_origin_rot, s_lin) * slide[..., None]
    return rot, pos


def body_placements(model, q):
    """World placement of every body frame (= joint frame).

    Args:
        model: RobotModel.
        q: Joint positions, shape (..., n), already validated.

    Returns:
        ``(rot, pos)``: shapes (..., n, 3, 3) and (..., n, 3) [m].
    """
    rot_local, pos_local = joint_placements(model, q)
    rots, poss = [], []
    for i, parent in enumerate(model.parents):
        if parent < 0:
            rots.append(rot_local[..., i, :, :])
            poss.append(pos_local[..., i, :])
        else:
            rots.append(rots[parent] @ rot_local[..., i, :, :])
            poss.append(poss[parent] + matvec(rots[parent], pos_local[..., i, :]))
    return torch.stack(rots, dim=-3), torch.stack(poss, dim=-2)


def _frame_pose(model, rot, pos, link):
    """World (rot, pos) of a link frame from body placements."""
    frame = model.frame(link)
    placement = frame.placement
    if frame.body < 0:
        shape = rot.shape[:-3]
        return placement[:3, :3].expand(*shape, 3, 3), placement[:3, 3].expand(*shape, 3)
    r_body = rot[..., frame.body, :, :]
    return r_body @ placement[:3, :3], pos[..., frame.body, :] + matvec(r_body, placement[:3, 3])


def _homogeneous(rot, pos):
    bottom = torch.zeros(*rot.shape[:-2], 1, 4, dtype=rot.dtype, device=rot.device)
    bottom[..., 0, 3] = 1.0
    return torch.cat([torch.cat([rot, pos[..., None]], dim=-1), bottom], dim=-2)


def forward_kinematics(model, q, link=None):
    """Homogeneous poses of link frames in the base frame.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).
        link: A link name -> one pose; a sequence of names -> stacked poses; None -> every
            frame in ``model.frame_names``.

    Returns:
        Shape (..., 4, 4) for one link, (..., k, 4, 4) for k links.
    """
    q = joint_tensor(model, "q", q)
    rot, pos = body_placements(model, q)
    if isinstance(link, str):
        return _homogeneous(*_frame_pose(model, rot, pos, link))
    names = model.frame_names if link is None else list(link)
    poses = [_homogeneous(*_frame_pose(model, rot, pos, name)) for name in names]
    return torch.stack(poses, dim=-3)


def frame_jacobian(model, q, link):
    """Geometric Jacobian of a link frame, world-aligned, at the frame origin.

    Rows are ``[v; omega]``: the linear velocity of the frame origin, then the angular
    velocity, both in base-frame axes (Pinocchio's ``LOCAL_WORLD_ALIGNED`` convention).

    Args:
        model: RobotModel.
        q: Joint positions, shape (..., n).
        link: Link name.

    Returns:
        Jacobian, shape (..., 6, n).
    """
    q = joint_tensor(model, "q", q)
    rot, pos = body_placements(model, q)
    _, point = _frame_pose(model, rot, pos, link)
    body = model.frame(link).body
    s_ang, s_lin = motion_subspace(model)
    z_ang = matvec(rot, s_ang)  # revolute axes in world, zero for prismatic
    z_lin = matvec(rot, s_lin)
    mask = model.support[body] if body >= 0 else torch.zeros_like(model.support[0])
    lever = point[..., None, :] - pos
    linear = (torch.cross(z_ang, lever, dim=-1) + z_lin) * mask[:, None]
    angular = z_ang * mask[:, None]
    return torch.cat([linear, angular], dim=-1).transpose(-1, -2)
