"""ROS-style node parameters: params YAML files and typed, declared-once node configs.

A node's parameters are a frozen dataclass; :func:`declare_config` declares each field on
the node handle (default, type, description) and returns the filled-in config, so the same
node code gets its parameters from ``--ros-args --params-file`` on rclpy and from
:func:`load_parameter_files` / explicit overrides on the embedded runtime::

    @dataclass(frozen=True)
    class ControllerConfig:
        rate_hz: float = param(200.0, "command rate [Hz]")
        joints: list[str] = param([], "joints commanded, in controller order")
        kp: list[float] = param([], "stiffness [N·m/rad]", name="gains.kp")

    config = declare_config(handle, ControllerConfig)

Library settings are not copied into node configs: :func:`group` makes a library config
dataclass (``MPCSettings``, ``SafetyConfig``, ``OnlineEstimatorConfig``) a field whose members
are declared as parameters ``<prefix>.<member>``, with the library's defaults and the
descriptions of its docstring, and arrive in the node as an instance of that class::

    mpc: MPCSettings = group(MPCSettings, "mpc")

Every numeric value is checked where it enters, at start-up and on every run-time change
(``ros2 param set``): a float parameter (or list element) must be finite (no NaN, no ±inf:
no parameter means "unlimited" by inf); a per-joint list (:func:`param` ``per_joint``, or a
group member converted by :func:`per_joint_value`) has one value or one per joint
(:func:`check_joint_lengths`); ranges are checked by the config's ``validate()`` (node
configs, with :func:`check_ranges`) and by the library configs' own validation (their
``__post_init__`` or ``validate()``), so each rule lives once.

Parameter files use the ROS 2 layout: top-level keys are node names (``controller``,
``/ns/controller``, wildcards ``/**`` and ``/**/controller``), each with a
``ros__parameters`` mapping whose nested mappings flatten to dotted names.
"""

import dataclasses
import functools
import math
import re
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

from diffsim_ros.resources import describe_path

__all__ = [
    "ParameterError",
    "ParameterSpec",
    "check_joint_lengths",
    "check_ranges",
    "coerce_parameter",
    "config_values",
    "declare_config",
    "group",
    "per_joint_value",
    "load_parameter_files",
    "node_fqn",
    "param",
    "parameter_specs",
    "parameters_for_node",
    "refuse_run_time_changes",
    "updated_config",
]

_SCALARS = (bool, int, float, str)
_PARAMS_KEY = "ros__parameters"


class ParameterError(ValueError):
    """A parameter file or value is invalid; the message names the node, parameter and file."""


def param(default, description="", *, name=None, per_joint=False):
    """A config dataclass field declared as a ROS parameter.

    Args:
        default: Default value (lists are copied per instance).
        description: Shown by ``ros2 param describe``; include the unit.
        name: Parameter name when it differs from the field name (e.g. dotted ``gains.kp``).
        per_joint: A list of one value for every joint or one per joint (model order),
            checked by :func:`check_joint_lengths` (empty only when the default is empty).
    """
    metadata = {"description": description, "name": name, "per_joint": per_joint}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def per_joint_value(values):
    """A per-joint list parameter as the control layer takes it: one value -> scalar, none -> None."""
    values = list(values)
    return values[0] if len(values) == 1 else (values or None)


def _ros_value(value):
    """A library default as a ROS parameter value: None -> [], tuple -> list, others as they are."""
    if value is None:
        return []
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class _Group:
    config_cls: type
    prefix: str
    exclude: tuple
    kinds: dict
    convert: dict


def group(config_cls, prefix="", *, exclude=(), kinds=None, convert=None):
    """A node config field holding a library config dataclass whose fields are node parameters.

    Args:
        config_cls: Library config dataclass (its defaults and docstring ``Attributes:``
            descriptions are used).
        prefix: Parameter name prefix (``"mpc"`` -> ``mpc.horizon``; ``""``: the field names).
        exclude: Members that are not parameters (set by the node, e.g. from other parameters).
        kinds: Member -> parameter type where the annotation does not say (e.g. ``list[float]``
            for per-joint values typed ``PerJoint``, ``list[str]`` for a ``tuple``).
        convert: Member -> ``f(parameter value) -> library value`` (default: tuples for tuple
            defaults, else unchanged), e.g. :func:`per_joint_value`, which also makes the
            member a per-joint list (:func:`check_joint_lengths`).

    The library config validates its own values when it is built (``__post_init__``) or in a
    ``validate()`` method, which the node's config building calls.
    """
    spec = _Group(config_cls, prefix, tuple(exclude), dict(kinds or {}), dict(convert or {}))
    return dataclasses.field(default_factory=config_cls, metadata={"group": spec})


