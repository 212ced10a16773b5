"""Scene files (``scene.yaml``) for object estimation: what the camera sees and what is known.

Format::

    model: {dt: 0.005, solver: cone}      # optional (defaults shown)
    static:                               # optional; default one ground plane z = 0 "ground"
      - name: ground
        plane: {}                         # the plane z = 0 of its frame
        position: [0, 0, 0]               # optional, [m]
        orientation: [1, 0, 0, 0]         # optional, quaternion (w, x, y, z)
    objects:
      - name: box
        box: [0.12, 0.08, 0.05]           # full side lengths [m]; or sphere: r, capsule: [r, length]
        mass: unknown                     # [kg], or unknown
        topic: /camera/box_pose           # geometry_msgs/msg/PoseStamped in the camera frame
      - name: target
        box: [0.1, 0.1, 0.1]
        mass: 0.6
        topic: /camera/target_pose
    pairs:                                # every pair that can touch, both coefficients
      - {between: [box, ground], friction: unknown, restitution: 0.0}
      - {between: [target, ground], friction: 0.3, restitution: 0.0}
      - {between: [box, target], friction: 0.2, restitution: unknown}
    initial_guess: {box.mass: 0.8}        # optional starting values of unknowns
    window: {start: 0.0, end: 1.5}        # optional, [s] from the first pose

Every coefficient belongs to a pair (a box's friction on the table and on another box are
different numbers), and every pair that can touch lists both, as a number or ``unknown``.
Unknowns carry no value: the parameters they name (``box.mass``, ``box/ground.friction``,
``box/target.restitution``) are what the estimation determines, or reports as undetermined.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from diffsim_ros.resources import describe_path
from diffsim_ros.sim.contact import Box, Capsule, ContactError, ContactWorld, Plane, RigidObject, Sphere, StaticShape
from diffsim_ros.sim.contact.options import SOLVERS

__all__ = ["ObjectScene", "SceneError", "UNKNOWN", "load_scene", "parse_scene"]

UNKNOWN = "unknown"
# [s] Model step of object estimation. Measured on issue 19's MuJoCo collisions over 8 camera-noise
# seeds (benchmarks/RESULTS.md, "Model step over camera-noise seeds"): at 10 ms the fitted mass spreads
# by 10-13 % (sd), at 5 ms by 2-7 %, at 2 ms no better than 5 ms with a larger friction bias on one
# scene; slides fit the same at 5 and 10 ms, and a 5 ms fit costs no more CPU than a 10 ms one.
DEFAULT_DT = 0.005
# Values of unknowns inside the world before the estimation sets them (never reported):
# the middle of the documented starting ranges.
PLACEHOLDER = {"mass": 1.0, "friction": 0.3, "restitution": 0.5}
TOP_KEYS = {"model", "static", "objects", "pairs", "initial_guess", "window"}
OBJECT_KEYS = {"name", "box", "sphere", "capsule", "mass", "topic", "inertia"}
STATIC_KEYS = {"name", "box", "sphere", "capsule", "plane", "position", "orientation"}
PAIR_KEYS = {"between", "friction", "restitution"}


class SceneError(ValueError):
    """A scene file is missing, malformed or inconsistent; the message names the entry."""


@dataclass(frozen=True)
class ObjectScene:
    """A parsed scene.

    Attributes:
        objects: RigidObject tuple (unknown masses hold a placeholder, see ``unknowns``).
        static: StaticShape tuple.
        topics: Object name -> PoseStamped topic.
        known: Parameter name -> value, for every given mass and pair coefficient.
        unknowns: Parameter names marked ``unknown``, in file order.
        initial_guess: Parameter name -> starting value (a subset of ``unknowns``).
        pairs: ``(a, b)`` name pairs in file order.
        dt: Model time step [s].
        solver: "cone" or "lcp".
        window: ``(start, end)`` [s] from the first pose (``end`` may be inf).
        path: The file, for messages.
    """

    objects: tuple
    static: tuple
    topics: dict
    known: dict
    unknowns: tuple
    initial_guess: dict = field(default_factory=dict)
    pairs: tuple = ()
    dt: float = DEFAULT_DT
    solver: str = "cone"
    window: tuple = (0.0, math.inf)
    path: str = ""

    def world(self, values=None):
        """The ContactWorld with every pair coefficient set per pair.

        Args:
            values: Optional parameter name -> value overriding known values and guesses.
        """
        settings = {**self.known, **self.initial_guess, **dict(values or {})}
        friction, restitution = {}, {}
        for a, b in self.pairs:
            prefix = f"{a}/{b}"
            friction[(a, b)] = settings.get(f"{prefix}.friction", PLACEHOLDER["friction"])
            restitution[(a, b)] = settings.get(f"{prefix}.restitution", PLACEHOLDER["restitution"])
        world = ContactWorld.create(list(self.objects), static=list(self.static), dt=self.dt, solver=self.solver,
                                    pair_friction=friction, pair_restitution=restitution)
        masses = {f"{o.name}.mass": settings[f"{o.name}.mass"] for o in self.objects if f"{o.name}.mass" in settings}
        return world.with_parameters(masses)


def _where(path, entry):
    return f"{path}: {entry}"


def _number(value, where, low=-math.inf, high=math.inf, open_low=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SceneError(f"{where}: expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value > high or (value <= low if open_low else value < low):
        raise SceneError(f"{where}: {value} is outside {'(' if open_low else '['}{low}, {high}]")
    return value


def _vector(value, size, where):
    if not isinstance(value, (list, tuple)) or len(value) != size:
        raise SceneError(f"{where}: expected a list of {size} numbers, got {value!r}")
    return tuple(_number(v, where) for v in value)


def _coefficient(value, where, low, high, open_low=False):
    """A number, or None for ``unknown``."""
    if isinstance(value, str) and value.strip().lower() == UNKNOWN:
        return None
    if value is None:
        raise SceneError(f"{where}: missing; give a number or '{UNKNOWN}'")
    return _number(value, where, low, high, open_low)


def _shape(entry, where, allow_plane=False):
    kinds = [k for k in ("box", "sphere", "capsule", "plane") if k in entry]
    if len(kinds) != 1 or (kinds[0] == "plane" and not allow_plane):
        allowed = "box, sphere, capsule" + (", plane" if allow_plane else "")
        raise SceneError(f"{where}: exactly one shape ({allowed}) is needed, got {kinds or 'none'}")
    kind, value = kinds[0], entry[kinds[0]]
    try:
        if kind == "box":
            return Box(tuple(0.5 * v for v in _vector(value, 3, f"{where}.box (full sizes [m])")))
        if kind == "sphere":
            return Sphere(_number(value, f"{where}.sphere (radius [m])", 0.0, open_low=True))
        if kind == "capsule":
            radius, length = _vector(value, 2, f"{where}.capsule ([radius, length] [m])")
            return Capsule(radius, 0.5 * length)
    except ContactError as err:
        raise SceneError(f"{where}: {err}") from None
    if value not in (None, {}):
        raise SceneError(f"{where}.plane: takes no values (the plane z = 0 of its frame); place it with position/orientation")
    return Plane()


def _check_keys(entry, allowed, where):
    if not isinstance(entry, dict):
        raise SceneError(f"{where}: expected a mapping, got {entry!r}")
    unknown = set(entry) - allowed
    if unknown:
        raise SceneError(f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")


def _name(entry, where, taken):
    name = entry.get("name")
    if not isinstance(name, str) or not name or "/" in name or "." in name:
        raise SceneError(f"{where}: 'name' must be a non-empty string without '/' or '.', got {name!r}")
    if name in taken:
        raise SceneError(f"{where}: the name '{name}' is used twice")
    taken.add(name)
    return name


def _objects(raw, path, taken):
    entries = raw.get("objects")
    if not isinstance(entries, list) or not entries:
        raise SceneError(f"{path}: 'objects' must be a non-empty list of the objects the camera tracks")
    objects, topics, known, unknowns = [], {}, {}, []
    for i, entry in enumerate(entries):
        where = _where(path, f"objects[{i}]")
        _check_keys(entry, OBJECT_KEYS, where)
        name = _name(entry, where, taken)
        where = _where(path, f"objects.{name}")
        shape = _shape(entry, where)
        mass = _coefficient(entry.get("mass"), f"{where}.mass [kg]", 0.0, math.inf, open_low=True)
        topic = entry.get("topic")
        if not isinstance(topic, str) or not topic.startswith("/"):
            raise SceneError(f"{where}.topic: the PoseStamped topic of this object, e.g. /camera/{name}_pose; got {topic!r}")
        inertia = entry.get("inertia")
        if inertia is not None:
            inertia = _vector(inertia, 3, f"{where}.inertia [kg m^2]")
            if mass is None:
                raise SceneError(f"{where}: an explicit inertia needs a known mass (it scales with the mass)")
        if mass is None:
            unknowns.append(f"{name}.mass")
        else:
            known[f"{name}.mass"] = mass
        try:
            objects.append(RigidObject(name, shape, mass=PLACEHOLDER["mass"] if mass is None else mass, inertia=inertia))
        except ContactError as err:
            raise SceneError(f"{where}: {err}") from None
        topics[name] = topic
    if len(set(topics.values())) != len(topics):
        raise SceneError(f"{path}: two objects share a topic: {topics}")
    return objects, topics, known, unknowns


def _static(raw, path, taken):
    entries = raw.get("static")
    if entries is None:
        taken.add("ground")
        return [StaticShape("ground", Plane())]
    if not isinstance(entries, list):
        raise SceneError(f"{path}: 'static' must be a list")
    shapes = []
    for i, entry in enumerate(entries):
        where = _where(path, f"static[{i}]")
        _check_keys(entry, STATIC_KEYS, where)
        name = _name(entry, where, taken)
        where = _where(path, f"static.{name}")
        shape = _shape(entry, where, allow_plane=True)
        position = _vector(entry.get("position", [0.0, 0.0, 0.0]), 3, f"{where}.position [m]")
        orientation = _vector(entry.get("orientation", [1.0, 0.0, 0.0, 0.0]), 4, f"{where}.orientation (w, x, y, z)")
        try:
            shapes.append(StaticShape(name, shape, position, orientation))
        except ContactError as err:
            raise SceneError(f"{where}: {err}") from None
    return shapes


def _pairs(raw, path, objects, static):
    """Explicit coefficients of every pair that can touch (object-object, object-static)."""
    entries = raw.get("pairs")
    if not isinstance(entries, list):
        raise SceneError(f"{path}: 'pairs' must list every pair that can touch with its friction and restitution")
    names = [o.name for o in objects] + [s.name for s in static]
    statics = {s.name for s in static}
    seen, order, known, unknowns = {}, [], {}, []
    for i, entry in enumerate(entries):
        where = _where(path, f"pairs[{i}]")
        _check_keys(entry, PAIR_KEYS, where)
        between = entry.get("between")
        if not isinstance(between, list) or len(between) != 2 or len(set(between)) != 2 or not set(between) <= set(names):
            raise SceneError(f"{where}.between: two different names from {names}, got {between!r}")
        if set(between) <= statics:
            raise SceneError(f"{where}: {between} are both static; they never move against each other")
        key = frozenset(between)
        if key in seen:
            raise SceneError(f"{where}: the pair {between} is listed twice")
        a, b = between
        seen[key] = (a, b)
        order.append((a, b))
        prefix = f"{a}/{b}"
        for kind, high in (("friction", math.inf), ("restitution", 1.0)):
            value = _coefficient(entry.get(kind), f"{_where(path, 'pairs.' + prefix)}.{kind}", 0.0, high)
            if value is None:
                unknowns.append(f"{prefix}.{kind}")
            else:
                known[f"{prefix}.{kind}"] = value
    expected = [(o.name, other) for i, o in enumerate(objects) for other in names[i + 1 :]]
    missing = [f"{a}/{b}" for a, b in expected if frozenset((a, b)) not in seen]
    if missing:
        raise SceneError(f"{path}: pairs without coefficients: {missing}; list each with friction and restitution "
                         f"(a number or '{UNKNOWN}')")
    return order, known, unknowns


def _initial_guess(raw, path, unknowns):
    guesses = raw.get("initial_guess") or {}
    if not isinstance(guesses, dict):
        raise SceneError(f"{path}: 'initial_guess' must map unknown parameter names to values")
    out = {}
    for name, value in guesses.items():
        if name not in unknowns:
            raise SceneError(f"{path}: initial_guess.{name}: not an unknown of this scene; unknowns: {list(unknowns)}")
        kind = name.rpartition(".")[2]
        high = 1.0 if kind == "restitution" else math.inf
        out[name] = _number(value, f"{path}: initial_guess.{name}", 0.0, high, open_low=kind == "mass")
    return out


def _model(raw, path):
    model = raw.get("model") or {}
    _check_keys(model, {"dt", "solver"}, _where(path, "model"))
    dt = _number(model.get("dt", DEFAULT_DT), _where(path, "model.dt [s]"), 0.0, 0.1, open_low=True)
    solver = model.get("solver", "cone")
    if solver not in SOLVERS:
        raise SceneError(f"{_where(path, 'model.solver')}: one of {SOLVERS}, got {solver!r}")
    window = raw.get("window") or {}
    _check_keys(window, {"start", "end"}, _where(path, "window"))
    start = _number(window.get("start", 0.0), _where(path, "window.start [s]"), 0.0)
    end = _number(window.get("end", math.inf), _where(path, "window.end [s]"), start, open_low=True) if "end" in window else math.inf
    return dt, solver, (start, end)


def parse_scene(raw, path="scene"):
    """An :class:`ObjectScene` from the YAML mapping of a scene file (see the module docstring).

    Raises:
        SceneError: Naming the entry: unknown keys, bad shapes or values, duplicate names,
            pairs without coefficients.
    """
    if not isinstance(raw, dict):
        raise SceneError(f"{path}: expected a mapping with 'objects' and 'pairs'")
    unknown_keys = set(raw) - TOP_KEYS
    if unknown_keys:
        raise SceneError(f"{path}: unknown keys {sorted(unknown_keys)}; allowed {sorted(TOP_KEYS)}")
    taken = set()
    objects, topics, known, unknowns = _objects(raw, path, taken)
    static = _static(raw, path, taken)
    pairs, pair_known, pair_unknowns = _pairs(raw, path, objects, static)
    unknowns = tuple(unknowns + pair_unknowns)
    dt, solver, window = _model(raw, path)
    return ObjectScene(
        objects=tuple(objects), static=tuple(static), topics=topics, known={**known, **pair_known}, unknowns=unknowns,
        initial_guess=_initial_guess(raw, path, unknowns), pairs=tuple(pairs), dt=dt, solver=solver, window=window,
        path=str(path),
    )


def load_scene(path):
    """Read a scene file.

    Raises:
        SceneError: Missing file, invalid YAML, or an invalid scene (see :func:`parse_scene`).
    """
    path = Path(path)
    if not path.is_file():
        raise SceneError(f"scene file not found: {describe_path(path)}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SceneError(f"invalid YAML in {path}: {err}") from None
    return parse_scene(raw, str(path))
