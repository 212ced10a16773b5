"""Generalized forces and energies of the spring elements (laws: :mod:`diffsim_ros.model.springs`).

Everything is batched over leading dimensions and differentiable in the joint state and in
every spring parameter. A point spring acts through its ends' point Jacobians:
``tau = f dL/dq`` with ``f = -k (L - L0) - c dL/dt`` the force along the line (positive
pushes the ends apart) and ``dL/dq = u . (J_b - J_a)``, ``u`` the unit vector from end a to
end b; joints that move both ends contribute nothing, as they move the spring rigidly.

Damping enters the integrators where joint damping does: the torsion law's dashpot adds to
the joint's damping, and a point spring's damping matrix ``c dL/dq dL/dq^T`` is split into
its diagonal, taken implicitly like joint damping, and the coupling between joints, taken
explicitly (:func:`spring_damping_split`).
"""

import math

import torch

from diffsim_ros.dynamics.checks import joint_tensor
from diffsim_ros.dynamics.kinematics import body_placements, motion_subspace
from diffsim_ros.dynamics.spatial import matvec

__all__ = [
    "spring_lengths",
    "point_spring_lengths",
    "spring_potential_energy",
    "spring_torques",
    "spring_damping_split",
]


def _lever_angles(model, q):
    """Law-of-cosines angle ``pi - alpha1 - alpha2 + theta`` of every lever spring, shape (..., s)."""
    p = model.params
    theta = q[..., list(model.spring_joints)]
    return math.pi - p.spring_alpha1 - p.spring_offset + theta


def spring_lengths(model, q):
    """Lever spring lengths ``x(theta)`` [m], shape (..., s)."""
    q = joint_tensor(model, "q", q)
    p = model.params
    phi = _lever_angles(model, q)
    return torch.sqrt(p.spring_l1**2 + p.spring_l2**2 - 2.0 * p.spring_l1 * p.spring_l2 * torch.cos(phi))


def _ends(model, q, rot, pos):
    """World positions [m] of both ends of every point spring, each (..., c, 3)."""
    batch = q.shape[:-1]
    eye = torch.eye(3, dtype=q.dtype, device=q.device).expand(*batch, 1, 3, 3)
    rot_all = torch.cat([eye, rot], dim=-3)  # index 0: the base
    pos_all = torch.cat([q.new_zeros(*batch, 1, 3), pos], dim=-2)
    ends = []
    for side, anchor in (("a", model.params.point_anchor_a), ("b", model.params.point_anchor_b)):
        layouts = model.point_springs
        placement = torch.stack([model.frames[getattr(e, f"link_{side}")].placement for e in layouts])
        bodies = [getattr(e, f"body_{side}") + 1 for e in layouts]
        local = matvec(placement[:, :3, :3], anchor) + placement[:, :3, 3]  # in the body frame
        ends.append(pos_all[..., bodies, :] + matvec(rot_all[..., bodies, :, :], local))
    return ends


def _point_geometry(model, q):
    """Lengths L [m] (..., c) and their gradients dL/dq [m/rad or m/m] (..., c, n) of the point springs."""
    rot, pos = body_placements(model, q)
    end_a, end_b = _ends(model, q, rot, pos)
    delta = end_b - end_a
    length = torch.linalg.vector_norm(delta, dim=-1)
    unit = delta / length[..., None]
    s_ang, s_lin = motion_subspace(model)
    z_ang, z_lin = matvec(rot, s_ang), matvec(rot, s_lin)  # (..., n, 3) world joint axes
    support = torch.cat([model.support.new_zeros(1, model.nq), model.support])  # row 0: the base
    grad = 0.0
    for end, side, sign in ((end_a, "a", -1.0), (end_b, "b", 1.0)):
        lever = end[..., :, None, :] - pos[..., None, :, :]  # (..., c, n, 3)
        velocity = torch.cross(z_ang[..., None, :, :].expand_as(lever), lever, dim=-1) + z_lin[..., None, :, :]
        moved = support[[getattr(e, f"body_{side}") + 1 for e in model.point_springs]]  # (c, n)
        grad = grad + sign * (velocity * unit[..., :, None, :]).sum(-1) * moved
    return length, grad


def point_spring_lengths(model, q):
    """Point spring lengths L [m], shape (..., c)."""
    q = joint_tensor(model, "q", q)
    rot, pos = body_placements(model, q)
    end_a, end_b = _ends(model, q, rot, pos)
    return torch.linalg.vector_norm(end_b - end_a, dim=-1)


