"""A differentiable contact world: free rigid objects, static geometry and an articulated robot.

One time step (semi-implicit, velocity level, Stewart-Trinkle / Nimble style):

1. detect contacts at the current poses (robot links carry collision proxies);
2. free velocities: objects get gravity, applied wrenches and gyroscopic terms; the robot is
   advanced by its own :class:`~diffsim_ros.sim.base.JointSpaceSimulator` (rigid-body or PBD);
3. contact impulses ``x`` from ``w = A x + b`` with ``A = J M⁻¹ Jᵀ`` (robot block ``M(q)``,
   object blocks ``diag(m I, I_world)``), ``b = J v_free + bias`` by the LCP (Nimble) or the
   friction-cone solver (Le Lidec); the normal bias is ``e v_n`` for a bounce (Newton
   restitution, Le Lidec's Eq. 3), ``gap / h`` for a speculative contact (``gap > 0``: it may
   close but not cross within the step) and ``beta gap / h`` for penetration (Baumgarte);
4. ``v+ = v_free + M⁻¹ Jᵀ x``; positions move by ``h v+``, plus, for contacts that bounce
   within the step, a position-level correction placing the body where the continuous-time
   bounce would have taken it (impact at ``t* = gap / -v_n``, then ``h - t*`` at the rebound
   velocity). That correction is what makes ``dq_{t+1}/dq_t = -e`` for a ball bouncing within
   a step (Nimble §VI) instead of the ``+1`` of plain time stepping; it is computed with the
   same Delassus matrix, so it is differentiable like the rest.

Contact coefficients of a pair are the larger of the two shapes' values (as MuJoCo combines
friction; static shapes and robot proxies default to 0, so an object's own values apply),
unless set for the pair: then ``<a>/<b>.friction`` and ``<a>/<b>.restitution`` are parameters
of their own (a box's friction on the table and on another box are different coefficients).
Parameters ``<object>.mass`` [kg], ``<object>.friction`` and ``<object>.restitution`` may be
tensors with leading batch dimensions (one value per batch element) and carry gradients.
"""

import functools
import math
from dataclasses import dataclass, field, fields, replace

import torch

from diffsim_ros.dynamics.kinematics import forward_kinematics, frame_jacobian
from diffsim_ros.dynamics.spatial import matvec, quat_normalize, quat_to_matrix, skew
from diffsim_ros.sim.contact.cone import ConeSolution, solve_cone
from diffsim_ros.sim.contact.detection import Contacts, boxes_apart, collide, concat_contacts, slot_count
from diffsim_ros.sim.contact.errors import ContactError
from diffsim_ros.sim.contact.frames import contact_frames, integrate_orientation
from diffsim_ros.sim.contact.lcp import LCPSolution, solve_lcp
from diffsim_ros.sim.contact.linsolve import pinv
from diffsim_ros.sim.contact.shapes import Box, Capsule, Plane, Sphere, bounding_radius, unit_inertia

__all__ = ["RigidObject", "StaticShape", "LinkProxy", "WorldState", "StepInfo", "ContactWorld"]

OBJECT_PARAMETERS = ("mass", "friction", "restitution")
PAIR_PARAMETERS = ("friction", "restitution")
SOLIDS = (Box, Sphere, Capsule)  # the shapes of objects and link proxies (static geometry may also be a Plane)


def _check_parameter(name, kind, value):
    """Raise unless ``value`` (tensor) is a valid ``kind`` parameter."""
    if not bool(torch.isfinite(value).all()):
        raise ContactError(f"parameter '{name}' is not finite: {value.tolist()}")
    if kind == "mass" and bool((value <= 0).any()):
        raise ContactError(f"parameter '{name}' must be > 0 [kg] (zero-mass objects cannot move), got {value.tolist()}")
    if kind == "friction" and bool((value < 0).any()):
        raise ContactError(f"parameter '{name}' must be >= 0, got {value.tolist()}")
    if kind == "restitution" and bool(((value < 0) | (value > 1)).any()):
        raise ContactError(f"parameter '{name}' must be in [0, 1], got {value.tolist()}")


def _finite(name, value, low=-math.inf, high=math.inf, low_open=False):
    value = float(value)
    bad = not math.isfinite(value) or value > high or (value <= low if low_open else value < low)
    if bad:
        bound = f"{'>' if low_open else '>='} {low}" + (f" and <= {high}" if high < math.inf else "")
        raise ContactError(f"{name} must be finite and {bound}, got {value}")
    return value


def _pose_tuple(name, position, orientation):
    position = tuple(float(v) for v in position)
    orientation = tuple(float(v) for v in orientation)
    if len(position) != 3 or len(orientation) != 4 or not all(map(math.isfinite, position + orientation)):
        raise ContactError(f"{name}: pose needs a finite position (3) and quaternion (w, x, y, z) (4)")
    norm = math.sqrt(sum(v * v for v in orientation))
    if norm < 1e-9:
        raise ContactError(f"{name}: zero quaternion")
    return position, tuple(v / norm for v in orientation)


def _check_shape(where, shape, kinds):
    """ContactError naming ``where`` unless ``shape`` is an instance of one of ``kinds`` (shape classes)."""
    if not isinstance(shape, kinds):
        names = ", ".join(kind.__name__ for kind in kinds[:-1]) + f" or {kinds[-1].__name__}"
        raise ContactError(f"{where}: shape must be a {names}, got {type(shape).__name__}")


def _validate_placed(shape, kind, kinds):
    """Check the shape class (one of ``kinds``), normalize and check the pose and coefficients of
    a static shape or link proxy (frozen dataclass)."""
    where = f"{kind} '{shape.name}'"
    _check_shape(where, shape.shape, kinds)
    pos, quat = _pose_tuple(where, shape.position, shape.orientation)
    object.__setattr__(shape, "position", pos)
    object.__setattr__(shape, "orientation", quat)
    _finite(f"{where} friction", shape.friction, 0.0)
    _finite(f"{where} restitution", shape.restitution, 0.0, 1.0)


@dataclass(frozen=True)
class RigidObject:
    """A free rigid body (6 DOF) with uniform density.

    Attributes:
        name: Parameter prefix (``<name>.mass`` ...).
        shape: :class:`Box`, :class:`Sphere` or :class:`Capsule` centred at the COM.
        mass: Mass [kg] (> 0).
        friction: Coulomb friction coefficient (>= 0).
        restitution: Newton restitution coefficient in [0, 1].
        inertia: Principal inertia [kg·m²] (3,) at ``mass``; default the uniform solid's.
            It scales with the mass when the mass changes.
    """

    name: str
    shape: object
    mass: float
    friction: float = 0.5
    restitution: float = 0.0
    inertia: tuple | None = None

    def __post_init__(self):
        _check_shape(f"object '{self.name}'", self.shape, SOLIDS)
        _finite(f"object '{self.name}' mass [kg]", self.mass, 0.0, low_open=True)
        _finite(f"object '{self.name}' friction", self.friction, 0.0)
        _finite(f"object '{self.name}' restitution", self.restitution, 0.0, 1.0)
        if self.inertia is not None:
            values = tuple(float(v) for v in self.inertia)
            if len(values) != 3 or not all(math.isfinite(v) and v > 0 for v in values):
                raise ContactError(f"object '{self.name}': inertia needs 3 positive values [kg·m²], got {values}")


