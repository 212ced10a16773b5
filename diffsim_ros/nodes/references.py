"""The controller node's waypoint parameter: a flat list of joint values as a (k, n) array.

The reference built from it is :func:`diffsim_ros.control.references.make_reference`.
"""

import numpy as np

from diffsim_ros.runtime.params import ParameterError

__all__ = ["waypoint_array"]


def waypoint_array(flat, n, where="reference.waypoints"):
    """Waypoints from a flat parameter list, shape (k, n) (k = 0 for an empty list).

    Raises:
        ParameterError: Length not a multiple of n, or non-finite values.
    """
    flat = np.asarray(flat, dtype=np.float64).reshape(-1)
    if flat.size % n:
        raise ParameterError(f"{where}: {flat.size} values is not a multiple of the {n} joints")
    if not np.all(np.isfinite(flat)):
        raise ParameterError(f"{where}: waypoints must be finite")
    return flat.reshape(-1, n)
