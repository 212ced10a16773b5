"""World-level contact detection: every shape's pose, the pairs that may touch, their contacts.

:mod:`~diffsim_ros.sim.contact.detection` answers for one pair of shapes (the narrow phase);
this module answers for a whole :class:`~diffsim_ros.sim.contact.world.ContactWorld`: it poses
every shape (objects from the state, robot link proxies through forward kinematics, static
shapes), skips pairs that cannot touch within the margin (bounding spheres, a separating box
axis), and bounds how far any surface point can travel in a step (the speculative margin of
:func:`~diffsim_ros.sim.contact.step.step`).
"""

import math

import torch

from diffsim_ros.dynamics.kinematics import forward_kinematics, frame_jacobian
from diffsim_ros.dynamics.spatial import matvec, quat_normalize, quat_to_matrix
from diffsim_ros.sim.contact.detection import Contacts, boxes_apart, collide, concat_contacts
from diffsim_ros.sim.contact.shapes import Box, bounding_radius

__all__ = ["shape_poses", "detect", "speed_bound", "objects_may_touch"]


def shape_poses(world, state):
    """World poses of every shape.

    Args:
        world: ContactWorld.
        state: WorldState.

    Returns:
        ``{(kind, index): (rot (..., 3, 3), pos (..., 3) [m])}`` for kind ``"object"``,
        ``"proxy"`` (through the robot's forward kinematics) and ``"static"``.
    """
    obj_rot = quat_to_matrix(quat_normalize(state.orientation))
    poses = {("object", i): (obj_rot[..., i, :, :], state.position[..., i, :]) for i in range(len(world.objects))}
    if world.proxies:
        links = [p.link for p in world.proxies]
        frames = forward_kinematics(world.robot.model, state.q, links)
        for i, proxy in enumerate(world.proxies):
            offset_rot = quat_to_matrix(torch.tensor(proxy.orientation, dtype=world.dtype, device=world.device))
            offset_pos = torch.tensor(proxy.position, dtype=world.dtype, device=world.device)
            rot = frames[..., i, :3, :3]
            poses[("proxy", i)] = (rot @ offset_rot, frames[..., i, :3, 3] + matvec(rot, offset_pos))
    for i, shape in enumerate(world.static):
        rot = quat_to_matrix(torch.tensor(shape.orientation, dtype=world.dtype, device=world.device))
        poses[("static", i)] = (rot, torch.tensor(shape.position, dtype=world.dtype, device=world.device))
    return poses


def detect(world, state, margin=None, skip_apart=False):
    """All contact slots at a state (:class:`Contacts`, K = ``world.slot_count``).

    Args:
        world: ContactWorld.
        state: WorldState.
        margin: Activation distance [m]; default ``world.options.margin``.
        skip_apart: Skip the narrow phase of pairs whose bounding spheres are farther
            apart than ``margin`` everywhere in the batch: their slots are inactive either
            way, but their points, normals and gaps are then placeholders (only for
            callers that use inactive slots for nothing, as :func:`~diffsim_ros.sim.contact.step.step`).

    Returns:
        Contacts with points [m] (..., K, 3), normals (..., K, 3), gaps [m] (..., K).
    """
    margin = world.options.margin if margin is None else margin
    poses = shape_poses(world, state)
    parts = []
    for pair in world.pairs:
        rot_a, pos_a = poses[(pair.a.kind, pair.a.index)]
        rot_b, pos_b = poses[(pair.b.kind, pair.b.index)]
        if skip_apart and _apart(pair, rot_a, pos_a, rot_b, pos_b, margin):
            parts.append(_inactive_slots(pair, pos_a, pos_b))
        else:
            parts.append(collide(pair.a.shape, rot_a, pos_a, pair.b.shape, rot_b, pos_b, margin))
    return concat_contacts(parts)


def _apart(pair, rot_a, pos_a, rot_b, pos_b, margin):
    """Whether no slot of a pair can be active in the whole batch (then its narrow phase is
    skipped): bounding spheres more than ``margin`` [m] apart, or for two boxes a separating face
    axis (:func:`~diffsim_ros.sim.contact.detection.boxes_apart`)."""
    shape_a, shape_b = pair.a.shape, pair.b.shape
    reach = bounding_radius(shape_a) + bounding_radius(shape_b) + float(margin)
    if not math.isfinite(reach):
        return False
    with torch.no_grad():
        if bool((torch.linalg.vector_norm(pos_a - pos_b, dim=-1) > reach).all()):
            return True
    return isinstance(shape_a, Box) and isinstance(shape_b, Box) and boxes_apart(shape_a, rot_a, pos_a, shape_b, rot_b, pos_b, float(margin))


def _inactive_slots(pair, pos_a, pos_b):
    """Contacts of the pair's inactive slots, without gradient: points at shape a's centre,
    vertical normals, and as gap the bounding spheres' distance [m] (finite: a gap enters the
    step's arithmetic on every slot before the active ones are picked)."""
    with torch.no_grad():
        spheres = torch.linalg.vector_norm(pos_a - pos_b, dim=-1) - bounding_radius(pair.a.shape) - bounding_radius(pair.b.shape)
        batch = spheres.shape
        point = pos_a.expand(*batch, 3)[..., None, :].expand(*batch, pair.count, 3).clone()
        normal = torch.zeros_like(point)
        normal[..., 2] = 1.0
        inactive = torch.zeros(*batch, pair.count, dtype=torch.bool, device=pos_a.device)
        return Contacts(point, normal, spheres[..., None].expand(*batch, pair.count).clone(), inactive, inactive.clone())


def speed_bound(world, state):
    """Upper bound of any surface point's speed [m/s] over the batch, plus a step of gravity
    (for the speculative margin), as a float."""
    with torch.no_grad():
        speeds = [torch.zeros((), dtype=world.dtype, device=world.device)]
        if world.objects:
            radius = torch.tensor([bounding_radius(o.shape) for o in world.objects], dtype=world.dtype, device=world.device)
            v = torch.linalg.vector_norm(state.linear_velocity, dim=-1)
            w = torch.linalg.vector_norm(state.angular_velocity, dim=-1)
            speeds.append((v + w * radius).amax())
        for proxy in world.proxies:
            jac = frame_jacobian(world.robot.model, state.q, proxy.link)
            twist = matvec(jac, state.qd)
            reach = math.sqrt(sum(c * c for c in proxy.position)) + bounding_radius(proxy.shape)
            point = torch.linalg.vector_norm(twist[..., :3], dim=-1) + reach * torch.linalg.vector_norm(twist[..., 3:], dim=-1)
            speeds.append(point.amax())
        return float(torch.stack(speeds).amax()) + world.dt * float(torch.linalg.vector_norm(world.gravity))


def objects_may_touch(world, contacts):
    """Whether a slot of an object-object pair is active anywhere in the batch (bool)."""
    slots = [i for pair in world.pairs if pair.a.kind == "object" and pair.b.kind == "object"
             for i in range(pair.start, pair.start + pair.count)]
    return bool(slots) and bool(contacts.active[..., slots].any())