@dataclass(frozen=True)
class ParameterSpec:
    """One declared parameter: name, default, Python type and description.

    Attributes:
        field: Dataclass field name (of the node config; for group members the group field).
        name: ROS parameter name.
        kind: ``bool``, ``int``, ``float``, ``str``, or ``list``/``tuple`` of one of them.
        element: Element type of list parameters, else None.
        default: Default value (already coerced).
        description: Human description.
        member: Member of the group's library config, None for plain fields.
        to_config: ``f(parameter value) -> library value`` of group members.
        per_joint: One value for every joint or one per joint (:func:`check_joint_lengths`).
    """

    field: str
    name: str
    kind: type
    element: type | None
    default: object
    description: str = ""
    member: str | None = None
    to_config: object = None
    per_joint: bool = False


def _kind_of(annotation, where):
    origin = typing.get_origin(annotation)
    if annotation in _SCALARS:
        return annotation, None
    if origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if len(set(args)) == 1 and args[0] in _SCALARS:
            return origin, args[0]
    raise ParameterError(f"{where}: unsupported parameter type {annotation!r}; use bool, int, float, str or a list of one")


_ATTRIBUTE = re.compile(r"^(?P<indent>\s+)(?P<name>\w+): (?P<text>.*)$")


def attribute_descriptions(cls):
    """Member -> description from a Google-style ``Attributes:`` docstring section (one line each)."""
    lines = (cls.__doc__ or "").splitlines()
    out, current, indent = {}, None, None
    inside = False
    for line in lines:
        if line.strip() == "Attributes:":
            inside = True
            continue
        if not inside or not line.strip():
            continue
        match = _ATTRIBUTE.match(line)
        if match and (indent is None or len(match["indent"]) == indent):
            indent, current = len(match["indent"]), match["name"]
            out[current] = match["text"].strip()
        elif current is not None and len(line) - len(line.lstrip()) > (indent or 0):
            out[current] += " " + line.strip()
        else:
            break
    return out


def _group_specs(f, spec):
    """Parameter specs of the members of a :func:`group` field."""
    cls = spec.config_cls
    hints, descriptions = typing.get_type_hints(cls), attribute_descriptions(cls)
    specs = []
    for member in dataclasses.fields(cls):
        if member.name in spec.exclude or not member.init:
            continue
        where = f"{cls.__name__}.{member.name}"
        if member.default is dataclasses.MISSING and member.default_factory is dataclasses.MISSING:
            raise ParameterError(f"{where}: a node parameter needs a default")
        default = member.default if member.default is not dataclasses.MISSING else member.default_factory()
        kind, element = _kind_of(spec.kinds.get(member.name, hints[member.name]), where)
        convert = spec.convert.get(member.name) or (tuple if isinstance(default, tuple) else None)
        name = f"{spec.prefix}.{member.name}" if spec.prefix else member.name
        item = ParameterSpec(f.name, name, kind, element, None, descriptions.get(member.name, ""), member.name, convert,
                             per_joint=convert is per_joint_value)
        value = _ros_value(default)
        if element is not None and not isinstance(value, list):
            value = [value]  # a scalar per-joint default: one value for every joint
        specs.append(dataclasses.replace(item, default=coerce_parameter(item, value, where)))
    return specs


def parameter_specs(config_cls):
    """The parameters of a config dataclass, in field order (group members in their class's order).

    Raises:
        ParameterError: A field without a default or of an unsupported type.
    """
    return list(_specs_of(config_cls))


@functools.cache
def _specs_of(config_cls):
    """:func:`parameter_specs` as a tuple, once per class (every run-time change reads them)."""
    if not dataclasses.is_dataclass(config_cls):
        raise ParameterError(f"{config_cls!r} is not a dataclass")
    hints = typing.get_type_hints(config_cls)
    specs = []
    for f in dataclasses.fields(config_cls):
        if "group" in f.metadata:
            specs.extend(_group_specs(f, f.metadata["group"]))
            continue
        where = f"{config_cls.__name__}.{f.name}"
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ParameterError(f"{where}: a node parameter needs a default")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind, element = _kind_of(hints[f.name], where)
        spec = ParameterSpec(f.name, f.metadata.get("name") or f.name, kind, element, None, f.metadata.get("description", ""),
                             per_joint=f.metadata.get("per_joint", False))
        specs.append(dataclasses.replace(spec, default=coerce_parameter(spec, default, where)))
    names = [spec.name for spec in specs]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:
        raise ParameterError(f"{config_cls.__name__}: parameter(s) {clashes} declared twice")
    return tuple(specs)