@dataclass(frozen=True)
class _Named:
    name: str


@dataclass(frozen=True)
class _OnLink(_Named):
    link: str


@dataclass(frozen=True)
class _Placed:
    """A shape fixed in a frame, with its contact coefficients: the fields that static shapes and
    link proxies share, after their names.

    Dataclass fields come base-first in reverse MRO order, so ``class X(_Placed, <names>)`` puts
    the names first: ``StaticShape(name, shape, ...)``, ``LinkProxy(name, link, shape, ...)``.

    Attributes:
        shape: The shape (the subclass checks its class).
        position, orientation: Shape frame in the parent frame [m], quaternion (w, x, y, z);
            normalized on creation.
        friction: Coulomb friction coefficient (>= 0).
        restitution: Newton restitution coefficient in [0, 1].
    """

    shape: object
    position: tuple = (0.0, 0.0, 0.0)
    orientation: tuple = (1.0, 0.0, 0.0, 0.0)
    friction: float = 0.0
    restitution: float = 0.0


@dataclass(frozen=True)
class StaticShape(_Placed, _Named):
    """Fixed geometry (ground plane, table...). Pose in the world (= robot base) frame.

    Attributes:
        name: Shape name (used in pair names and errors).
        shape, position, orientation, friction, restitution: As in :class:`_Placed`; ``shape`` is a
            :class:`Box`, :class:`Sphere`, :class:`Capsule` or :class:`Plane`.
    """

    def __post_init__(self):
        _validate_placed(self, "static", SOLIDS + (Plane,))


@dataclass(frozen=True)
class LinkProxy(_Placed, _OnLink):
    """A collision shape attached to a robot link (e.g. a capsule around the forearm).

    Attributes:
        name: Proxy name (used in errors).
        link: URDF link carrying the shape.
        shape, position, orientation, friction, restitution: As in :class:`_Placed`, in the link
            frame; ``shape`` is a :class:`Box`, :class:`Sphere` or :class:`Capsule`.
    """

    def __post_init__(self):
        _validate_placed(self, "proxy", SOLIDS)


@dataclass(frozen=True)
class WorldState:
    """State of the world (leading batch shape ``...``, J objects, n robot joints).

    Attributes:
        position: Object COM positions [m], shape (..., J, 3).
        orientation: Object orientations, unit quaternions (w, x, y, z), shape (..., J, 4).
        linear_velocity: COM velocities in the world [m/s], shape (..., J, 3).
        angular_velocity: Angular velocities in the world [rad/s], shape (..., J, 3).
        q: Robot joint positions [rad or m], shape (..., n), or None without a robot.
        qd: Robot joint velocities, shape (..., n), or None.
    """

    position: torch.Tensor
    orientation: torch.Tensor
    linear_velocity: torch.Tensor
    angular_velocity: torch.Tensor
    q: torch.Tensor | None = None
    qd: torch.Tensor | None = None

    def map(self, fn):
        """Apply ``fn`` to every tensor field (None stays None)."""
        return WorldState(**{f.name: (None if getattr(self, f.name) is None else fn(getattr(self, f.name))) for f in fields(self)})


@dataclass(frozen=True)
class StepInfo:
    """Diagnostics of one step.

    Attributes:
        contacts: Detected contact slots (:class:`~diffsim_ros.sim.contact.detection.Contacts`).
        impulse: Contact impulses ``[n, t1, t2]`` [N·s], shape (..., K, 3).
        solution: The solver's LCPSolution or ConeSolution (pass as ``warm`` to the next step).
        bouncing: Contacts treated as bounces this step, bool (..., K).
        max_penetration: Largest penetration of an active contact at the start of the step [m], (...).
    """

    contacts: object
    impulse: torch.Tensor
    solution: object
    bouncing: torch.Tensor
    max_penetration: torch.Tensor


@dataclass(frozen=True)
class _Geom:
    kind: str  # "object" | "proxy" | "static"
    index: int
    name: str
    shape: object


@dataclass(frozen=True)
class _Pair:
    a: _Geom
    b: _Geom
    start: int
    count: int
    explicit: frozenset = frozenset()  # coefficient kinds set for the pair (else the max rule)

    @property
    def name(self):
        """``"<a>/<b>"``, the prefix of the pair's parameters (e.g. ``box/ground.friction``)."""
        return f"{self.a.name}/{self.b.name}"


