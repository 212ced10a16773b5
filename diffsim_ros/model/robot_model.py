"""Robot model: fixed kinematic structure plus differentiable physical parameters.

The structure (joint types, tree topology, joint axes and frame rotations, limits) is fixed
and made of ints and constant tensors. Everything a calibration may change lives in one
:class:`RobotParams` of float tensors, addressed by the parameter names used in calibration
files and logs:

===============================  =========================================================
``<link>.mass``                  body mass [kg] (link = the body's URDF link)
``<link>.com``                   body COM in the body frame [m], (3,)
``<link>.inertia``               inertia about the COM, body axes [kg·m²],
                                 ``[ixx, ixy, ixz, iyy, iyz, izz]``
``<joint>.origin.xyz``           joint origin translation in the parent body frame [m], (3,)
``<joint>.damping``              viscous damping [N·m·s/rad or N·s/m]
``<joint>.friction``             Coulomb friction [N·m or N]
``<joint>.armature``             reflected rotor inertia [kg·m² or kg], added to M(q)'s diagonal
                                 (MuJoCo's ``dof_armature``, Pinocchio's ``model.armature``);
                                 URDF has no field: read from and written to a Drake-style
                                 ``<transmission>`` (``drake:rotor_inertia`` x ``drake:gear_ratio``²)
``<joint>.effort_bias``          constant offset of the joint's measured effort [N·m or N]: a
                                 torque sensor's bias (effort = joint torque + bias); no
                                 dynamics algorithm uses it, only comparisons with efforts
``<joint>.spring.stiffness``     lever spring stiffness k [N/m]; torsion spring k [N·m/rad or N/m]
``<joint>.spring.offset``        lever offset angle alpha2 [rad]; torsion rest position q0 [rad or m]
``<joint>.spring.alpha1``        lever mounting angle alpha1 [rad]
``<joint>.spring.l1``            lever l1 [m]
``<joint>.spring.l2``            lever l2 [m]
``<joint>.spring.rest_length``   lever spring rest length x_rest [m]
``<joint>.spring.damping``       torsion spring damping [N·m·s/rad or N·s/m]
``<name>.spring.stiffness``      point spring stiffness k [N/m]
``<name>.spring.rest_length``    point spring rest length L0 [m]
``<name>.spring.damping``        point spring damping c [N·s/m]
``<name>.spring.point_a``        point spring end on its first link, link frame [m], (3,)
``<name>.spring.point_b``        point spring end on its second link, link frame [m], (3,)
``payload.mass``                 point-mass payload on the payload frame [kg]
``efforts.delay``                how much later the measured efforts show a torque than the
                                 joint states show its motion [s] (a sensor's filter or
                                 transport lag); like ``<joint>.effort_bias``, only
                                 comparisons with measured efforts use it
``payload.com``                  payload position in the payload frame [m], (3,)
===============================  =========================================================

Spring elements and their laws: :mod:`diffsim_ros.model.springs`.
"""

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.inertia import inertia_to_vector
from diffsim_ros.model.springs import (
    SPRING_LAWS,
    JointSpring,
    LeverSpring,
    PointSpring,
    PointSpringLayout,
    TorsionSpring,
    valid_spring_name,
)
from diffsim_ros.model.urdf import PRISMATIC, REVOLUTE, describe_tree
from diffsim_ros.model.urdf_document import read_urdf

__all__ = [
    "REVOLUTE",
    "PRISMATIC",
    "Frame",
    "JointSpring",
    "LeverSpring",
    "TorsionSpring",
    "PointSpring",
    "RobotParams",
    "RobotModel",
]