def _point_active(model, length):
    """Stretch L - L0 [m] and whether each point spring acts (a slack cable does not), each (..., c)."""
    stretch = length - model.params.point_rest_length
    cable = torch.tensor([e.tension_only for e in model.point_springs], device=length.device)
    return stretch, ~cable | (stretch > 0)


def spring_potential_energy(model, q):
    """Elastic energy of every spring element [J], summed, shape (...)."""
    q = joint_tensor(model, "q", q)
    p = model.params
    energy = (0.5 * p.spring_stiffness * (spring_lengths(model, q) - p.spring_rest_length) ** 2).sum(-1)
    if model.torsion_joints:
        angle = q[..., list(model.torsion_joints)] - p.torsion_offset
        energy = energy + (0.5 * p.torsion_stiffness * angle**2).sum(-1)
    if model.point_springs:
        stretch, active = _point_active(model, point_spring_lengths(model, q))
        energy = energy + (0.5 * p.point_stiffness * torch.where(active, stretch, 0.0) ** 2).sum(-1)
    return energy


def spring_torques(model, q, qd=None):
    """Generalized forces [N·m or N] of every spring element on the joints.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).
        qd: Joint velocities [rad/s or m/s], shape (..., n), or None: the elastic part
            ``-dV/dq`` only (what holds the arm at rest).

    Returns:
        Shape (..., n): zero on joints no spring acts on.
    """
    q = joint_tensor(model, "q", q)
    qd = None if qd is None else joint_tensor(model, "qd", qd)
    p = model.params
    tau = torch.zeros_like(q)
    if model.spring_joints:
        phi = _lever_angles(model, q)
        length = torch.sqrt(p.spring_l1**2 + p.spring_l2**2 - 2.0 * p.spring_l1 * p.spring_l2 * torch.cos(phi))
        dlength = p.spring_l1 * p.spring_l2 * torch.sin(phi) / length
        torque = -p.spring_stiffness * (length - p.spring_rest_length) * dlength
        index = torch.tensor(model.spring_joints, device=q.device)
        tau = tau.index_add(-1, index, torque.expand(*q.shape[:-1], len(model.spring_joints)))
    if model.torsion_joints:
        joints = list(model.torsion_joints)
        torque = -p.torsion_stiffness * (q[..., joints] - p.torsion_offset)
        if qd is not None:
            torque = torque - p.torsion_damping * qd[..., joints]
        tau = tau.index_add(-1, torch.tensor(joints, device=q.device), torque)
    if model.point_springs:
        length, grad = _point_geometry(model, q)
        stretch, active = _point_active(model, length)
        force = -p.point_stiffness * torch.where(active, stretch, 0.0)
        if qd is not None:
            rate = (grad * qd[..., None, :]).sum(-1)
            force = force - torch.where(active, p.point_damping * rate, 0.0)
        tau = tau + (force[..., None] * grad).sum(-2)
    return tau


def spring_damping_split(model, q, rate):
    """The springs' damping torque ``-C(q) rate`` split for implicit integration.

    ``C`` is the damping matrix of all spring elements (torsion dashpots on the diagonal,
    ``c dL/dq dL/dq^T`` for every acting point spring). Its diagonal ``slope`` joins the
    joint damping wherever that is taken implicitly; the rest is an explicit torque.

    Args:
        model: RobotModel.
        q: Joint positions [rad or m], shape (..., n).
        rate: Joint velocities the explicit part is evaluated at [rad/s or m/s], (..., n).

    Returns:
        ``(explicit torque [N·m or N], slope [N·m·s/rad or N·s/m])``, each (..., n), with
        ``explicit - slope * rate`` the springs' damping torque at ``rate``.
    """
    q = joint_tensor(model, "q", q)
    p = model.params
    shape = torch.broadcast_shapes(q.shape, rate.shape)
    slope, explicit = q.new_zeros(shape), q.new_zeros(shape)
    if model.torsion_joints:
        index = torch.tensor(model.torsion_joints, device=q.device)
        slope = slope.index_add(-1, index, p.torsion_damping.expand(*shape[:-1], len(model.torsion_joints)))
    if model.point_springs:
        length, grad = _point_geometry(model, q)
        _, active = _point_active(model, length)
        damping = torch.where(active, p.point_damping, 0.0)[..., None]  # (..., c, 1)
        slope = slope + (damping * grad**2).sum(-2)
        own = grad * rate[..., None, :]  # each joint's share of dL/dt
        explicit = explicit - (damping * grad * (own.sum(-1, keepdim=True) - own)).sum(-2)
    return explicit, slope