@dataclass(frozen=True)
class ContactWorld:
    """Objects, static shapes and an optional robot stepped together with contact.

    Build with :meth:`create`. Immutable: :meth:`with_parameters` returns a new world.

    Attributes:
        objects: The :class:`RigidObject` tuple (J objects, in state order).
        static: :class:`StaticShape` tuple.
        robot: JointSpaceSimulator of the robot (``robot.dt`` must equal ``dt``) or None.
        proxies: :class:`LinkProxy` tuple on the robot's links.
        dt: Time step [s].
        solver: ``"lcp"`` (Nimble boxed LCP, 4-sided pyramid) or ``"cone"`` (Coulomb cone).
        margin: Speculative contact distance [m].
        baumgarte: Fraction of a penetration removed per step.
        bounce_threshold: Impact speed [m/s] below which contacts do not bounce (resting).
        complementarity_aware: LCP only: Nimble's complementarity-aware gradients.
        cone_method: Cone only: ``"auto"`` or ``"staggered"`` (see :func:`solve_cone`).
        params: ``{"mass", "friction", "restitution"}`` -> tensor (..., J).
        pair_params: ``{"friction", "restitution"}`` -> tensor (..., P), one column per pair
            (used for the pairs whose coefficient is set explicitly, see :meth:`create`).
        gravity: Gravity [m/s²], shape (3,).
        impact_substeps: Without a robot: a step in which two objects may touch (a slot of
            an object-object pair active at the speculative margin) is taken as this many
            substeps of ``dt / impact_substeps`` (see :meth:`with_impact_substeps`); 1: never.
    """

    objects: tuple
    static: tuple
    robot: object
    proxies: tuple
    dt: float
    solver: str
    margin: float
    baumgarte: float
    bounce_threshold: float
    complementarity_aware: bool
    cone_method: str
    params: dict = field(repr=False)
    pair_params: dict = field(repr=False)
    gravity: torch.Tensor = field(repr=False)
    unit_inertia: torch.Tensor = field(repr=False)
    pairs: tuple = field(repr=False)
    impact_substeps: int = 1

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        objects,
        static=None,
        robot=None,
        proxies=(),
        dt=0.01,
        solver="lcp",
        margin=0.02,
        baumgarte=0.2,
        bounce_threshold=0.1,
        complementarity_aware=False,
        cone_method="auto",
        gravity=(0.0, 0.0, -9.81),
        exclude=(),
        pair_friction=None,
        pair_restitution=None,
        dtype=None,
        device=None,
    ):
        """Build a world.

        Args:
            objects: Sequence of :class:`RigidObject`.
            static: Sequence of :class:`StaticShape`; default a ground plane z = 0 named "ground".
            robot: JointSpaceSimulator (its model fixes dtype and device) or None.
            proxies: Sequence of :class:`LinkProxy` (needs ``robot``).
            dt: Time step [s].
            solver: ``"lcp"`` or ``"cone"``.
            margin: Speculative contact distance [m].
            baumgarte: Penetration fraction removed per step, in (0, 1].
            bounce_threshold: Impact speed below which no bounce happens [m/s] (the normal velocity
                when the contact closes, without the rest of the step's gravity).
            complementarity_aware: LCP: Nimble §IV-D gradients for tied contacts.
            cone_method: ``"auto"`` or ``"staggered"``.
            gravity: Gravity in the world frame [m/s²]; with a robot, its model's gravity.
            exclude: Pairs of shape names that never collide.
            pair_friction: ``{(name_a, name_b): mu}`` overriding the max rule for a pair
                (e.g. a frictionless gripper pad). The pair's coefficient is then a parameter
                of its own, ``"<a>/<b>.friction"`` (:meth:`pair_parameter_names`).
            pair_restitution: ``{(name_a, name_b): e}`` likewise.
            dtype, device: Without a robot (default float64 on torch's default device).

        Raises:
            ContactError: Invalid values, duplicate names, unknown links, unsupported pairs.
        """
        objects, proxies = tuple(objects), tuple(proxies)
        static = (StaticShape("ground", Plane()),) if static is None else tuple(static)
        names = _checked_names(objects, static, proxies)
        dt, margin, baumgarte, bounce_threshold = _checked_options(solver, cone_method, dt, margin, baumgarte,
                                                                   bounce_threshold)
        dtype, device, gravity = _frame_of(robot, proxies, dt, dtype, device, gravity)
        tensor = functools.partial(torch.tensor, dtype=dtype, device=device)
        unit, params = _object_tensors(objects, tensor)
        geoms = (
            [_Geom("object", i, o.name, o.shape) for i, o in enumerate(objects)]
            + [_Geom("proxy", i, p.name, p.shape) for i, p in enumerate(proxies)]
            + [_Geom("static", i, s.name, s.shape) for i, s in enumerate(static)]
        )
        overrides = _pair_overrides(names, pair_friction, pair_restitution)
        pairs, pair_values = _pair_table(geoms, {frozenset(pair) for pair in exclude}, overrides)
        return cls(
            objects=objects,
            static=static,
            robot=robot,
            proxies=proxies,
            dt=dt,
            solver=solver,
            margin=margin,
            baumgarte=baumgarte,
            bounce_threshold=bounce_threshold,
            complementarity_aware=bool(complementarity_aware),
            cone_method=cone_method,
            params=params,
            pair_params={kind: tensor(column) for kind, column in pair_values.items()},
            gravity=tensor(list(gravity)),
            unit_inertia=unit,
            pairs=tuple(pairs),
        )

    # ------------------------------------------------------------------ basic properties
    @property
    def dtype(self):
        return self.gravity.dtype

    @property
    def device(self):
        return self.gravity.device

    @property
    def object_names(self):
        return tuple(o.name for o in self.objects)

    @property
    def slot_count(self):
        """Total contact slots K."""
        return sum(p.count for p in self.pairs)

    @property
    def robot_dof(self):
        return 0 if self.robot is None else self.robot.model.nq

    # ------------------------------------------------------------------ parameters
    def parameter_names(self):
        """``<object>.mass``, ``<object>.friction``, ``<object>.restitution`` for every object."""
        return [f"{o.name}.{p}" for o in self.objects for p in OBJECT_PARAMETERS]

    def pair_parameter_names(self):
        """``<a>/<b>.friction`` and ``<a>/<b>.restitution`` for every colliding pair.

        A pair's coefficient is the larger of its two shapes' values until it is set for the
        pair (``pair_friction`` of :meth:`create`, or :meth:`with_parameters`); from then on it
        is a parameter of its own. ``<b>/<a>`` names the same pair.
        """
        return [f"{pair.name}.{kind}" for pair in self.pairs for kind in PAIR_PARAMETERS]

    def _locate(self, name):
        """``(table, kind, index)``: ``table`` is "object" (index of the object) or "pair"."""
        owner, _, kind = name.rpartition(".")
        if kind in OBJECT_PARAMETERS and owner in self.object_names:
            return "object", kind, self.object_names.index(owner)
        if kind in PAIR_PARAMETERS and owner.count("/") == 1:
            a, b = owner.split("/")
            for index, pair in enumerate(self.pairs):
                if {pair.a.name, pair.b.name} == {a, b}:
                    return "pair", kind, index
        raise ContactError(
            f"unknown object parameter '{name}'; known: {self.parameter_names()} and the pair coefficients "
            f"{self.pair_parameter_names()}"
        )

    def get_parameter(self, name):
        """Value of ``<object>.<mass|friction|restitution>`` or ``<a>/<b>.<friction|restitution>``
        (the pair's coefficient as the step uses it), shape (...) (keeps autograd)."""
        table, kind, index = self._locate(name)
        if table == "object":
            return self.params[kind][..., index]
        return self._pair_value(kind, index)

    def with_parameters(self, values):
        """New world with parameters replaced, differentiably; values may be batched tensors (...).

        Setting a pair coefficient (``"<a>/<b>.friction"``) makes it the pair's own value
        instead of the larger of the two shapes' values.

        Raises:
            ContactError: Unknown names, non-finite values, mass <= 0 (zero-mass objects),
                negative friction, restitution outside [0, 1].
        """
        params, pair_params, pairs = dict(self.params), dict(self.pair_params), list(self.pairs)
        for name, value in values.items():
            table, kind, index = self._locate(name)
            value = torch.as_tensor(value, dtype=self.dtype, device=self.device)
            _check_parameter(name, kind, value.detach())
            target = params if table == "object" else pair_params
            current = target[kind]
            batch = torch.broadcast_shapes(current.shape[:-1], value.shape)
            current = current.expand(*batch, current.shape[-1])
            onehot = torch.zeros(current.shape[-1], dtype=self.dtype, device=self.device)
            onehot[index] = 1.0
            target[kind] = current * (1.0 - onehot) + value[..., None] * onehot
            if table == "pair":
                pairs[index] = replace(pairs[index], explicit=pairs[index].explicit | {kind})
        return replace(self, params=params, pair_params=pair_params, pairs=tuple(pairs))

    def with_impact_substeps(self, substeps):
        """New world that splits the steps in which objects may touch each other into
        ``substeps`` substeps (the states are still reported every ``dt``).

        A hit's error at a coarse step is its own: measured on issue 19's MuJoCo collisions at
        10 ms, the hit left the target 3.5 deg off in yaw at the end and 5 substeps across it
        0.3 deg, for 1.7x the steps of the scene (benchmarks/RESULTS.md, contact-objects).

        Raises:
            ContactError: ``substeps`` not a positive integer, or a world with a robot (its
                simulator's step is fixed).
        """
        if int(substeps) != substeps or substeps < 1:
            raise ContactError(f"impact_substeps must be a positive integer, got {substeps!r}")
        if self.robot is not None and substeps > 1:
            raise ContactError("impact substeps need a world without a robot (the robot's simulator has its own time step)")
        return replace(self, impact_substeps=int(substeps))

    def _objects_may_touch(self, contacts):
        slots = [i for pair in self.pairs if pair.a.kind == "object" and pair.b.kind == "object"
                 for i in range(pair.start, pair.start + pair.count)]
        return bool(slots) and bool(contacts.active[..., slots].any())

    # ------------------------------------------------------------------ states
    def initial_state(self, position=None, orientation=None, linear_velocity=None, angular_velocity=None, q=None, qd=None):
        """A WorldState with zeros / identity where not given (tensors follow the world's dtype)."""
        count = len(self.objects)

        def value(given, shape, default=0.0):
            if given is None:
                out = torch.full(shape, default, dtype=self.dtype, device=self.device)
                if shape[-1] == 4:
                    out = out * 0.0
                    out[..., 0] = 1.0
                return out
            return torch.as_tensor(given, dtype=self.dtype, device=self.device)

        robot_q = robot_qd = None
        if self.robot is not None:
            robot_q = value(q, (self.robot_dof,))
            robot_qd = value(qd, (self.robot_dof,))
        return WorldState(
            position=value(position, (count, 3)),
            orientation=value(orientation, (count, 4)),
            linear_velocity=value(linear_velocity, (count, 3)),
            angular_velocity=value(angular_velocity, (count, 3)),
            q=robot_q,
            qd=robot_qd,
        )

    def _validate_state(self, state):
        count = len(self.objects)
        for name, tail in (("position", 3), ("orientation", 4), ("linear_velocity", 3), ("angular_velocity", 3)):
            value = getattr(state, name)
            if value.shape[-2:] != (count, tail):
                raise ContactError(f"state.{name} must have shape (..., {count}, {tail}), got {tuple(value.shape)}")
            if value.dtype != self.dtype or value.device != self.device:
                raise ContactError(f"state.{name} is {value.dtype} on {value.device}; the world uses {self.dtype} on {self.device}")
            if not bool(torch.isfinite(value.detach()).all()):
                raise ContactError(f"state.{name} contains NaN or inf")
        if self.robot is not None and (state.q is None or state.qd is None):
            raise ContactError("the world has a robot: state.q and state.qd are required")

    # ------------------------------------------------------------------ geometry
    def _poses(self, state):
        """World (rot, pos) of every object, proxy and static shape."""
        obj_rot = quat_to_matrix(quat_normalize(state.orientation))
        poses = {("object", i): (obj_rot[..., i, :, :], state.position[..., i, :]) for i in range(len(self.objects))}
        if self.proxies:
            links = [p.link for p in self.proxies]
            frames = forward_kinematics(self.robot.model, state.q, links)
            for i, proxy in enumerate(self.proxies):
                offset_rot = quat_to_matrix(torch.tensor(proxy.orientation, dtype=self.dtype, device=self.device))
                offset_pos = torch.tensor(proxy.position, dtype=self.dtype, device=self.device)
                rot = frames[..., i, :3, :3]
                poses[("proxy", i)] = (rot @ offset_rot, frames[..., i, :3, 3] + matvec(rot, offset_pos))
        for i, shape in enumerate(self.static):
            rot = quat_to_matrix(torch.tensor(shape.orientation, dtype=self.dtype, device=self.device))
            poses[("static", i)] = (rot, torch.tensor(shape.position, dtype=self.dtype, device=self.device))
        return poses

    def detect(self, state, margin=None, skip_apart=False):
        """All contact slots at a state (:class:`Contacts`, K = :attr:`slot_count`).

        Args:
            state: WorldState.
            margin: Activation distance [m]; default :attr:`margin`.
            skip_apart: Skip the narrow phase of pairs whose bounding spheres are farther
                apart than ``margin`` everywhere in the batch: their slots are inactive either
                way, but their points, normals and gaps are then placeholders (only for
                callers that use inactive slots for nothing, as :meth:`step`).
        """
        margin = self.margin if margin is None else margin
        poses = self._poses(state)
        parts = []
        for pair in self.pairs:
            rot_a, pos_a = poses[(pair.a.kind, pair.a.index)]
            rot_b, pos_b = poses[(pair.b.kind, pair.b.index)]
            if skip_apart and _apart(pair, rot_a, pos_a, rot_b, pos_b, margin):
                parts.append(_inactive_slots(pair, pos_a, pos_b))
            else:
                parts.append(collide(pair.a.shape, rot_a, pos_a, pair.b.shape, rot_b, pos_b, margin))
        return concat_contacts(parts)

    def _speed_bound(self, state):
        """Upper bound of any surface point's speed [m/s] over the batch (for speculative contacts)."""
        with torch.no_grad():
            speeds = [torch.zeros((), dtype=self.dtype, device=self.device)]
            if self.objects:
                radius = torch.tensor([bounding_radius(o.shape) for o in self.objects], dtype=self.dtype, device=self.device)
                v = torch.linalg.vector_norm(state.linear_velocity, dim=-1)
                w = torch.linalg.vector_norm(state.angular_velocity, dim=-1)
                speeds.append((v + w * radius).amax())
            for proxy in self.proxies:
                jac = frame_jacobian(self.robot.model, state.q, proxy.link)
                twist = matvec(jac, state.qd)
                reach = math.sqrt(sum(c * c for c in proxy.position)) + bounding_radius(proxy.shape)
                point = torch.linalg.vector_norm(twist[..., :3], dim=-1) + reach * torch.linalg.vector_norm(twist[..., 3:], dim=-1)
                speeds.append(point.amax())
            return float(torch.stack(speeds).amax()) + self.dt * float(torch.linalg.vector_norm(self.gravity))

    def settle(self, state, names=None, max_shift=0.01):
        """Translate objects along the gravity direction onto the static shapes they nearly touch.

        Camera poses of an object lying on a table are noisy by millimetres: taken as they are,
        the object starts inside the table (and is pushed out) or above it (and drops). This
        moves each object (unbatched states) by the gap of its deepest contact with static
        geometry, when that gap is below ``max_shift`` [m] in magnitude.

        Args:
            state: WorldState.
            names: Objects to settle (default all).
            max_shift: Largest correction [m].

        Returns:
            WorldState with corrected positions.
        """
        contacts = self.detect(state, margin=max_shift)
        up = -self.gravity / torch.linalg.vector_norm(self.gravity).clamp_min(torch.finfo(self.dtype).tiny)
        position = state.position.clone()
        for j, obj in enumerate(self.objects):
            if names is not None and obj.name not in names:
                continue
            gaps = [
                contacts.gap[..., pair.start : pair.start + pair.count].masked_fill(
                    ~contacts.active[..., pair.start : pair.start + pair.count], math.inf
                )
                for pair in self.pairs
                if "static" in (pair.a.kind, pair.b.kind) and ("object", j) in ((pair.a.kind, pair.a.index), (pair.b.kind, pair.b.index))
            ]
            if not gaps:
                continue
            deepest = torch.cat(gaps, -1).amin(-1)
            shift = torch.where(deepest.abs() < max_shift, -deepest, torch.zeros_like(deepest))
            position[..., j, :] = position[..., j, :] + shift[..., None] * up
        return replace(state, position=position)

    def check_state(self, state, tolerance=1e-3):
        """Raise if shapes interpenetrate by more than ``tolerance`` [m] (a bad start state).

        Raises:
            ContactError: Naming the deepest pair and its penetration.
        """
        self._validate_state(state)
        contacts = self.detect(state)
        gap = torch.where(contacts.active, contacts.gap, torch.full_like(contacts.gap, math.inf)).detach()
        worst = gap.reshape(-1, gap.shape[-1]).amin(0)
        for pair in self.pairs:
            depth = float(worst[pair.start : pair.start + pair.count].min()) if pair.count else math.inf
            if depth < -tolerance:
                raise ContactError(
                    f"'{pair.a.name}' and '{pair.b.name}' interpenetrate by {-depth * 1000:.1f} mm "
                    f"(tolerance {tolerance * 1000:.1f} mm); move them apart in the start state"
                )

    # ------------------------------------------------------------------ coefficients per slot
    def _pair_value(self, kind, index):
        """Coefficient of pair ``index``, shape (...): its own value if set, else the larger of
        the two shapes' (static shapes and proxies: their constants)."""
        pair = self.pairs[index]
        if kind in pair.explicit:
            return self.pair_params[kind][..., index]
        values = self.params[kind]
        sides = []
        for geom in (pair.a, pair.b):
            if geom.kind == "object":
                sides.append(values[..., geom.index])
            else:
                owner = self.proxies[geom.index] if geom.kind == "proxy" else self.static[geom.index]
                sides.append(torch.full(values.shape[:-1], float(getattr(owner, kind)), dtype=self.dtype, device=self.device))
        return torch.maximum(*sides)

    def _slot_values(self, kind, batch):
        """Per-slot coefficient (the pair's, see :meth:`_pair_value`), shape (..., K)."""
        columns = []
        for index, pair in enumerate(self.pairs):
            value = self._pair_value(kind, index)
            columns.append(value[..., None].expand(*value.shape, pair.count))
        lead = torch.broadcast_shapes(*(c.shape[:-1] for c in columns))
        out = torch.cat([c.expand(*lead, c.shape[-1]) for c in columns], -1)
        return out.expand(*batch, out.shape[-1])

    def _slot_signs(self, kind, index):
        """+1 where the slot's shape a is (kind, index), -1 for shape b, 0 elsewhere, shape (K,)."""
        signs = []
        for pair in self.pairs:
            value = (1.0 if (pair.a.kind, pair.a.index) == (kind, index) else 0.0) - (
                1.0 if (pair.b.kind, pair.b.index) == (kind, index) else 0.0
            )
            signs += [value] * pair.count
        return torch.tensor(signs, dtype=self.dtype, device=self.device)

    # ------------------------------------------------------------------ dynamics pieces
    def _object_inertia(self, rot, batch):
        """World inverse inertia (..., J, 3, 3) and inertia (..., J, 3, 3)."""
        principal = self.params["mass"][..., None] * self.unit_inertia
        principal = principal.expand(*batch, *principal.shape[-2:])
        inverse = rot @ torch.diag_embed(1.0 / principal) @ rot.transpose(-1, -2)
        inertia = rot @ torch.diag_embed(principal) @ rot.transpose(-1, -2)
        return inverse, inertia

    def _contact_jacobian(self, state, contacts, frames):
        """Contact-frame Jacobian (..., 3K, nv), columns [robot joints, object 0 (v, w), ...]."""
        point = contacts.point
        batch = point.shape[:-2]
        k = point.shape[-2]
        blocks = []
        if self.robot is not None:
            robot_block = torch.zeros(*batch, k, 3, self.robot_dof, dtype=self.dtype, device=self.device)
            for i, proxy in enumerate(self.proxies):
                sign = self._slot_signs("proxy", i)
                if not bool(sign.any()):
                    continue
                jac = frame_jacobian(self.robot.model, state.q, proxy.link)
                origin = forward_kinematics(self.robot.model, state.q, proxy.link)[..., :3, 3]
                lever = point - origin[..., None, :]
                point_jac = jac[..., None, :3, :] - skew(lever) @ jac[..., None, 3:, :]
                robot_block = robot_block + sign[:, None, None] * point_jac
            blocks.append(robot_block)
        eye = torch.eye(3, dtype=self.dtype, device=self.device)
        for j in range(len(self.objects)):
            sign = self._slot_signs("object", j)
            lever = point - state.position[..., j, None, :]
            block = torch.cat([eye.expand(*batch, k, 3, 3), -skew(lever)], -1) * sign[:, None, None]
            blocks.append(block)
        jac = torch.cat(blocks, -1)
        return (frames @ jac).reshape(*batch, 3 * k, jac.shape[-1])

    def _robot_free_step(self, state, tau):
        """The robot's free step and its impulse response ``W = (d qd_next / d tau) / h``.

        ``W`` is the robot's effective inverse inertia *as its own simulator integrates it*
        (``(M + h B)⁻¹`` for implicit damping, PBD's for PBD): using ``M(q)⁻¹`` instead would
        let the contact solve predict velocities the simulator does not produce (a damped
        wrist responds far less than ``M⁻¹`` says), and the hand would sink into what it
        pushes. It comes from one reverse pass vmapped over the joints and is symmetrized.
        It is treated as locally constant for gradients (its derivative with respect to the
        state and parameters would need second derivatives of the simulator).

        Returns:
            ``(q_free, qd_free, W)`` with shapes (..., n), (..., n), (..., n, n).
        """
        n = self.robot_dof
        tau = torch.zeros_like(state.q) if tau is None else tau
        with torch.enable_grad():
            probe = torch.zeros(torch.broadcast_shapes(tau.shape, state.q.shape), dtype=self.dtype, device=self.device, requires_grad=True)
            q_free, qd_free = self.robot.joint_step(state.q, state.qd, tau + probe)
            eye = torch.eye(n, dtype=self.dtype, device=self.device)
            (response,) = torch.autograd.grad(
                qd_free, probe, eye.reshape(n, *([1] * (probe.ndim - 1)), n).expand(n, *probe.shape),
                is_grads_batched=True, retain_graph=torch.is_grad_enabled(),
            )
        response = response.movedim(0, -2).detach() / self.dt
        mobility = 0.5 * (response + response.transpose(-1, -2))
        if not torch.is_grad_enabled():
            q_free, qd_free = q_free.detach(), qd_free.detach()
        return q_free, qd_free, mobility

    def _inverse_mass_apply(self, mobility, inv_inertia, mat):
        """M⁻¹ applied to the columns of ``mat`` (..., nv, c): robot block ``mobility``, objects exact."""
        parts = []
        n = self.robot_dof
        if self.robot is not None:
            parts.append(mobility @ mat[..., :n, :])
        mass = self.params["mass"]
        for j in range(len(self.objects)):
            lin = mat[..., n + 6 * j : n + 6 * j + 3, :]
            ang = mat[..., n + 6 * j + 3 : n + 6 * j + 6, :]
            parts.append(lin / mass[..., j, None, None])
            parts.append(inv_inertia[..., j, :, :] @ ang)
        return torch.cat(parts, -2)

    def _free_velocity(self, state, robot_free, wrench, inv_inertia, inertia):
        """Velocities without contact (..., nv) (robot part from its free step)."""
        h = self.dt
        parts = []
        if robot_free is not None:
            parts.append(robot_free[1])
        shape = inv_inertia.shape[:-1]  # (..., J, 3) with the full batch
        v, w = state.linear_velocity.expand(shape), state.angular_velocity.expand(shape)
        force = torch.zeros_like(v) if wrench is None else wrench[..., :3]
        torque = torch.zeros_like(w) if wrench is None else wrench[..., 3:]
        mass = self.params["mass"][..., None]
        v_free = v + h * (self.gravity + force / mass)
        gyro = torch.cross(w, matvec(inertia, w), dim=-1)
        w_free = w + h * matvec(inv_inertia, torque - gyro)
        obj = torch.cat([v_free, w_free], -1)
        parts.append(obj.reshape(*obj.shape[:-2], -1))
        batch = torch.broadcast_shapes(*(p.shape[:-1] for p in parts))
        return torch.cat([p.expand(*batch, p.shape[-1]) for p in parts], -1)

    def _velocity_vector(self, state, batch):
        parts = []
        if self.robot is not None:
            parts.append(state.qd.expand(*batch, self.robot_dof))
        obj = torch.cat([state.linear_velocity, state.angular_velocity], -1)
        obj = obj.expand(*batch, *obj.shape[-2:])
        parts.append(obj.reshape(*batch, -1))
        return torch.cat(parts, -1)

    # ------------------------------------------------------------------ stepping
    def step(self, state, tau=None, wrench=None, warm=None):
        """Advance one time step.

        Args:
            state: WorldState.
            tau: Robot joint torques [N·m], shape (..., n) (default zero).
            wrench: Applied object wrenches ``[force (N), torque (N·m)]`` in the world,
                shape (..., J, 6) (default zero).
            warm: Previous step's :class:`StepInfo` (warm start by contact slot).

        Returns:
            ``(next_state, info)``.

        Raises:
            ContactError: Malformed states, or a non-finite result (reported, never returned).
        """
        self._validate_state(state)
        h = self.dt
        # Two shapes closing at most at twice the fastest point speed may touch within the step.
        contacts = self.detect(state, self.margin + 2.0 * h * self._speed_bound(state), skip_apart=True)
        if self.impact_substeps > 1 and self._objects_may_touch(contacts):
            fine = replace(self, dt=h / self.impact_substeps, impact_substeps=1)
            for _ in range(self.impact_substeps):
                state, warm = fine.step(state, tau, wrench, warm)
            return state, warm
        batch = contacts.gap.shape[:-1]
        if self.robot is not None:
            batch = torch.broadcast_shapes(batch, state.q.shape[:-1])
        batch = torch.broadcast_shapes(batch, *(value.shape[:-1] for value in (*self.params.values(), *self.pair_params.values())))
        k = contacts.count
        frames = contact_frames(contacts.normal)
        obj_rot = quat_to_matrix(quat_normalize(state.orientation))
        inv_inertia, inertia = self._object_inertia(obj_rot, batch)
        jac = self._contact_jacobian(state, contacts, frames).expand(*batch, 3 * k, -1)
        robot_free = None if self.robot is None else self._robot_free_step(state, tau)
        mobility = None if robot_free is None else robot_free[2]
        minv_jt = self._inverse_mass_apply(mobility, inv_inertia, jac.transpose(-1, -2))
        delassus = jac @ minv_jt
        v_free = self._free_velocity(state, robot_free, wrench, inv_inertia, inertia)
        v_free = v_free.expand(*batch, v_free.shape[-1])
        free_contact = matvec(jac, v_free)
        approach = free_contact[..., 0::3]
        gap = contacts.gap.expand(*batch, k)
        active = contacts.active.expand(*batch, k)
        restitution = self._slot_values("restitution", batch)
        mu = self._slot_values("friction", batch)
        bouncing = active & (restitution > 0) & (gap + h * approach < 0)
        bouncing = bouncing & (self._impact_speed(state, jac, gap, approach, batch) < -self.bounce_threshold)
        stabilize = torch.where(gap > 0, gap, self.baumgarte * gap) / h
        normal_bias = torch.where(bouncing, restitution * approach, stabilize)
        bias = free_contact + torch.stack([normal_bias, torch.zeros_like(gap), torch.zeros_like(gap)], -1).reshape(*batch, 3 * k)
        solution = self._solve(delassus, bias, mu, active, warm)
        impulse = solution.impulse.reshape(*batch, 3 * k)
        v_next = v_free + matvec(minv_jt, impulse)
        correction = torch.zeros_like(v_next)
        if bool(bouncing.any()):
            correction = self._bounce_correction(jac, minv_jt, delassus, v_next, gap, approach, bouncing, impulse, active)
        robot_next = self._robot_response(state, tau, jac, impulse, robot_free)
        next_state = self._integrate(state, robot_next, v_next, h * v_next + correction, batch)
        penetration = torch.where(active, -gap, torch.zeros_like(gap)).amax(-1).clamp_min(0.0).detach()
        self._check_finite(next_state)
        info = StepInfo(contacts, solution.impulse, solution, bouncing, penetration)
        return next_state, info

    def _solve(self, delassus, bias, mu, active, warm):
        """Contact impulses for the slots active anywhere in the batch (the others get zero).

        Compacting to the active slots keeps the solves small (a box on a plane has 8 corner
        slots of which 4 touch); results are scattered back to every slot, so warm starts and
        diagnostics stay indexed by slot.
        """
        k = active.shape[-1]
        keep = active.reshape(-1, k).any(0).nonzero().flatten()
        rows = (3 * keep[:, None] + torch.arange(3, device=keep.device)).flatten()
        batch = bias.shape[:-1]
        if self.solver == "lcp":
            empty = LCPSolution(torch.zeros(*batch, k, 3, dtype=self.dtype, device=self.device),
                                torch.zeros(*batch, k, 3, dtype=torch.int8, device=self.device),
                                *(torch.ones(batch, dtype=torch.bool, device=self.device),) * 2,
                                torch.zeros(batch, dtype=torch.bool, device=self.device))
        else:
            empty = ConeSolution(torch.zeros(*batch, k, 3, dtype=self.dtype, device=self.device),
                                 torch.zeros(*batch, k, dtype=self.dtype, device=self.device),
                                 torch.zeros(*batch, k, dtype=torch.int8, device=self.device),
                                 *(torch.ones(batch, dtype=torch.bool, device=self.device),) * 2,
                                 torch.zeros(batch, dtype=torch.bool, device=self.device))
        if keep.numel() == 0:
            return empty
        sub_a = delassus[..., rows, :][..., :, rows]
        sub_b, sub_mu, sub_active = bias[..., rows], mu[..., keep], active[..., keep]
        prior = None if warm is None else warm.solution
        if self.solver == "lcp":
            codes = None if prior is None else prior.codes[..., keep, :]
            sub = solve_lcp(sub_a, sub_b, sub_mu, sub_active, warm_codes=codes, complementarity_aware=self.complementarity_aware)
            codes = empty.codes.index_copy(-2, keep, sub.codes.expand(*batch, keep.numel(), 3))
            return LCPSolution(empty.impulse.index_copy(-2, keep, sub.impulse), codes, sub.warm_hit, sub.converged, sub.fallback)
        if prior is not None:
            prior = ConeSolution(prior.impulse[..., keep, :], prior.multiplier[..., keep], prior.modes[..., keep],
                                 prior.warm_hit, prior.converged, prior.fallback)
        sub = solve_cone(sub_a, sub_b, sub_mu, sub_active, warm=prior, method=self.cone_method)
        return ConeSolution(
            empty.impulse.index_copy(-2, keep, sub.impulse),
            empty.multiplier.index_copy(-1, keep, sub.multiplier.expand(*batch, keep.numel())),
            empty.modes.index_copy(-1, keep, sub.modes.expand(*batch, keep.numel())),
            sub.warm_hit, sub.converged, sub.fallback,
        )

    def _impact_speed(self, state, jac, gap, approach, batch):
        """Normal velocity at the impact [m/s], (..., K), for the bounce threshold (no gradient).

        The free velocity ``approach`` carries a whole step of gravity (``h g`` ~ 0.1 m/s at
        10 ms, the default threshold itself): tested against it, a resting stack settling at
        a few cm/s bounced, rose and landed at the speed it bounced with, hopping forever.
        A contact touching at the start of the step hits with its current velocity; one
        closing within the step at ``t* = gap / -approach``, with the velocity interpolated
        to ``t*``.
        """
        with torch.no_grad():
            current = matvec(jac[..., 0::3, :], self._velocity_vector(state, batch))
            closing = (-approach).clamp_min(torch.finfo(gap.dtype).tiny)
            fraction = (gap / closing).clamp(0.0, self.dt) / self.dt
            return current + fraction * (approach - current)

    def _bounce_correction(self, jac, minv_jt, delassus, v_next, gap, approach, bouncing, impulse, active):
        """Position correction so that bounces within the step follow the continuous-time path.

        A contact closing at ``approach`` < 0 from ``gap`` > 0 hits at ``t* = gap / -approach``
        and then separates at its post-step normal velocity, ending at ``v_n (h - t*)`` instead
        of ``gap + h v_n``. The missing normal displacement is applied in the mass-weighted
        least-squares sense through the Delassus matrix, with the normal displacement of every
        other loaded contact (positive normal impulse this step) held at zero: a correction free
        to rotate a box that rests on the ground (a hit above its centre) tilted it by 0.3 deg
        at 10 ms; it then stood on three corners, two diagonal ones carrying the load, and the
        sliding box lost its spin twice as fast as MuJoCo's (issue 19).
        """
        h = self.dt
        normal_rows = slice(0, None, 3)
        moving = bouncing & (gap > 0)
        v_normal = matvec(jac[..., normal_rows, :], v_next)
        impact = (gap / (-approach).clamp_min(torch.finfo(gap.dtype).tiny)).clamp(0.0, h)
        target = torch.where(moving, -gap - v_normal * impact, torch.zeros_like(gap))
        with torch.no_grad():
            pressed = impulse[..., normal_rows]
            loaded = active & (pressed > torch.finfo(gap.dtype).eps ** 0.5 * pressed.abs().amax(-1, keepdim=True))
        mask = (moving | loaded).to(gap.dtype)
        a_nn = delassus[..., normal_rows, normal_rows]
        reduced = a_nn * mask[..., :, None] * mask[..., None, :] + torch.diag_embed(1.0 - mask)
        multipliers = matvec(pinv(reduced), target) * mask
        return matvec(minv_jt[..., :, normal_rows], multipliers)

    def _robot_response(self, state, tau, jac, impulse, robot_free):
        """Robot (q, qd) after the step, by its own simulator with the contact forces as torques.

        The contact solve sees the robot through its linearized impulse response; the robot is
        then advanced by its JointSpaceSimulator with ``tau + Jᵀ x / h``, so its dynamics (PBD
        substeps, implicit damping, nonlinearity) stay its own. Without robot contact impulses
        the free step is reused.
        """
        if self.robot is None:
            return None
        n = self.robot_dof
        generalized = matvec(jac.transpose(-1, -2)[..., :n, :], impulse)
        if not bool((generalized != 0).any()):
            return robot_free[0], robot_free[1]
        tau = torch.zeros_like(state.q) if tau is None else tau
        return self.robot.joint_step(state.q, state.qd, tau + generalized / self.dt)

    def _integrate(self, state, robot_next, v_next, displacement, batch):
        n = self.robot_dof
        count = len(self.objects)
        q = qd = None
        if robot_next is not None:
            # Bounce corrections (displacement beyond h v) also move the robot.
            q = robot_next[0] + (displacement[..., :n] - self.dt * v_next[..., :n])
            qd = robot_next[1]
        obj_v = v_next[..., n:].reshape(*batch, count, 6)
        obj_d = displacement[..., n:].reshape(*batch, count, 6)
        position = state.position + obj_d[..., :3]
        orientation = integrate_orientation(state.orientation.expand(*batch, count, 4), obj_d[..., 3:])
        return WorldState(position, orientation, obj_v[..., :3], obj_v[..., 3:], q, qd)

    @staticmethod
    def _check_finite(state):
        for f in fields(state):
            value = getattr(state, f.name)
            if value is not None and not bool(torch.isfinite(value.detach()).all()):
                raise ContactError(f"the step produced a non-finite {f.name}; check masses, inertias and the time step")

    def rollout(self, state, steps, tau=None, wrench=None, check_start=True, penetration_tolerance=1e-3):
        """Simulate ``steps`` steps, warm-starting each solve from the previous one.

        Args:
            state: Initial WorldState.
            steps: Number of steps T.
            tau: Robot torques, shape (..., T, n), or None.
            wrench: Object wrenches, shape (..., T, J, 6), or None.
            check_start: Raise on an interpenetrating start state (see :meth:`check_state`).
            penetration_tolerance: Allowed start penetration [m].

        Returns:
            ``(states, infos)``: WorldState with a time dimension before the per-object one
            (e.g. position (..., T, J, 3), q (..., T, n)) and the list of StepInfo.
        """
        if check_start:
            self.check_state(state, penetration_tolerance)
        states, infos, info = [], [], None
        for t in range(int(steps)):
            tau_t = None if tau is None else tau[..., t, :]
            wrench_t = None if wrench is None else wrench[..., t, :, :]
            state, info = self.step(state, tau_t, wrench_t, warm=info)
            states.append(state)
            infos.append(info)
        return _stack_time(states), infos


