"""A contact world's model: free rigid objects, static geometry, an articulated robot, the pair table.

:class:`ContactWorld` holds what is simulated (objects, static shapes, the robot and its link
proxies, the colliding pairs with their contact slots, the differentiable parameters) and its
:class:`~diffsim_ros.sim.contact.options.ContactOptions`; its :meth:`~ContactWorld.step` and
:meth:`~ContactWorld.rollout` are :func:`diffsim_ros.sim.contact.step.step` and
:func:`~diffsim_ros.sim.contact.step.rollout`, the step as a list of stages.

Contact coefficients of a pair are the larger of the two shapes' values (as MuJoCo combines
friction; static shapes and robot proxies default to 0, so an object's own values apply),
unless set for the pair: then ``<a>/<b>.friction`` and ``<a>/<b>.restitution`` are parameters
of their own (a box's friction on the table and on another box are different coefficients).
Parameters ``<object>.mass`` [kg], ``<object>.friction`` and ``<object>.restitution`` may be
tensors with leading batch dimensions (one value per batch element) and carry gradients.
"""

import functools
import math
from dataclasses import dataclass, field, replace

import torch

from diffsim_ros.sim.contact import broadphase
from diffsim_ros.sim.contact import step as stepping
from diffsim_ros.sim.contact.detection import slot_count
from diffsim_ros.sim.contact.errors import ContactError, checked_number
from diffsim_ros.sim.contact.options import ContactOptions
from diffsim_ros.sim.contact.shapes import Box, Capsule, Plane, Sphere, unit_inertia
from diffsim_ros.sim.contact.state import WorldState