@dataclass(frozen=True)
class RobotParams:
    """Differentiable physical parameters: n actuated joints (one body each), s lever springs,
    t torsion springs, c point springs (:mod:`~diffsim_ros.model.springs`)."""

    mass: torch.Tensor
    """Body masses [kg], shape (n,)."""
    com: torch.Tensor
    """Body centres of mass in body frames [m], shape (n, 3)."""
    inertia: torch.Tensor
    """Body inertias about the COM, body axes [kg·m²], shape (n, 6) ``[ixx ixy ixz iyy iyz izz]``."""
    joint_origin_xyz: torch.Tensor
    """Joint origin translations in parent body frames [m], shape (n, 3)."""
    damping: torch.Tensor
    """Joint viscous damping [N·m·s/rad], shape (n,)."""
    friction: torch.Tensor
    """Joint Coulomb friction [N·m], shape (n,)."""
    armature: torch.Tensor
    """Reflected rotor inertia of each joint [kg·m² or kg], shape (n,): ``M(q) + diag(armature)``."""
    effort_bias: torch.Tensor
    """Offset of each joint's measured effort from its torque [N·m], shape (n,) (a sensor's
    bias: estimation subtracts it from measured efforts; dynamics never see it)."""
    spring_stiffness: torch.Tensor
    """Lever spring stiffness k [N/m], shape (s,)."""
    spring_offset: torch.Tensor
    """Lever spring offset angle alpha2 [rad], shape (s,)."""
    spring_alpha1: torch.Tensor
    """Lever spring mounting angle alpha1 [rad], shape (s,)."""
    spring_l1: torch.Tensor
    """Lever spring lever l1 [m], shape (s,)."""
    spring_l2: torch.Tensor
    """Lever spring lever l2 [m], shape (s,)."""
    spring_rest_length: torch.Tensor
    """Lever spring rest length x_rest [m], shape (s,)."""
    torsion_stiffness: torch.Tensor
    """Torsion spring stiffness [N·m/rad or N/m], shape (t,)."""
    torsion_offset: torch.Tensor
    """Torsion spring rest position q0 [rad or m], shape (t,)."""
    torsion_damping: torch.Tensor
    """Torsion spring damping [N·m·s/rad or N·s/m], shape (t,)."""
    point_stiffness: torch.Tensor
    """Point spring stiffness k [N/m], shape (c,)."""
    point_rest_length: torch.Tensor
    """Point spring rest length L0 [m], shape (c,)."""
    point_damping: torch.Tensor
    """Point spring damping c [N·s/m], shape (c,)."""
    point_anchor_a: torch.Tensor
    """Point spring first end in its link frame [m], shape (c, 3)."""
    point_anchor_b: torch.Tensor
    """Point spring second end in its link frame [m], shape (c, 3)."""
    payload_mass: torch.Tensor
    """Payload point mass [kg], shape ()."""
    payload_com: torch.Tensor
    """Payload position in the payload frame [m], shape (3,)."""
    effort_delay: torch.Tensor
    """Lag of the measured efforts behind the joint states [s], shape ()."""

    def to(self, dtype=None, device=None):
        """Copy with every tensor converted."""
        return RobotParams(
            **{f.name: getattr(self, f.name).to(dtype=dtype, device=device) for f in dataclasses.fields(self)}
        )

    def detach(self):
        """Copy with every tensor detached from the autograd graph."""
        return RobotParams(**{f.name: getattr(self, f.name).detach().clone() for f in dataclasses.fields(self)})


# parameter-name suffix -> (RobotParams field, indexed by 'body' | 'joint' | 'spring' | None)
_BODY_FIELDS = {"mass": "mass", "com": "com", "inertia": "inertia"}
_JOINT_FIELDS = {"origin.xyz": "joint_origin_xyz", "damping": "damping", "friction": "friction",
                 "armature": "armature", "effort_bias": "effort_bias"}
_PAYLOAD_FIELDS = {"payload.mass": "payload_mass", "payload.com": "payload_com", "efforts.delay": "effort_delay"}


@dataclass(frozen=True)
class Frame:
    """A URDF link kept in the model: its body (-1 = base) and placement in that body frame."""

    name: str
    body: int
    placement: torch.Tensor
    """Link frame in the body frame, shape (4, 4)."""


