"""Input validation shared by the public dynamics functions."""

import torch

from diffsim_ros.model.errors import RobotModelError

__all__ = ["joint_tensor"]


def joint_tensor(model, name, value):
    """Validate a joint-space input and return it as a tensor of the model's dtype/device.

    Non-tensor inputs (lists, numpy arrays) are converted to the model's dtype and device.
    Tensors must already match them: silently casting would detach float32 inputs from their
    graph or move data between devices behind the user's back.

    Args:
        model: RobotModel.
        name: Argument name used in error messages ("q", "qd", ...).
        value: Joint-space values, shape (..., n).

    Returns:
        Tensor, shape (..., n).

    Raises:
        RobotModelError: Wrong dtype/device/shape, or NaN/inf entries (the joints are named).
    """
    if not isinstance(value, torch.Tensor):
        value = torch.as_tensor(value, dtype=model.dtype, device=model.device)
    elif value.dtype != model.dtype:
        raise RobotModelError(
            f"{name} has dtype {value.dtype} but the model uses {model.dtype}; "
            f"convert the input or call model.to(dtype=...)"
        )
    elif value.device != model.device:
        raise RobotModelError(f"{name} is on {value.device} but the model is on {model.device}")
    if value.ndim == 0 or value.shape[-1] != model.nq:
        raise RobotModelError(
            f"{name} must have shape (..., {model.nq}) for joints {list(model.joint_names)}, "
            f"got {tuple(value.shape)}"
        )
    if torch.compiler.is_compiling():
        # A data-dependent check would split the compiled graph; whoever compiles a
        # function checks its inputs and outputs outside it (benchmarks/bench_pbd.py).
        return value
    finite = torch.isfinite(value)
    if not bool(finite.all()):
        bad = (~finite).reshape(-1, model.nq).any(0).nonzero().flatten().tolist()
        raise RobotModelError(f"{name} contains NaN or inf for joint(s) {[model.joint_names[i] for i in bad]}")
    return value
