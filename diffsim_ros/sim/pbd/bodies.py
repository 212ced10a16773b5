"""Particles and joints of the PBD system, built (differentiably) from a RobotModel.

Each merged link of the model is one particle: a rigid body whose position is its centre of
mass and whose orientation is its body frame (= joint frame of the model). Particle 0 is the
base: fixed in the world with zero inverse mass, or free with the inertia of a
:class:`FreeBase`; particle ``i + 1`` is model body ``i``. Every actuated joint ``j`` couples
its parent particle ``parents[j] + 1`` with its child particle ``j + 1``.
"""

from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.dynamics.rnea import body_inertials
from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.model.robot_model import PRISMATIC, REVOLUTE
from diffsim_ros.sim.pbd.errors import PBDError

__all__ = ["FreeBase", "PBDBodies", "PBDJoints", "PBDSystem", "build_system"]


@dataclass(frozen=True)
class FreeBase:
    """Inertia of a free-floating base link (RobotModel bases are otherwise fixed).

    Values may be tensors (then differentiable) or floats.
    """

    mass: object
    """Base mass [kg]."""
    com: object = (0.0, 0.0, 0.0)
    """Base COM in the base link frame [m], (3,)."""
    inertia: object = (1e-2, 0.0, 0.0, 1e-2, 0.0, 1e-2)
    """Base inertia about its COM, base axes [kg·m²], ``[ixx, ixy, ixz, iyy, iyz, izz]``."""


@dataclass(frozen=True)
class PBDBodies:
    """Inertial data of the N = n + 1 particles (index 0 = fixed base)."""

    inv_mass: torch.Tensor
    """Inverse masses [1/kg], shape (N,); 0 for a fixed base."""
    com: torch.Tensor
    """Centres of mass in the body frames [m], shape (N, 3) (payload included)."""
    inertia: torch.Tensor
    """Inertia about the COM in body axes [kg·m²], shape (N, 3, 3); 0 for a fixed base."""
    inv_inertia: torch.Tensor
    """Inverse inertia [1/(kg·m²)], shape (N, 3, 3); 0 for a fixed base."""
    dynamic: torch.Tensor
    """1 for moving particles, 0 for a fixed base, shape (N,)."""


@dataclass(frozen=True)
class PBDJoints:
    """Constraint geometry and passive parameters of the n joints."""

    parent: tuple
    """Parent particle index of each joint (0 = base)."""
    child: tuple
    """Child particle index of each joint (= joint index + 1)."""
    revolute: tuple
    """True for revolute joints, False for prismatic ones."""
    parent_index: torch.Tensor
    """``parent`` as a long tensor, shape (n,)."""
    child_index: torch.Tensor
    """``child`` as a long tensor, shape (n,)."""
    revolute_mask: torch.Tensor
    """``revolute`` as a bool tensor, shape (n,)."""
    local_parent: torch.Tensor
    """Columns ``[lever, axis, reference]`` in parent body axes, shape (n, 3, 3): the joint
    anchor relative to the parent COM [m], the joint axis and a unit vector across it."""
    local_child: torch.Tensor
    """Columns ``[lever, axis, reference]`` in child body axes, shape (n, 3, 3) (the lever
    from the child COM to the joint origin); the references coincide at q = 0."""
    rest_rot: torch.Tensor
    """Joint frame at q = 0 in the parent body frame, shape (n, 3, 3)."""
    lower: torch.Tensor
    """Lower position limits [rad or m], shape (n,)."""
    upper: torch.Tensor
    """Upper position limits [rad or m], shape (n,)."""
    damping: torch.Tensor
    """Viscous damping [N·m·s/rad or N·s/m], shape (n,)."""
    friction: torch.Tensor
    """Coulomb friction [N·m or N], shape (n,)."""
    armature: torch.Tensor
    """Rotor inertia reflected to each joint [kg·m² or kg], shape (n,): a joint-space inertia the
    bodies do not carry, acting in the joint's free row (:func:`~.constraints.joint_blocks`)."""
    constraint_count: torch.Tensor
    """Number of joints acting on each particle, shape (N,) (Jacobi averaging)."""
    couplings: tuple
    """Ordered pairs of distinct joints sharing a moving particle, ``(j, side_j, k, side_k)``
    with side 0 = child, 1 = parent: the off-diagonal blocks of the joint system."""
    limited: bool = False
    """Whether any joint has a finite position limit."""

    @property
    def count(self):
        return len(self.parent)

    @property
    def all_revolute(self):
        return all(self.revolute)

    @property
    def serial(self):
        """Whether the joints form one serial chain (joint j + 1 hangs on joint j's child)."""
        return all(self.parent[j + 1] == self.child[j] for j in range(self.count - 1))


@dataclass(frozen=True)
class PBDSystem:
    """Everything the PBD solver needs from a model (rebuilt per step, never cached)."""

    bodies: PBDBodies
    joints: PBDJoints
    gravity: torch.Tensor
    """Gravity in the world frame [m/s²], shape (3,)."""
    fixed_base: bool = True
    """Whether particle 0 is fixed in the world."""

    @property
    def num_particles(self):
        return self.bodies.inv_mass.shape[0]


def _checked_inertials(names, mass, com, inertia):
    """Raise unless every mass is positive and every inertia positive definite."""
    bad = (mass <= 0).nonzero().flatten().tolist()
    if bad:
        raise PBDError(f"PBD needs a positive mass on every body; massless: {[names[i] for i in bad]} (merge them or give them a mass)")
    smallest = torch.linalg.eigvalsh(inertia.detach())[:, 0]
    bad = (smallest <= 0).nonzero().flatten().tolist()
    if bad:
        raise PBDError(f"PBD needs a positive-definite inertia on every body; singular or indefinite: {[names[i] for i in bad]}")
    return mass, com, inertia


