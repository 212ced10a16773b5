"""Jacobians of batched maps through the differentiable simulator, in one reverse pass."""

import torch

__all__ = ["rowwise_jacobian"]


def rowwise_jacobian(fn, x, rows):
    """Value and Jacobian of a batched map with one reverse pass (batch copies, one per output row).

    Args:
        fn: Maps (..., d) -> (..., rows), batched elementwise over leading dimensions.
        x: Input, shape (..., d).
        rows: Output size.

    Returns:
        ``(value (..., rows), jacobian (..., rows, d))``, both detached.
    """
    copies = x.detach().unsqueeze(-2).expand(*x.shape[:-1], rows, x.shape[-1]).clone().requires_grad_(True)
    with torch.enable_grad():
        y = fn(copies)  # (..., rows, rows): copy r's row r is differentiated
        (grad,) = torch.autograd.grad(torch.diagonal(y, dim1=-2, dim2=-1).sum(), copies)
    return y[..., 0, :].detach(), grad