__all__ = ["RigidObject", "StaticShape", "LinkProxy", "ContactWorld"]

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
    checked_number(f"{where} friction", shape.friction, 0.0)
    checked_number(f"{where} restitution", shape.restitution, 0.0, 1.0)


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
        checked_number(f"object '{self.name}' mass [kg]", self.mass, 0.0, low_open=True)
        checked_number(f"object '{self.name}' friction", self.friction, 0.0)
        checked_number(f"object '{self.name}' restitution", self.restitution, 0.0, 1.0)
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

    Build with :meth:`create`. Immutable: :meth:`with_parameters` returns a new world. The world
    is the model the step's stages read (:mod:`diffsim_ros.sim.contact.step`); :meth:`step`,
    :meth:`rollout`, :meth:`detect` and :meth:`check_state` are those stages.

    Attributes:
        objects: The :class:`RigidObject` tuple (J objects, in state order).
        static: :class:`StaticShape` tuple.
        robot: JointSpaceSimulator of the robot (``robot.dt`` must equal ``dt``) or None.
        proxies: :class:`LinkProxy` tuple on the robot's links.
        dt: Time step [s] (the robot simulator's).
        options: :class:`~diffsim_ros.sim.contact.options.ContactOptions`: solver, margin,
            Baumgarte fraction, bounce threshold, solver variants, impact substeps.
        gravity: Gravity [m/s²], shape (3,).
        unit_inertia: Principal inertias per unit mass [m²], shape (J, 3).
        params: ``{"mass", "friction", "restitution"}`` -> tensor (..., J).
        pair_params: ``{"friction", "restitution"}`` -> tensor (..., P), one column per pair
            (used for the pairs whose coefficient is set explicitly, see :meth:`create`).
        pairs: The colliding pairs, each with its slots ``start .. start + count`` of the K slots.
    """

    objects: tuple
    static: tuple
    robot: object
    proxies: tuple
    dt: float
    options: ContactOptions
    gravity: torch.Tensor = field(repr=False)
    unit_inertia: torch.Tensor = field(repr=False)
    params: dict = field(repr=False)
    pair_params: dict = field(repr=False)
    pairs: tuple = field(repr=False)

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

        ``solver``, ``margin``, ``baumgarte``, ``bounce_threshold``, ``complementarity_aware`` and
        ``cone_method`` become its :attr:`options` (:class:`~diffsim_ros.sim.contact.options.ContactOptions`).

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
        options = ContactOptions(solver, margin, baumgarte, bounce_threshold, complementarity_aware, cone_method)
        dt = checked_number("dt [s]", dt, 0.0, low_open=True)
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
            options=options,
            params=params,
            pair_params={kind: tensor(column) for kind, column in pair_values.items()},
            gravity=tensor(list(gravity)),
            unit_inertia=unit,
            pairs=tuple(pairs),
        )

    # ------------------------------------------------------------------ basic properties
    @property
    def dtype(self):
        """The world's tensor dtype (its gravity's)."""
        return self.gravity.dtype

    @property
    def device(self):
        """The world's tensor device (its gravity's)."""
        return self.gravity.device

    @property
    def object_names(self):
        """The objects' names, in state order."""
        return tuple(o.name for o in self.objects)

    @property
    def slot_count(self):
        """Total contact slots K."""
        return sum(p.count for p in self.pairs)

    @property
    def robot_dof(self):
        """Robot joints n (0 without a robot)."""
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

    def locate_parameter(self, name):
        """Where a parameter name points: ``(table, kind, index)``.

        Args:
            name: ``<object>.<mass|friction|restitution>`` or ``<a>/<b>.<friction|restitution>``.

        Returns:
            ``table`` "object" (``index`` of the object) or "pair" (``index`` in ``pairs``), and
            ``kind`` the parameter ("mass", "friction" or "restitution").

        Raises:
            ContactError: An unknown name (listing the known ones).
        """
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
        table, kind, index = self.locate_parameter(name)
        if table == "object":
            return self.params[kind][..., index]
        return self.pair_value(kind, index)

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
            table, kind, index = self.locate_parameter(name)
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
        options = replace(self.options, impact_substeps=substeps)
        if self.robot is not None and options.impact_substeps > 1:
            raise ContactError("impact substeps need a world without a robot (the robot's simulator has its own time step)")
        return replace(self, options=options)

    def with_regularization(self, relative):
        """New world whose cone contact problems take ``relative`` compliance on the Delassus
        diagonal (:attr:`ContactOptions.regularization <diffsim_ros.sim.contact.options.ContactOptions>`).

        Raises:
            ContactError: ``relative`` outside [0, 1].
        """
        return replace(self, options=replace(self.options, regularization=relative))

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

    # ------------------------------------------------------------------ geometry (stages of the step)
    def detect(self, state, margin=None, skip_apart=False):
        """All contact slots at a state: :func:`diffsim_ros.sim.contact.broadphase.detect` of this world.

        Args:
            state: WorldState.
            margin: Activation distance [m]; default ``options.margin``.
            skip_apart: Placeholders for pairs apart everywhere in the batch (see the stage).

        Returns:
            Contacts, K = :attr:`slot_count` slots.
        """
        return broadphase.detect(self, state, margin, skip_apart)

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
        """Raise if shapes interpenetrate by more than ``tolerance`` [m] (a bad start state);
        :func:`diffsim_ros.sim.contact.step.check_state` of this world.

        Raises:
            ContactError: Naming the deepest pair and its penetration.
        """
        stepping.check_state(self, state, tolerance)

    # ------------------------------------------------------------------ coefficients per slot
    def pair_value(self, kind, index):
        """Coefficient ``kind`` ("friction" or "restitution") of pair ``index``, shape (...): its
        own value if set, else the larger of the two shapes' (static shapes and proxies: their
        constants)."""
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

    def slot_values(self, kind, batch):
        """Per-slot coefficient ``kind`` (the pair's, see :meth:`pair_value`), shape (*batch, K)."""
        columns = []
        for index, pair in enumerate(self.pairs):
            value = self.pair_value(kind, index)
            columns.append(value[..., None].expand(*value.shape, pair.count))
        lead = torch.broadcast_shapes(*(c.shape[:-1] for c in columns))
        out = torch.cat([c.expand(*lead, c.shape[-1]) for c in columns], -1)
        return out.expand(*batch, out.shape[-1])

    def slot_signs(self, kind, index):
        """+1 where the slot's shape a is (kind, index), -1 for shape b, 0 elsewhere, shape (K,)."""
        signs = []
        for pair in self.pairs:
            value = (1.0 if (pair.a.kind, pair.a.index) == (kind, index) else 0.0) - (
                1.0 if (pair.b.kind, pair.b.index) == (kind, index) else 0.0
            )
            signs += [value] * pair.count
        return torch.tensor(signs, dtype=self.dtype, device=self.device)

    # ------------------------------------------------------------------ stepping
    def step(self, state, tau=None, wrench=None, warm=None):
        """Advance one time step ``dt``: :func:`diffsim_ros.sim.contact.step.step` of this world
        (state, robot torques [N·m] (..., n), object wrenches [N, N·m] (..., J, 6), the previous
        StepInfo as warm start); returns ``(next_state, info)``.

        Raises:
            ContactError: Malformed states, or a non-finite result (reported, never returned).
        """
        return stepping.step(self, state, tau, wrench, warm)

    def rollout(self, state, steps, tau=None, wrench=None, check_start=True, penetration_tolerance=1e-3):
        """Simulate ``steps`` steps of :meth:`step` (a subclass's own, if it has one), warm-starting
        each solve from the previous one: :func:`diffsim_ros.sim.contact.step.rollout` of this
        world (torques (..., T, n), wrenches (..., T, J, 6)); returns ``(states, infos)`` with a
        time dimension before the per-object one (position (..., T, J, 3)).
        """
        return stepping.rollout(self, state, steps, tau, wrench, check_start, penetration_tolerance, step_fn=type(self).step)


def _object_tensors(objects, tensor):
    """Unit inertias (K, 3) [m²] and the parameter tensors (mass, friction, restitution) of the objects."""
    like = tensor([])
    unit = torch.stack([
        (tensor(o.inertia) / o.mass) if o.inertia is not None else unit_inertia(o.shape, like.dtype, like.device)
        for o in objects
    ]) if objects else torch.zeros(0, 3, dtype=like.dtype, device=like.device)
    params = {name: tensor([getattr(o, name) for o in objects]) for name in ("mass", "friction", "restitution")}
    return unit, params


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
            overrides[(kind, frozenset(key))] = checked_number(f"pair_{kind}[{key}]", value, 0.0, high)
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