@dataclass(frozen=True)
class RobotModel:
    """Fixed-base articulated robot: structure plus :class:`RobotParams`.

    Build with :meth:`from_urdf`. Body ``i`` is the child link of actuated joint ``i`` with
    all fixed (and locked) descendants merged; its frame is the joint frame. Instances are
    immutable; :meth:`replace`, :meth:`with_parameters` and :meth:`to` return new models that
    share the structure.
    """

    name: str
    base_link: str
    tip_link: str | None
    joint_names: tuple
    body_names: tuple
    parents: tuple
    """Parent body of each joint, -1 for the base; parents[i] < i."""
    joint_types: tuple
    """REVOLUTE (continuous included) or PRISMATIC per joint."""
    continuous: tuple
    joint_axis: torch.Tensor
    """Unit joint axes in the joint frame, shape (n, 3)."""
    joint_origin_rot: torch.Tensor
    """Joint frame rotation in the parent body frame at q = 0, shape (n, 3, 3)."""
    lower: torch.Tensor
    """Lower position limits [rad or m], shape (n,), -inf when continuous."""
    upper: torch.Tensor
    """Upper position limits [rad or m], shape (n,), +inf when continuous."""
    velocity_limit: torch.Tensor
    """Velocity limits [rad/s or m/s], shape (n,), +inf when absent."""
    effort_limit: torch.Tensor
    """Effort limits [N·m or N], shape (n,), +inf when absent."""
    frames: dict
    """Link name -> :class:`Frame` for every URDF link kept in the model."""
    spring_joints: tuple
    """Joint index of each lever spring (Baxter's law), length s."""
    payload_frame: str
    gravity: torch.Tensor
    """Gravity acceleration in the base frame [m/s²], shape (3,)."""
    params: RobotParams
    support: torch.Tensor = field(repr=False)
    """support[k, j] = 1 if joint j is body k or one of its ancestors, shape (n, n)."""
    torsion_joints: tuple = ()
    """Joint index of each torsion spring, length t."""
    point_springs: tuple = ()
    """:class:`~diffsim_ros.model.springs.PointSpringLayout` of each point spring, length c."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(
        cls,
        path_or_xml,
        base_link=None,
        tip_link=None,
        dtype=torch.float64,
        device="cpu",
        springs=(),
        payload_frame=None,
        gravity=(0.0, 0.0, -9.81),
    ):
        """Load a robot from a URDF file or XML string (meshes are never loaded).

        Args:
            path_or_xml: URDF path, or the XML as str/bytes.
            base_link: Link fixed to the world; default the URDF root.
            tip_link: End of a serial sub-chain; default the whole tree (branches allowed).
            dtype: Floating dtype of every tensor (float64 recommended for estimation).
            device: Torch device.
            springs: Spring elements (:class:`LeverSpring`, :class:`TorsionSpring`,
                :class:`PointSpring`); at most one joint spring per joint.
            payload_frame: Link carrying ``payload.*``; default ``tip_link``, else the last body.
            gravity: Gravity in the base frame [m/s²].

        Returns:
            RobotModel.

        Raises:
            RobotModelError: Any problem with the file, the tree, the inertials or the arguments.
        """
        desc = describe_tree(read_urdf(path_or_xml), base_link, tip_link)
        if not desc.joints:
            raise RobotModelError(
                f"no actuated joints between base_link '{desc.base_link}' and tip_link '{tip_link}'"
            )
        return cls._from_description(desc, dtype, device, springs, payload_frame, gravity)

    @classmethod
    def _from_description(cls, desc, dtype, device, springs, payload_frame, gravity):
        joints = desc.joints
        names = tuple(j.name for j in joints)

        def tensor(values):
            return torch.as_tensor(np.asarray(values, dtype=np.float64), dtype=dtype, device=device)

        springs = _spring_structure(names, tuple(j.type for j in joints), desc.frames, springs)

        if payload_frame is None:
            payload_frame = desc.tip_link if desc.tip_link is not None else joints[-1].body
        if payload_frame not in desc.frames or desc.frames[payload_frame].body < 0:
            raise RobotModelError(f"payload frame '{payload_frame}' is not a link moved by the robot")

        params = RobotParams(
            mass=tensor([j.mass for j in joints]),
            com=tensor([j.com for j in joints]),
            inertia=tensor(inertia_to_vector(np.stack([j.inertia for j in joints]))),
            joint_origin_xyz=tensor([j.origin[:3, 3] for j in joints]),
            damping=tensor([j.damping for j in joints]),
            friction=tensor([j.friction for j in joints]),
            armature=tensor([j.armature for j in joints]),
            effort_bias=tensor([0.0] * len(joints)),
            **_spring_tensors(springs.elements, dtype, device),
            payload_mass=tensor(0.0),
            payload_com=tensor([0.0, 0.0, 0.0]),
            effort_delay=tensor(0.0),
        )
        parents = tuple(j.parent for j in joints)
        return cls(
            name=desc.robot_name,
            base_link=desc.base_link,
            tip_link=desc.tip_link,
            joint_names=names,
            body_names=tuple(j.body for j in joints),
            parents=parents,
            joint_types=tuple(j.type for j in joints),
            continuous=tuple(j.continuous for j in joints),
            joint_axis=tensor([j.axis for j in joints]),
            joint_origin_rot=tensor([j.origin[:3, :3] for j in joints]),
            lower=tensor([j.lower for j in joints]),
            upper=tensor([j.upper for j in joints]),
            velocity_limit=tensor([j.velocity_limit for j in joints]),
            effort_limit=tensor([j.effort_limit for j in joints]),
            frames={
                f.name: Frame(f.name, f.body, tensor(f.placement)) for f in desc.frames.values()
            },
            spring_joints=springs.lever_joints,
            torsion_joints=springs.torsion_joints,
            point_springs=springs.point_springs,
            payload_frame=payload_frame,
            gravity=tensor(gravity),
            params=params,
            support=tensor(_support_matrix(parents)),
        )

    # ------------------------------------------------------------------ basic properties
    @property
    def nq(self):
        """Number of actuated joints (= bodies = velocity dimension)."""
        return len(self.joint_names)

    @property
    def dtype(self):
        return self.params.mass.dtype

    @property
    def device(self):
        return self.params.mass.device

    @property
    def frame_names(self):
        """Every URDF link name kept in the model."""
        return tuple(self.frames)

    @property
    def springs(self):
        """The spring elements with their current parameter values (floats): lever, torsion, point."""

        def values(law, index):
            out = {}
            for key, name in SPRING_LAWS[law].fields.items():
                value = getattr(self.params, name)[index]
                out[key] = tuple(float(v) for v in value) if key in SPRING_LAWS[law].vectors else float(value)
            return out

        out = [LeverSpring(joint=self.joint_names[j], **values("lever", s)) for s, j in enumerate(self.spring_joints)]
        out += [TorsionSpring(joint=self.joint_names[j], **values("torsion", s)) for s, j in enumerate(self.torsion_joints)]
        out += [
            PointSpring(name=e.name, link_a=e.link_a, link_b=e.link_b, tension_only=e.tension_only, **values("point", s))
            for s, e in enumerate(self.point_springs)
        ]
        return tuple(out)

    @property
    def has_armature(self):
        """Whether any joint has a nonzero armature (reflected rotor inertia)."""
        return bool((self.params.armature != 0).any())

    @property
    def has_springs(self):
        """Whether the model has any spring element."""
        return bool(self.spring_joints or self.torsion_joints or self.point_springs)

    def spring_elements(self):
        """``(law, name, index in its law)`` of every spring element, in :attr:`springs` order."""
        out = [("lever", self.joint_names[j], s) for s, j in enumerate(self.spring_joints)]
        out += [("torsion", self.joint_names[j], s) for s, j in enumerate(self.torsion_joints)]
        out += [("point", e.name, s) for s, e in enumerate(self.point_springs)]
        return out

    def spring_layout(self):
        """The fixed structure of the spring elements, JSON-friendly (what a torque map was built for)."""
        out = [[law, name] for law, name, _ in self.spring_elements() if law != "point"]
        out += [["point", e.name, e.link_a, e.link_b, e.tension_only] for e in self.point_springs]
        return out

    def joint_index(self, name):
        """Index of an actuated joint, with a clear error for unknown names."""
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise RobotModelError(f"unknown joint '{name}'; actuated joints: {list(self.joint_names)}") from None

    def frame(self, name):
        """The :class:`Frame` of a link, with a clear error for unknown names."""
        try:
            return self.frames[name]
        except KeyError:
            raise RobotModelError(f"unknown link '{name}'; links in the model: {sorted(self.frames)}") from None

    def tensors(self):
        """Every tensor of the model and of its parameters (e.g. to ask whether any is differentiated)."""
        values = [getattr(self, f.name) for f in dataclasses.fields(self)]
        values += [getattr(self.params, f.name) for f in dataclasses.fields(self.params)]
        return tuple(v for v in values if isinstance(v, torch.Tensor))

    # ------------------------------------------------------------------ copies
    def replace(self, **changes):
        """New model with some fields replaced (e.g. ``params=...``, ``gravity=...``)."""
        return dataclasses.replace(self, **changes)

    def to(self, dtype=None, device=None):
        """New model with every tensor converted to ``dtype`` / ``device``."""
        changes = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                changes[f.name] = value.to(dtype=dtype, device=device)
        changes["params"] = self.params.to(dtype=dtype, device=device)
        changes["frames"] = {
            k: Frame(f.name, f.body, f.placement.to(dtype=dtype, device=device)) for k, f in self.frames.items()
        }
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ named parameters
    def parameter_names(self):
        """All parameter names, in a fixed order (bodies, joints, springs, payload)."""
        names = [f"{b}.{s}" for b in self.body_names for s in _BODY_FIELDS]
        names += [f"{j}.{s}" for j in self.joint_names for s in _JOINT_FIELDS]
        names += [f"{name}.spring.{key}" for law, name, _ in self.spring_elements() for key in SPRING_LAWS[law].fields]
        names += list(_PAYLOAD_FIELDS)
        return names

    def _locate(self, name):
        """(RobotParams field, index or None) of a parameter name."""
        if name in _PAYLOAD_FIELDS:
            return _PAYLOAD_FIELDS[name], None
        owner, _, key = name.rpartition(".spring.")
        if owner:
            for law, element, index in self.spring_elements():
                if element == owner and key in SPRING_LAWS[law].fields:
                    return SPRING_LAWS[law].fields[key], index
        for suffixes, owners in ((_JOINT_FIELDS, self.joint_names), (_BODY_FIELDS, self.body_names)):
            for suffix, field_name in suffixes.items():
                owner = name[: -len(suffix) - 1]
                if name.endswith("." + suffix) and owner in owners:
                    return field_name, list(owners).index(owner)
        raise RobotModelError(f"unknown parameter '{name}'; see RobotModel.parameter_names()")

    def get_parameter(self, name):
        """Current value of one named parameter (a view into ``params``, keeps autograd)."""
        field_name, index = self._locate(name)
        value = getattr(self.params, field_name)
        return value if index is None else value[index]

    def named_parameters(self):
        """Dict ``name -> tensor`` of every parameter (views, keeping autograd)."""
        return {name: self.get_parameter(name) for name in self.parameter_names()}

    def with_parameters(self, values):
        """New model with the named parameters replaced, differentiably.

        Args:
            values: Mapping ``name -> value`` (tensor, float or sequence). Tensor values keep
                their autograd graph, so ``d(loss)/d(value)`` flows through every algorithm.

        Returns:
            RobotModel sharing this model's structure.
        """
        updates = {}
        for name, value in values.items():
            field_name, index = self._locate(name)
            current = updates.get(field_name, getattr(self.params, field_name))
            value = torch.as_tensor(value, dtype=self.dtype, device=self.device)
            expected = current.shape if index is None else current.shape[1:]
            if value.shape != expected:
                raise RobotModelError(f"parameter '{name}' needs shape {tuple(expected)}, got {tuple(value.shape)}")
            if not bool(torch.isfinite(value).all()):
                raise RobotModelError(f"parameter '{name}' is not finite: {value.tolist()}")
            if index is None:
                updates[field_name] = value
            else:
                if field_name not in updates:
                    current = current.clone()
                current[index] = value
                updates[field_name] = current
        return self.replace(params=dataclasses.replace(self.params, **updates))

    def with_payload(self, mass, com=(0.0, 0.0, 0.0)):
        """New model with a point-mass payload [kg] at ``com`` [m] in the payload frame."""
        return self.with_parameters({"payload.mass": mass, "payload.com": com})

    def with_springs(self, springs):
        """New model whose spring elements are ``springs`` (lever, torsion and point springs)."""
        structure = _spring_structure(self.joint_names, self.joint_types, self.frames, springs)
        tensors = _spring_tensors(structure.elements, self.dtype, self.device)
        return self.replace(
            spring_joints=structure.lever_joints,
            torsion_joints=structure.torsion_joints,
            point_springs=structure.point_springs,
            params=dataclasses.replace(self.params, **tensors),
        )


def _support_matrix(parents):
    """support[k, j] = 1 where joint j moves body k (j is k or an ancestor of k)."""
    n = len(parents)
    support = np.zeros((n, n))
    for k in range(n):
        j = k
        while j >= 0:
            support[k, j] = 1.0
            j = parents[j]
    return support


@dataclass(frozen=True)
class _SpringStructure:
    elements: dict
    """Law -> tuple of elements of that law."""
    lever_joints: tuple
    torsion_joints: tuple
    point_springs: tuple


def _spring_structure(joint_names, joint_types, frames, springs):
    """Validated spring elements grouped by law, with their joints or bodies.

    Args:
        joint_names, joint_types: The model's actuated joints.
        frames: Link name -> object with ``.body`` (-1 for the base).
        springs: Spring elements.

    Raises:
        RobotModelError: Unknown element types, joints or links, a lever spring on a prismatic
            joint, two springs on one joint, repeated or unusable names, both ends on one body.
    """
    elements = {law: [] for law in SPRING_LAWS}
    joints = {law: [] for law in SPRING_LAWS}
    layouts, names = [], set()
    for spring in springs:
        law = getattr(spring, "law", None)
        if law not in SPRING_LAWS or not isinstance(spring, SPRING_LAWS[law].element):
            raise RobotModelError(f"unknown spring element {spring!r}; laws: {sorted(SPRING_LAWS)}")
        if spring.name in names:
            raise RobotModelError(f"spring '{spring.name}' defined twice (at most one spring element per joint)")
        names.add(spring.name)
        if law == "point":
            layouts.append(_point_layout(spring, joint_names, frames))
        else:
            joints[law].append(_joint_spring_index(spring, joint_names, joint_types))
        elements[law].append(spring)
    return _SpringStructure(
        elements={law: tuple(v) for law, v in elements.items()},
        lever_joints=tuple(joints["lever"]),
        torsion_joints=tuple(joints["torsion"]),
        point_springs=tuple(layouts),
    )


def _joint_spring_index(spring, joint_names, joint_types):
    if spring.joint not in joint_names:
        raise RobotModelError(f"spring on unknown joint '{spring.joint}'; actuated joints: {list(joint_names)}")
    index = joint_names.index(spring.joint)
    if spring.law == "lever" and joint_types[index] != REVOLUTE:
        raise RobotModelError(f"spring element on joint '{spring.joint}' needs a revolute joint")
    return index


def _point_layout(spring, joint_names, frames):
    where = f"point spring '{spring.name}'"
    if not valid_spring_name(spring.name):
        raise RobotModelError(f"{where}: a name needs letters, digits, '_' or '-' (it owns parameters '<name>.spring.*')")
    if spring.name in joint_names:
        raise RobotModelError(f"{where}: the name is a joint's; joint springs own '<joint>.spring.*'")
    bodies = []
    for link in (spring.link_a, spring.link_b):
        if link not in frames:
            raise RobotModelError(f"{where}: unknown link '{link}'; links in the model: {sorted(frames)}")
        bodies.append(frames[link].body)
    if bodies[0] == bodies[1]:
        raise RobotModelError(
            f"{where}: links '{spring.link_a}' and '{spring.link_b}' move as one body, so the spring can do no work"
        )
    return PointSpringLayout(spring.name, spring.link_a, spring.link_b, bodies[0], bodies[1], bool(spring.tension_only))


def _spring_tensors(elements, dtype, device):
    """RobotParams spring fields from the elements of every law."""
    out = {}
    for law, spec in SPRING_LAWS.items():
        group = elements.get(law, ())
        for key, name in spec.fields.items():
            shape = (3,) if key in spec.vectors else ()
            values = np.array([_spring_value(s, key, shape) for s in group], dtype=np.float64).reshape(len(group), *shape)
            out[name] = torch.as_tensor(values, dtype=dtype, device=device)
    return out


def _spring_value(spring, key, shape):
    value = getattr(spring, key)
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.shape != shape or not np.isfinite(array).all():
        what = "3 finite numbers" if shape else "a finite number"
        raise RobotModelError(f"spring '{spring.name}': {key} must be {what}, got {value!r}")
    return array