def _com_inertials(model):
    """Mass, COM and inertia about the COM of every body, payload included."""
    mass, first_moment, inertia_origin = body_inertials(model)
    com = first_moment / mass.clamp_min(torch.finfo(mass.dtype).tiny)[:, None]
    eye = torch.eye(3, dtype=model.dtype, device=model.device)
    parallel = mass[:, None, None] * ((com * com).sum(-1)[:, None, None] * eye - com[:, :, None] * com[:, None, :])
    return _checked_inertials(model.body_names, mass, com, inertia_origin - parallel)


def _base_inertials(model, base):
    """Mass (1,), COM (1, 3) and inertia (1, 3, 3) of the base particle (zeros when fixed)."""
    def tensor(value, shape):
        return torch.as_tensor(value, dtype=model.dtype, device=model.device).reshape(shape)

    if base is None:
        zero = torch.zeros(1, dtype=model.dtype, device=model.device)
        return zero, zero.new_zeros(1, 3), zero.new_zeros(1, 3, 3)
    from diffsim_ros.model.inertia import inertia_from_vector

    mass, com = tensor(base.mass, (1,)), tensor(base.com, (1, 3))
    return _checked_inertials(["free base"], mass, com, inertia_from_vector(tensor(base.inertia, (1, 6))))


def _bodies(model, base):
    mass, com, inertia = _com_inertials(model)
    base_mass, base_com, base_inertia = _base_inertials(model, base)
    free = base is not None
    inv_base = torch.linalg.inv(base_inertia) if free else base_inertia
    return PBDBodies(
        inv_mass=torch.cat([1.0 / base_mass if free else base_mass, 1.0 / mass]),
        com=torch.cat([base_com, com]),
        inertia=torch.cat([base_inertia, inertia]),
        inv_inertia=torch.cat([inv_base, torch.linalg.inv(inertia)]),
        dynamic=torch.cat([torch.ones_like(base_mass) if free else base_mass, torch.ones_like(mass)]),
    )


def _reference(axis):
    """A unit vector perpendicular to each unit axis, shape (n, 3) (numpy, structure only)."""
    axis = np.asarray(axis, dtype=np.float64)
    basis = np.eye(3)[np.argmin(np.abs(axis), axis=-1)]
    across = basis - (basis * axis).sum(-1, keepdims=True) * axis
    return across / np.linalg.norm(across, axis=-1, keepdims=True)


def _couplings(parent, child, fixed_base):
    """Ordered joint pairs that share a moving particle (see ``PBDJoints.couplings``)."""
    sides = [(child[j], parent[j]) for j in range(len(child))]
    pairs = []
    for j, sides_j in enumerate(sides):
        for k, sides_k in enumerate(sides):
            for side_j, particle in enumerate(sides_j):
                if j != k and (particle > 0 or not fixed_base) and particle in sides_k:
                    pairs.append((j, side_j, k, sides_k.index(particle)))
    return tuple(pairs)


def _joints(model, com, fixed_base):
    for name, kind in zip(model.joint_names, model.joint_types):
        if kind not in (REVOLUTE, PRISMATIC):
            raise PBDError(f"joint '{name}' has unsupported type '{kind}'; PBD supports revolute and prismatic joints")
    n, dtype, device = model.nq, model.dtype, model.device
    parent = tuple(p + 1 for p in model.parents)
    child = tuple(range(1, n + 1))
    parent_index = torch.tensor(parent, device=device)
    count = torch.zeros(n + 1, dtype=dtype, device=device)
    count = count.index_add(0, parent_index, torch.ones(n, dtype=dtype, device=device))
    count = count + torch.cat([count[:1] * 0.0, torch.ones_like(count[1:])])
    reference = torch.as_tensor(_reference(model.joint_axis.detach().cpu().numpy()), dtype=dtype, device=device)
    columns = (
        model.params.joint_origin_xyz - com[parent_index],
        matvec(model.joint_origin_rot, model.joint_axis),
        matvec(model.joint_origin_rot, reference),
    )
    return PBDJoints(
        parent=parent,
        child=child,
        revolute=tuple(t == REVOLUTE for t in model.joint_types),
        parent_index=parent_index,
        child_index=torch.tensor(child, device=device),
        revolute_mask=torch.tensor([t == REVOLUTE for t in model.joint_types], device=device),
        local_parent=torch.stack(columns, dim=-1),
        local_child=torch.stack((-com[1:], model.joint_axis, reference), dim=-1),
        rest_rot=model.joint_origin_rot,
        lower=model.lower,
        upper=model.upper,
        damping=model.params.damping,
        friction=model.params.friction,
        armature=model.params.armature,
        constraint_count=count,
        couplings=_couplings(parent, child, fixed_base),
        limited=bool(torch.isfinite(model.lower).any() or torch.isfinite(model.upper).any()),
    )


def build_system(model, base=None):
    """Particles and joints of ``model`` (differentiable in every model parameter).

    Args:
        model: RobotModel (revolute and prismatic joints).
        base: None for a base fixed in the world, or a :class:`FreeBase`.

    Returns:
        PBDSystem.

    Raises:
        PBDError: A body without positive mass or positive-definite inertia, or an
            unsupported joint type.
    """
    bodies = _bodies(model, base)
    fixed = base is None
    return PBDSystem(bodies=bodies, joints=_joints(model, bodies.com, fixed), gravity=model.gravity, fixed_base=fixed)
