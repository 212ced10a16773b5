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

Parameter files use the ROS 2 layout: top-level keys are node names (``controller``,
``/ns/controller``, wildcards ``/**`` and ``/**/controller``), each with a
``ros__parameters`` mapping whose nested mappings flatten to dotted names.
"""

import dataclasses
import re
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = [
    "ParameterError",
    "ParameterSpec",
    "coerce_parameter",
    "declare_config",
    "load_parameter_files",
    "node_fqn",
    "param",
    "parameter_specs",
    "parameters_for_node",
]

_SCALARS = (bool, int, float, str)
_PARAMS_KEY = "ros__parameters"


class ParameterError(ValueError):
    """A parameter file or value is invalid; the message names the node, parameter and file."""


def param(default, description="", *, name=None):
    """A config dataclass field declared as a ROS parameter.

    Args:
        default: Default value (lists are copied per instance).
        description: Shown by ``ros2 param describe``; include the unit.
        name: Parameter name when it differs from the field name (e.g. dotted ``gains.kp``).
    """
    metadata = {"description": description, "name": name}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ParameterSpec:
    """One declared parameter: name, default, Python type and description.

    Attributes:
        field: Dataclass field name.
        name: ROS parameter name.
        kind: ``bool``, ``int``, ``float``, ``str``, or ``list``/``tuple`` of one of them.
        element: Element type of list parameters, else None.
        default: Default value (already coerced).
        description: Human description.
    """

    field: str
    name: str
    kind: type
    element: type | None
    default: object
    description: str = ""


def _kind_of(annotation, where):
    origin = typing.get_origin(annotation)
    if annotation in _SCALARS:
        return annotation, None
    if origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        if len(set(args)) == 1 and args[0] in _SCALARS:
            return origin, args[0]
    raise ParameterError(f"{where}: unsupported parameter type {annotation!r}; use bool, int, float, str or a list of one")


def parameter_specs(config_cls):
    """The parameters of a config dataclass, in field order.

    Raises:
        ParameterError: A field without a default or of an unsupported type.
    """
    if not dataclasses.is_dataclass(config_cls):
        raise ParameterError(f"{config_cls!r} is not a dataclass")
    hints = typing.get_type_hints(config_cls)
    specs = []
    for f in dataclasses.fields(config_cls):
        where = f"{config_cls.__name__}.{f.name}"
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ParameterError(f"{where}: a node parameter needs a default")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kind, element = _kind_of(hints[f.name], where)
        spec = ParameterSpec(f.name, f.metadata.get("name") or f.name, kind, element, None, f.metadata.get("description", ""))
        specs.append(dataclasses.replace(spec, default=coerce_parameter(spec, default, where)))
    return specs


def _coerce_scalar(kind, value, where):
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)  # YAML writes 8000 for 8000.0; ROS would reject it as an integer
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
    values = {}
    for spec in parameter_specs(config_cls):
        default = list(spec.default) if spec.element is not None else spec.default
        raw = handle.declare_parameter(spec.name, default, spec.description)
        values[spec.field] = coerce_parameter(spec, raw, f"node '{handle.name}': parameter '{spec.name}'")
    config = config_cls(**values)
    if hasattr(config, "validate"):
        try:
            config.validate()
        except ValueError as err:
            raise ParameterError(f"node '{handle.name}': invalid parameters: {err}") from None
    return config


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
            raise ParameterError(f"parameter file not found: {path}")
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ParameterError(f"invalid YAML in {path}: {err}") from None
        out.update(parameters_for_node(document, node_name, namespace, str(path)))
    return out
