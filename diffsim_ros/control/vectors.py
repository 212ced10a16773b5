"""Joint vectors for the control layer: per-joint settings and checked float64 arrays."""

from collections.abc import Mapping, Sequence

import numpy as np

from diffsim_ros.control.errors import ControlError

__all__ = ["PerJoint", "per_joint", "to_numpy"]

PerJoint = float | Sequence[float] | Mapping[str, float]
"""A per-joint setting: one value for all joints, one per joint in model order, or a mapping
``joint name -> value`` (joints not named keep the setting's default); see :func:`per_joint`."""


def to_numpy(x):
    """A tensor or array-like as a float64 numpy array (detached, on the CPU)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)



def per_joint(value, joint_names, what, default):
    """A per-joint float64 vector from a scalar, a sequence or a ``name -> value`` mapping.

    Args:
        value: None (all ``default``), scalar, sequence of len(joint_names), or mapping.
        joint_names: Joint order.
        what: Name used in error messages.
        default: Value for joints a mapping does not name.

    Returns:
        np.ndarray, shape (n,).

    Raises:
        ControlError: Unknown joint names, wrong length, or non-numeric entries.
    """
    n = len(joint_names)
    if value is None:
        return np.full(n, float(default))
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(joint_names))
        if unknown:
            raise ControlError(f"{what}: unknown joints {unknown}; joints are {list(joint_names)}")
        return np.array([float(value.get(name, default)) for name in joint_names])
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ControlError(f"{what} must be a number, a list of {n} numbers or a joint mapping, got {value!r}") from None
    if array.ndim == 0:
        return np.full(n, float(array))
    if array.shape != (n,):
        raise ControlError(f"{what} must have {n} entries (joints {list(joint_names)}), got shape {array.shape}")
    return array.copy()
