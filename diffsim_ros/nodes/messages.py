"""The estimator's parameter estimates as a std_msgs/Float64MultiArray (a documented layout).

Named parameters (scalars and vectors, e.g. ``payload.mass``, ``payload.com``) are
flattened to K scalar elements named ``payload.mass``, ``payload.com[0]``, ... The message
is a 2 x K row-major array, values then standard deviations::

    layout.dim[0]: label "value,stddev", size 2, stride 2K
    layout.dim[1]: label "<name 0>;<name 1>;...;<name K-1>", size K, stride K
    data: [value_0 .. value_{K-1}, stddev_0 .. stddev_{K-1}]   (stddev NaN when unknown)

so ``ros2 topic echo`` shows the names next to the numbers and any subscriber can decode it
without this package.
"""

import re

import numpy as np

from diffsim_ros.io.ros_messages import MessageConversionError, as_float_array
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY

__all__ = ["ESTIMATE_ROWS_LABEL", "estimates_from_msg", "estimates_msg", "flatten_parameters"]

ESTIMATE_ROWS_LABEL = "value,stddev"
_ELEMENT = re.compile(r"^(?P<name>[^\[\];]+)(\[(?P<index>\d+)\])?$")


def flatten_parameters(values):
    """Scalar element names and values of named parameters.

    Args:
        values: Mapping name -> scalar or array-like (any shape, flattened).

    Returns:
        ``(names, data)``: K element names and float64 values, shape (K,).
    """
    names, data = [], []
    for name, value in values.items():
        array = np.atleast_1d(as_float_array(value, name)).reshape(-1)
        if np.ndim(value) == 0:
            names.append(name)
        else:
            names.extend(f"{name}[{i}]" for i in range(array.size))
        data.extend(array.tolist())
    return names, np.array(data, dtype=np.float64)


def estimates_msg(factory, values, stddev=None):
    """std_msgs/msg/Float64MultiArray of parameter estimates (module docstring layout).

    Args:
        factory: Message factory (``new(type_name, **fields)``).
        values: Mapping name -> value (scalar or array-like).
        stddev: Mapping name -> standard deviation of the same shape (missing: NaN).
    """
    stddev = stddev or {}
    names, data = flatten_parameters(values)
    sigma = []
    for name, value in values.items():
        size = np.atleast_1d(np.asarray(value, dtype=float)).size
        s = stddev.get(name)
        sigma.extend(np.full(size, np.nan) if s is None else np.broadcast_to(as_float_array(s, name).reshape(-1), (size,)))
    k = len(names)
    dims = [
        {"label": ESTIMATE_ROWS_LABEL, "size": 2, "stride": 2 * k},
        {"label": ";".join(names), "size": k, "stride": k},
    ]
    return factory.new(FLOAT64_MULTI_ARRAY, layout={"dim": dims, "data_offset": 0}, data=np.concatenate([data, sigma]))


def estimates_from_msg(msg, where="estimates"):
    """Decode an estimates message into ``(values, stddev)`` mappings name -> float or (m,) array.

    Raises:
        MessageConversionError: Not the documented layout (wrong labels, sizes or names).
    """
    dims = list(msg.layout.dim)
    if len(dims) != 2 or dims[0].label != ESTIMATE_ROWS_LABEL or int(dims[0].size) != 2:
        raise MessageConversionError(f"{where}: expected a 2 x K array with rows '{ESTIMATE_ROWS_LABEL}'")
    names = [n for n in dims[1].label.split(";") if n] if dims[1].label else []
    data = as_float_array(msg.data, where).reshape(-1)[int(msg.layout.data_offset):]
    k = len(names)
    if int(dims[1].size) != k or data.size != 2 * k:
        raise MessageConversionError(f"{where}: {k} names, size {int(dims[1].size)} and {data.size} values disagree")
    return _group(names, data[:k], where), _group(names, data[k:], where)


def _group(names, data, where):
    """Element names and values back to named scalars and vectors (in first-seen order)."""
    grouped = {}
    for element, value in zip(names, data):
        match = _ELEMENT.match(element)
        if match is None:
            raise MessageConversionError(f"{where}: invalid element name {element!r}")
        name, index = match["name"], match["index"]
        if index is None:
            grouped[name] = float(value)
            continue
        items = grouped.setdefault(name, [])
        if not isinstance(items, list) or int(index) != len(items):
            raise MessageConversionError(f"{where}: element {element!r} out of order")
        items.append(float(value))
    return {name: (np.array(v) if isinstance(v, list) else v) for name, v in grouped.items()}