def _apart(pair, rot_a, pos_a, rot_b, pos_b, margin):
    """Whether no slot of a pair can be active in the whole batch (then its narrow phase is
    skipped): bounding spheres more than ``margin`` apart, or for two boxes a separating face
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
    vertical normals, and as gap the bounding spheres' distance (finite: a gap enters the
    step's arithmetic on every slot before the active ones are picked)."""
    with torch.no_grad():
        spheres = torch.linalg.vector_norm(pos_a - pos_b, dim=-1) - bounding_radius(pair.a.shape) - bounding_radius(pair.b.shape)
        batch = spheres.shape
        point = pos_a.expand(*batch, 3)[..., None, :].expand(*batch, pair.count, 3).clone()
        normal = torch.zeros_like(point)
        normal[..., 2] = 1.0
        inactive = torch.zeros(*batch, pair.count, dtype=torch.bool, device=pos_a.device)
        return Contacts(point, normal, spheres[..., None].expand(*batch, pair.count).clone(), inactive, inactive.clone())


def _stack_time(states):
    """Stack states over time: object fields at dim -3, robot fields at dim -2."""
    first = states[0]
    out = {}
    for f in fields(first):
        if getattr(first, f.name) is None:
            out[f.name] = None
        else:
            dim = -2 if f.name in ("q", "qd") else -3
            out[f.name] = torch.stack([getattr(s, f.name) for s in states], dim)
    return WorldState(**out)


