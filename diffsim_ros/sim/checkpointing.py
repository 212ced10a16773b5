"""Gradient checkpointing of simulator blocks that keeps no autograd graph inside a block.

``torch.utils.checkpoint`` in its recommended (non-reentrant) form still records the whole
autograd graph of a block and only drops the saved tensors. For a robot arm at small batch
the graph itself (hundreds of thousands of small nodes per second of PBD simulation)
dominates the memory, so that form saves nothing. :func:`checkpoint_block` runs the block
without recording anything and recomputes it in the backward pass, with the model's
parameter tensors passed as explicit inputs so their gradients flow out through the
recomputation; it works with ``backward()`` and ``torch.autograd.grad`` alike.

Forward-mode AD (dual tensors) stores no graph, so there is nothing to checkpoint: blocks
are then run directly.
"""

import dataclasses

import torch
import torch.autograd.forward_ad as fwad
from torch.utils.checkpoint import checkpoint

__all__ = ["checkpoint_block"]


class _Recompute(torch.autograd.Function):
    """Run ``run(*tensors)`` without a graph; recompute it with one in the backward pass."""

    @staticmethod
    def forward(ctx, run, *tensors):
        ctx.run = run
        ctx.save_for_backward(*tensors)
        with torch.no_grad():
            return tuple(run(*tensors))

    @staticmethod
    def backward(ctx, *grads):
        needs = ctx.needs_input_grad[1:]
        inputs = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, needs)]
        with torch.enable_grad():
            outputs = ctx.run(*inputs)
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None and o.requires_grad]
        wanted = [x for x, need in zip(inputs, needs) if need]
        result = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True))
        return (None, *(next(result) if need else None for need in needs))


def _is_dual(tensor):
    return fwad.unpack_dual(tensor).tangent is not None


def _extra_grad_tensors(simulator):
    """Whether tensors outside ``model.params`` (gravity, a free base) require grad."""
    model = simulator.model
    values = [getattr(model, f.name) for f in dataclasses.fields(model) if f.name != "params"]
    base = getattr(simulator, "base", None)
    if base is not None and dataclasses.is_dataclass(base):
        values += [getattr(base, f.name) for f in dataclasses.fields(base)]
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


def checkpoint_block(simulator, block, *tensors):
    """Evaluate ``block(simulator, *tensors)`` as a checkpointed segment.

    Args:
        simulator: JointSpaceSimulator (its ``model.params`` tensors may require grad).
        block: Callable ``block(simulator, *tensors) -> tuple of tensors``.
        *tensors: Tensor inputs of the block (states, torques).

    Returns:
        The block's outputs; their backward pass recomputes the block. Gradients reach the
        inputs and every parameter of ``simulator.model``.
    """
    params = simulator.model.params
    names = [f.name for f in dataclasses.fields(params)]
    values = [getattr(params, name) for name in names]
    if any(_is_dual(t) for t in (*tensors, *values)):
        return block(simulator, *tensors)
    if _extra_grad_tensors(simulator):
        # Rare: differentiating gravity or a free base's inertia. Torch's checkpoint captures
        # those through the closure (graph kept, saved tensors dropped).
        return checkpoint(block, simulator, *tensors, use_reentrant=False)
    count = len(tensors)

    def run(*inputs):
        model = simulator.model.replace(params=dataclasses.replace(params, **dict(zip(names, inputs[count:]))))
        return block(simulator.with_model(model), *inputs[:count])

    return _Recompute.apply(run, *tensors, *values)
