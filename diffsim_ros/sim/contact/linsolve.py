"""Least-squares solves of batched, possibly singular square systems.

Contact systems are routinely rank deficient: four coplanar corners of a box resting on a
plane give four normal rows for three independent directions. Both solvers then pick the
minimum-norm impulse (which splits tied contacts equally) and their gradients use the same
pseudo-inverse (Nimble's least-squares treatment of a rank-deficient A_CC). Both return their
impulses through :class:`SolvedImpulse`, whose subclasses give the implicit gradients.
"""

import torch

from diffsim_ros.dynamics.spatial import matvec

__all__ = ["pinv", "scaled_pinv", "pinv_solve", "refined_solve", "contact_tolerances", "SolvedImpulse"]


def _rtol(dtype):
    # Singular values below sqrt(eps) * sigma_max are rank deficiency, not physics.
    return torch.finfo(dtype).eps ** 0.5


def pinv(mat):
    """Moore-Penrose pseudo-inverse with a relative cutoff of sqrt(eps), shape (..., m, m)."""
    return torch.linalg.pinv(mat, rtol=_rtol(mat.dtype))


def scaled_pinv(mat):
    """Generalized inverse ``D_c (D_r mat D_c)⁺ D_r`` of a row- and column-equilibrated matrix.

    KKT matrices mix impulse [N·s] and multiplier [m/(N·s²)] unknowns whose columns differ by
    many orders of magnitude; without equilibration the sqrt(eps) cutoff of :func:`pinv`
    would discard meaningful directions. Shape (..., m, m).
    """
    eps = torch.finfo(mat.dtype).eps

    def inverse_norms(norms):
        # Empty rows/columns keep scale 1: 1/0 would turn their zeros into inf * 0 = NaN.
        usable = norms > eps * norms.amax(-1, keepdim=True).clamp_min(torch.finfo(mat.dtype).tiny)
        return torch.where(usable, norms, torch.ones_like(norms)).reciprocal()

    row = inverse_norms(torch.linalg.vector_norm(mat, dim=-1))
    scaled = mat * row[..., :, None]
    col = inverse_norms(torch.linalg.vector_norm(scaled, dim=-2))
    return col[..., :, None] * pinv(scaled * col[..., None, :]) * row[..., None, :]


def pinv_solve(mat, rhs):
    """Minimum-norm least-squares solution of ``mat @ x = rhs``; (..., m, m), (..., m) -> (..., m)."""
    return matvec(pinv(mat), rhs)


def refined_solve(mat, rhs, inverse=None, iterations=2):
    """Least-squares solve with iterative refinement (Le Lidec et al.'s treatment of singular KKT systems).

    ``x <- x + mat⁺ (rhs - mat x)`` recovers the digits a truncated pseudo-inverse loses on
    ill-conditioned (nearly singular) systems while staying on the minimum-norm solution for
    exactly singular, consistent ones.

    Args:
        mat: Matrices, shape (..., m, m).
        rhs: Right-hand sides, shape (..., m).
        inverse: Precomputed generalized inverse to reuse (default :func:`scaled_pinv`), shape (..., m, m).
        iterations: Refinement steps after the first solve.

    Returns:
        Solutions, shape (..., m).
    """
    inverse = scaled_pinv(mat) if inverse is None else inverse
    x = matvec(inverse, rhs)
    for _ in range(iterations):
        x = x + matvec(inverse, rhs - matvec(mat, x))
    return x


def contact_tolerances(A, b, x, rel=None):
    """Absolute tolerances of a contact problem ``w = A x + b``, relative to its own scales.

    Args:
        A: Delassus matrices, shape (B, m, m).
        b: Free contact velocities [m/s], shape (B, m).
        x: Impulses [N·s], shape (B, m).
        rel: Relative tolerance; default sqrt(eps) of the dtype.

    Returns:
        ``(tol_w, tol_x)``: velocity [m/s] and impulse [N·s] tolerances, each shape (B, 1).
    """
    rel = torch.finfo(b.dtype).eps ** 0.5 if rel is None else rel
    tiny = torch.finfo(b.dtype).tiny
    diag = A.diagonal(dim1=-2, dim2=-1).amax(-1, keepdim=True).clamp_min(tiny)
    velocity = torch.maximum(b.abs().amax(-1, keepdim=True), matvec(A, x).abs().amax(-1, keepdim=True))
    impulse = torch.maximum(x.abs().amax(-1, keepdim=True), velocity / diag)
    return rel * velocity.clamp_min(tiny), rel * impulse.clamp_min(tiny)


class SolvedImpulse(torch.autograd.Function):
    """Identity on contact impulses solved outside autograd; a subclass gives their gradients.

    Inputs ``(A, b, mu, x, *solver_data)``: Delassus matrices, shape (B, m, m), free contact
    velocities [m/s], shape (B, m), friction coefficients, shape (B, K), the solved impulses
    [N·s], shape (B, m), and what the subclass's ``backward`` and ``jvp`` need. Every tensor
    input is saved for both, in input order; a non-tensor input is the subclass's to keep (its
    own ``setup_context``). The output is ``x``, shape (B, m).
    """

    generate_vmap_rule = True  # batched backward (Jacobians by vmap over output directions)

    @staticmethod
    def forward(A, b, mu, x, *solver_data):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        tensors = [value for value in inputs if isinstance(value, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.save_for_forward(*tensors)

    @staticmethod
    def tangents(A, b, mu, dA, db, dmu):
        """``(dA, db, dmu)`` of a ``jvp``, zeros where an input has no tangent (None)."""
        return tuple(torch.zeros_like(value) if d is None else d for value, d in ((A, dA), (b, db), (mu, dmu)))