def _object_tensors(objects, tensor):
    """Unit inertias (K, 3) [m²] and the parameter tensors (mass, friction, restitution) of the objects."""
    like = tensor([])
    unit = torch.stack([
        (tensor(o.inertia) / o.mass) if o.inertia is not None else unit_inertia(o.shape, like.dtype, like.device)
        for o in objects
    ]) if objects else torch.zeros(0, 3, dtype=like.dtype, device=like.device)
    params = {name: tensor([getattr(o, name) for o in objects]) for name in ("mass", "friction", "restitution")}
    return unit, params


def _checked_options(solver, cone_method, dt, margin, baumgarte, bounce_threshold):
    """The numeric options as floats, checked (ContactError names the bad one)."""
    if solver not in ("lcp", "cone"):
        raise ContactError(f"solver must be 'lcp' or 'cone', got {solver!r}")
    if cone_method not in ("auto", "staggered"):
        raise ContactError(f"cone_method must be 'auto' or 'staggered', got {cone_method!r}")
    return (_finite("dt [s]", dt, 0.0, low_open=True), _finite("margin [m]", margin, 0.0),
            _finite("baumgarte", baumgarte, 0.0, 1.0, low_open=True),
            _finite("bounce_threshold [m/s]", bounce_threshold, 0.0))