def _coerce_scalar(kind, value, where):
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        # YAML writes 8000 for 8000.0; ROS would reject it as an integer. NaN and inf are
        # refused for every float: `np.any(k < 0)` and the like are False for NaN.
        if not math.isfinite(value):
            raise ParameterError(f"{where}: must be a finite number, got {value!r}")
        return float(value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise ParameterError(f"{where}: expected {kind.__name__}, got {type(value).__name__} {value!r}")


def coerce_parameter(spec, value, where=None):
    """``value`` converted to the spec's type (int -> float allowed), or ParameterError naming ``where``."""
    where = where or f"parameter '{spec.name}'"
    if spec.element is None:
        return _coerce_scalar(spec.kind, value, where)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ParameterError(f"{where}: expected a list of {spec.element.__name__}, got {value!r}")
    items = [_coerce_scalar(spec.element, item, f"{where}[{i}]") for i, item in enumerate(value)]
    return spec.kind(items)


def declare_config(handle, config_cls):
    """Declare every field of ``config_cls`` on ``handle`` and build the typed config.

    Args:
        handle: Node handle (``declare_parameter(name, default, description)`` returns the
            override or the default).
        config_cls: Frozen dataclass of :func:`param` fields. An optional ``validate()`` method
            raising ValueError checks cross-field constraints.

    Returns:
        An instance of ``config_cls``.

    Raises:
        ParameterError: A value of the wrong type, or ``validate()`` failed (node named).
    """
    raw = {}
    for spec in parameter_specs(config_cls):
        default = list(spec.default) if spec.element is not None else spec.default
        raw[spec.name] = handle.declare_parameter(spec.name, default, spec.description)
    return _build_config(config_cls, raw, f"node '{handle.name}'")


def _build_config(config_cls, raw, who):
    """``config_cls`` from parameter name -> value (every parameter present), validated."""
    values, members = {}, {}
    for spec in parameter_specs(config_cls):
        value = coerce_parameter(spec, raw[spec.name], f"{who}: parameter '{spec.name}'")
        if spec.member is None:
            values[spec.field] = value
        else:
            members.setdefault(spec.field, {})[spec.member] = spec.to_config(value) if spec.to_config else value
    for field_name, kwargs in members.items():
        values[field_name] = _library_config(_group_of(config_cls, field_name), kwargs, who)
    try:
        config = config_cls(**values)
        if hasattr(config, "validate"):
            config.validate()
    except ValueError as err:
        raise ParameterError(f"{who}: invalid parameters: {err}") from None
    return config


def _library_config(spec, kwargs, who):
    """A group's library config, built and validated (the error names the group's parameters)."""
    try:
        config = spec.config_cls(**kwargs)
        if hasattr(config, "validate"):
            config.validate()
    except ValueError as err:
        members = f"'{spec.prefix}.*' parameters" if spec.prefix else "parameters"
        raise ParameterError(f"{who}: invalid {members}: {err}") from None
    return config


def _group_of(config_cls, field_name):
    return next(f.metadata["group"] for f in dataclasses.fields(config_cls) if f.name == field_name)


def config_values(config):
    """Parameter name -> value of a config built by :func:`declare_config` (group members as parameters)."""
    out = {}
    for spec in parameter_specs(type(config)):
        value = getattr(config, spec.field)
        if spec.member is not None:
            value = _ros_value(getattr(value, spec.member))
            value = [value] if spec.element is not None and not isinstance(value, list) else value
        out[spec.name] = list(value) if spec.element is not None else value
    return out


def updated_config(config, changes, who="node", joint_count=None):
    """``config`` with parameter changes (name -> value) applied and validated.

    Args:
        config: A config built by :func:`declare_config`.
        changes: Parameter name -> new value.
        who: Named in errors (e.g. ``node 'controller'``).
        joint_count: The node's joint count: per-joint lists are checked against it.

    Raises:
        ParameterError: An unknown parameter, a value of the wrong type, NaN or inf, a
            per-joint list of the wrong length, or invalid parameters.
    """
    values = config_values(config)
    unknown = sorted(set(changes) - set(values))
    if unknown:
        raise ParameterError(f"{who}: unknown parameter(s) {unknown}")
    values.update(changes)
    updated = _build_config(type(config), values, who)
    if joint_count is not None:
        check_joint_lengths(updated, joint_count, who)
    return updated


def check_joint_lengths(config, joint_count, who="node"):
    """Check that every per-joint list parameter of ``config`` has 1 or ``joint_count`` values.

    An empty list (the library's None: e.g. URDF limits only) is accepted only where the
    default is empty: an empty stiffness or torque-rate limit would silently mean 0 or none.

    Raises:
        ParameterError: Naming the parameter, its length and the joint count.
    """
    values = config_values(config)
    for spec in parameter_specs(type(config)):
        count = len(values[spec.name]) if spec.per_joint else None
        if spec.per_joint and count not in {1, joint_count} | (set() if spec.default else {0}):
            empty = ", or none" if not spec.default else ""
            raise ParameterError(f"{who}: parameter '{spec.name}' has {count} values for {joint_count} joints: give one "
                                 f"(every joint) or {joint_count} (model order){empty}")


def check_ranges(config, positive=(), non_negative=()):
    """Range checks of a node config's ``validate()``: each field's value (every element of a
    list) must be > 0 (``positive``) or >= 0 (``non_negative``).

    Raises:
        ValueError: Naming the first parameter out of range (its ROS name) and its value.
    """
    names = {f.name: f.metadata.get("name") or f.name for f in dataclasses.fields(config)}
    for fields, test, what in ((positive, lambda v: v > 0, "> 0"), (non_negative, lambda v: v >= 0, ">= 0")):
        for field_name in fields:
            value = getattr(config, field_name)
            items = value if isinstance(value, (list, tuple)) else [value]
            if not all(test(v) for v in items):
                raise ValueError(f"parameter '{names[field_name]}' must be {what}, got {value!r}")


def refuse_run_time_changes(handle, config):
    """Answer every run-time change of ``config``'s parameters with why not (nodes that read
    their parameters only at start-up): an invalid value is named as such, a valid one needs a
    restart. Other parameters (``use_sim_time``) are left to the runtime."""
    who, names = f"node '{handle.name}'", set(config_values(config))

    def check(changes):
        ours = {name: value for name, value in changes.items() if name in names}
        if not ours:
            return None
        try:
            updated_config(config, ours, who)
        except ParameterError as err:
            return str(err)
        return f"{who}: {sorted(ours)} are read at start-up only: restart the node with the new value(s)"

    handle.add_on_set_parameters_callback(check)


# --- parameter files ------------------------------------------------------------------------


def node_fqn(name, namespace="/"):
    """Fully qualified node name, e.g. ``/robot/estimator``."""
    namespace = "/" + namespace.strip("/") if namespace.strip("/") else ""
    return f"{namespace}/{name}"


def _pattern(key):
    tokens = [token for token in key.split("/") if token]
    parts = []
    for token in tokens:
        if token == "**":
            parts.append("(?:/[^/]+)*")
        else:
            parts.append("/" + re.escape(token).replace(r"\*", "[^/]*"))
    return re.compile("".join(parts) + r"\Z")


def _flatten(mapping, prefix, out, where):
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, f"{name}.", out, where)
        elif value is None:
            raise ParameterError(f"{where}: parameter '{name}' has no value")
        else:
            out[name] = value


def _node_sections(document, path, where):
    """(node-name pattern, flat parameters) of every ``ros__parameters`` block, in file order."""
    sections = []
    for key, value in document.items():
        if key == _PARAMS_KEY and value is None:
            value = {}
        if not isinstance(value, dict):
            raise ParameterError(f"{where}: '{'/'.join(path + [str(key)])}' must map to ros__parameters")
        if key == _PARAMS_KEY:
            flat = {}
            _flatten(value, "", flat, where)
            sections.append(("/".join(path) or "/**", flat))
        else:
            sections.extend(_node_sections(value, path + [str(key)], where))
    return sections


def parameters_for_node(document, node_name, namespace="/", source="parameters"):
    """Parameters of one node from a parsed params YAML document.

    Args:
        document: The YAML mapping.
        node_name: Node name.
        namespace: Node namespace.
        source: Name for error messages (the file).

    Returns:
        dict parameter name -> value, later matching sections overriding earlier ones.
    """
    if not isinstance(document, dict):
        raise ParameterError(f"{source}: expected a mapping of node names to ros__parameters")
    fqn = node_fqn(node_name, namespace)
    out = {}
    for key, values in _node_sections(document, [], source):
        if _pattern(key).match(fqn):
            out.update(values)
    return out


def load_parameter_files(paths, node_name, namespace="/"):
    """Parameters of one node from ROS 2 params YAML files (later files override earlier ones).

    Raises:
        ParameterError: Missing file, invalid YAML, or a malformed layout (file named).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ParameterError(f"parameter file not found: {describe_path(path)}")
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ParameterError(f"invalid YAML in {path}: {err}") from None
        out.update(parameters_for_node(document, node_name, namespace, str(path)))
    return out