def _checked_names(objects, static, proxies):
    """Every shape name, unique and without '/' (ContactError otherwise)."""
    if not objects and not proxies:
        raise ContactError("a contact world needs at least one object or robot proxy")
    names = [o.name for o in objects] + [s.name for s in static] + [p.name for p in proxies]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ContactError(f"duplicate shape names: {duplicates}")
    if any("/" in n for n in names):
        raise ContactError(f"shape names may not contain '/' (it separates the names of a pair): {[n for n in names if '/' in n]}")
    return names


def _frame_of(robot, proxies, dt, dtype, device, gravity):
    """(dtype, device, gravity) of a world: the robot model's when there is a robot."""
    if robot is not None:
        dtype, device = robot.model.dtype, robot.model.device
        if abs(robot.dt - dt) > 1e-12 * dt:
            raise ContactError(f"robot simulator dt {robot.dt} differs from the world dt {dt}")
        gravity = robot.model.gravity.tolist()
        for proxy in proxies:
            robot.model.frame(proxy.link)  # raises for unknown links
    elif proxies:
        raise ContactError("link proxies need a robot")
    device = torch.get_default_device() if device is None else torch.device(device)
    return dtype or torch.float64, device, gravity


def _pair_overrides(names, pair_friction, pair_restitution):
    """``{(kind, frozenset(pair)): value}`` of the per-pair coefficients, checked."""
    overrides = {}
    for kind, table, high in (("friction", pair_friction, math.inf), ("restitution", pair_restitution, 1.0)):
        for key, value in (table or {}).items():
            unknown = set(key) - set(names)
            if len(key) != 2 or unknown:
                raise ContactError(f"pair_{kind} key {key!r} must name two shapes of the world; unknown {sorted(unknown)}")
            overrides[(kind, frozenset(key))] = _finite(f"pair_{kind}[{key}]", value, 0.0, high)
    return overrides


def _pair_table(geoms, excluded, overrides):
    """The colliding pairs with their contact slots, and the per-pair coefficient columns."""
    pairs, start, pair_values = [], 0, {"friction": [], "restitution": []}
    for i, a in enumerate(geoms):
        for b in geoms[i + 1 :]:
            if a.kind == b.kind and a.kind in ("static", "proxy"):
                continue
            key = frozenset((a.name, b.name))
            if key in excluded or (isinstance(a.shape, Plane) and isinstance(b.shape, Plane)):
                continue
            count = slot_count(a.shape, b.shape)
            explicit = frozenset(kind for kind in pair_values if (kind, key) in overrides)
            for kind, column in pair_values.items():
                column.append(overrides.get((kind, key), 0.0))
            pairs.append(_Pair(a, b, start, count, explicit))
            start += count
    return pairs, pair_values
