"""Velocity-level boxed LCP for contact impulses with clamping-set gradients (Werling et al., Nimble).

Per contact i the unknowns are the impulses ``x = [x_n, x_t1, x_t2]`` [N·s] and the contact
velocities are ``w = A x + b`` [m/s] (``A`` the Delassus matrix, ``b`` the velocity without
contact impulses plus the restitution / stabilization bias on the normal row):

* normal: ``x_n >= 0``, ``w_n >= 0``, ``x_n w_n = 0`` (inelastic, no penetration);
* friction (boxed, a 4-sided pyramid circumscribing the cone): ``-mu x_n <= x_t <= mu x_n``
  with ``w_t = 0`` strictly inside, ``w_t <= 0`` at the upper and ``w_t >= 0`` at the lower bound.

Every variable is *clamped* (its velocity row is an equation), *separated* (zero), or at the
*upper* / *lower* friction bound (``x_t = ±mu x_n``). Given that classification the solution is
linear, ``x = E x_C`` with ``(A E)_CC x_C = -b_C``; Nimble's gradient differentiates this:
``dx_C = -(A E)_CC⁻¹ (d(A E)_CC x_C + db_C)`` (the sign fixed in their errata), with a
pseudo-inverse when ``A_CC`` is rank deficient. The forward solve first tries the previous
step's classification (Nimble: right >95 % of the time), then a few active-set repairs, then
projected Gauss-Seidel followed by the same active-set polish.
"""

from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.sim.contact.layout import ContactLayout, flatten_problem
from diffsim_ros.sim.contact.linsolve import SolvedImpulse, contact_tolerances, pinv, refined_solve

__all__ = ["SEPARATED", "CLAMPED", "UPPER", "LOWER", "LCPSolution", "solve_lcp", "lcp_impulse"]

SEPARATED, CLAMPED, UPPER, LOWER = 0, 1, 2, 3

# Active-set repair rounds after a wrong guess, and Gauss-Seidel sweeps of the fallback.
REPAIR_ROUNDS = 8
PGS_SWEEPS = 100


@dataclass(frozen=True)
class LCPSolution:
    """Result of :func:`solve_lcp` (leading batch shape ``...``, K contacts).

    Attributes:
        impulse: Contact impulses ``[n, t1, t2]`` per contact [N·s], shape (..., K, 3);
            differentiable with respect to the Delassus matrix, bias and friction.
        codes: Classification per variable (SEPARATED, CLAMPED, UPPER, LOWER), int8 (..., K, 3);
            pass as ``warm_codes`` to the next step.
        warm_hit: The warm-start classification was right on the first try, bool (...).
        converged: A classification satisfying every complementarity condition was found, bool (...).
        fallback: The Gauss-Seidel fallback ran, bool (...).
    """

    impulse: torch.Tensor
    codes: torch.Tensor
    warm_hit: torch.Tensor
    converged: torch.Tensor
    fallback: torch.Tensor


def _expansion(layout, codes, mu):
    """E with x = E x_hat: identity on clamped variables, ±mu on bounded friction's normal column."""
    clamped = (codes == CLAMPED).to(mu.dtype)
    sign = (codes == UPPER).to(mu.dtype) - (codes == LOWER).to(mu.dtype)
    coeff = sign * mu[:, layout.contact]
    return torch.diag_embed(clamped) + coeff[:, :, None] * layout.normal_matrix(mu.dtype)


def _reduced_system(layout, A, b, mu, codes):
    """(E, G_hat, b_hat): the clamped rows/columns of A E, identity elsewhere."""
    E = _expansion(layout, codes, mu)
    clamped = (codes == CLAMPED).to(A.dtype)
    G = (A @ E) * clamped[:, :, None] * clamped[:, None, :] + torch.diag_embed(1.0 - clamped)
    return E, G, b * clamped


def _active_set_solve(layout, A, b, mu, codes):
    """Impulses for a classification: x = E x_hat with (A E)_CC x_hat_C = -b_C (least squares)."""
    E, G, b_hat = _reduced_system(layout, A, b, mu, codes)
    inverse = pinv(G)
    x_hat = refined_solve(G, -b_hat, inverse=inverse, iterations=1)
    return matvec(E, x_hat), inverse


def _check(layout, A, b, mu, active, codes, x):
    """True where x with this classification satisfies every complementarity condition."""
    w = matvec(A, x) + b
    tol_w, tol_x = contact_tolerances(A, b, x)
    xn = x[:, layout.normal_of]
    bound = mu[:, layout.contact] * xn
    normal, act = layout.is_normal[None, :], active[:, layout.contact]
    clamped, sep = codes == CLAMPED, codes == SEPARATED
    upper, lower = codes == UPPER, codes == LOWER
    ok = torch.ones_like(clamped)
    ok &= ~(clamped & (w.abs() > tol_w))
    ok &= ~(clamped & normal & (x < -tol_x))
    ok &= ~(clamped & ~normal & (x.abs() > bound + tol_x))
    ok &= ~(sep & normal & act & (w < -tol_w))
    ok &= ~(upper & (w > tol_w))
    ok &= ~(lower & (w < -tol_w))
    ok &= ~(~normal & ~sep & (xn < -tol_x))
    # Friction is separated exactly when its normal is; normals are never at a friction bound.
    normal_sep = codes[:, layout.normal_of] == SEPARATED
    ok &= ~(~normal & (sep != normal_sep))
    ok &= ~(normal & (upper | lower))
    ok &= ~(~act & ~sep)
    return ok.all(-1) & torch.isfinite(x).all(-1)


def _with_friction_of_normals(layout, codes):
    """Friction codes consistent with their normal: separated normal -> separated friction."""
    normal_sep = codes[:, layout.normal_of] == SEPARATED
    friction = ~layout.is_normal[None, :]
    codes = torch.where(friction & normal_sep, torch.full_like(codes, SEPARATED), codes)
    newly = friction & ~normal_sep & (codes == SEPARATED)
    return torch.where(newly, torch.full_like(codes, CLAMPED), codes)


def _heuristic_codes(layout, b, active):
    """Approaching contacts clamped and sticking, the rest separated."""
    approaching = active & (b[:, layout.normal_idx] < 0)
    codes = torch.where(approaching[:, layout.contact], CLAMPED, SEPARATED).to(torch.int8)
    return codes


def _repair(layout, A, b, mu, active, codes, x):
    """One primal-dual active-set update of the classification from a (possibly violating) x.

    A clamped normal pulling (x_n < 0) while its friction sticks first lets the friction slide
    (the sticking impulse is what drags the normal negative); only a normal whose friction is
    already at its bounds separates. A newly touching contact starts sliding against its
    current tangential velocity.
    """
    w = matvec(A, x) + b
    tol_w, tol_x = contact_tolerances(A, b, x)
    bound = mu[:, layout.contact] * x[:, layout.normal_of]
    normal = layout.is_normal[None, :]
    fric = ~normal
    act = active[:, layout.contact]
    sticking = (fric & (codes == CLAMPED)).reshape(-1, layout.count, 3).any(-1)[:, layout.contact]
    pulling = ((codes == CLAMPED) & normal & (x < -tol_x))[:, layout.normal_of]
    touching = ((codes == SEPARATED) & normal & act & (w < -tol_w))[:, layout.normal_of]
    new = codes.clone()
    # Normals.
    new[normal & pulling & ~sticking] = SEPARATED
    new[normal & touching] = CLAMPED
    # Friction of pulling contacts that still stick: to the bound of the sticking impulse's sign.
    slide = fric & pulling & sticking & (codes == CLAMPED)
    new[slide & (x >= 0)] = UPPER
    new[slide & (x < 0)] = LOWER
    # Friction of new contacts: slide against the tangential velocity, stick if there is none.
    new[fric & touching] = CLAMPED
    new[fric & touching & (w < -tol_w)] = UPPER
    new[fric & touching & (w > tol_w)] = LOWER
    # Friction of settled contacts.
    settled = fric & ~pulling & ~touching
    new[settled & (codes == CLAMPED) & (x > bound + tol_x)] = UPPER
    new[settled & (codes == CLAMPED) & (x < -bound - tol_x)] = LOWER
    new[settled & (codes == UPPER) & (w > tol_w)] = CLAMPED
    new[settled & (codes == LOWER) & (w < -tol_w)] = CLAMPED
    new = torch.where(act, new, torch.zeros_like(new))
    return _with_friction_of_normals(layout, new)


def _classify(layout, A, b, mu, active, x):
    """Classification of an approximate solution (from Gauss-Seidel)."""
    w = matvec(A, x) + b
    tol_w, tol_x = contact_tolerances(A, b, x, rel=torch.finfo(b.dtype).eps ** 0.25)
    bound = mu[:, layout.contact] * x[:, layout.normal_of]
    normal = layout.is_normal[None, :]
    act = active[:, layout.contact]
    clamp_normal = act & (x[:, layout.normal_of] > tol_x)
    codes = torch.where(clamp_normal, CLAMPED, SEPARATED).to(torch.int8)
    at_upper = ~normal & (x >= bound - tol_x) & (w < 0)
    at_lower = ~normal & (x <= -bound + tol_x) & (w > 0)
    codes = torch.where(clamp_normal & at_upper & ~at_lower & (bound > 0), torch.full_like(codes, UPPER), codes)
    codes = torch.where(clamp_normal & at_lower & ~at_upper & (bound > 0), torch.full_like(codes, LOWER), codes)
    return codes


def _gauss_seidel(layout, A, b, mu, active, sweeps):
    """Projected Gauss-Seidel on the boxed LCP (bounds follow the current normal impulses)."""
    x = torch.zeros_like(b)
    diag = A.diagonal(dim1=-2, dim2=-1)
    usable = diag > torch.finfo(A.dtype).eps * (1.0 + diag.abs().amax(-1, keepdim=True))
    safe_diag = torch.where(usable, diag, torch.ones_like(diag))
    act = active[:, layout.contact] & usable
    for _ in range(sweeps):
        for j in range(layout.m):
            w_j = (A[:, j, :] * x).sum(-1) + b[:, j]
            value = x[:, j] - w_j / safe_diag[:, j]
            if j % 3 == 0:
                value = value.clamp_min(0.0)
            else:
                bound = mu[:, j // 3] * x[:, 3 * (j // 3)]
                value = torch.maximum(torch.minimum(value, bound), -bound)
            x[:, j] = torch.where(act[:, j], value, torch.zeros_like(value))
    return x


def _try(layout, A, b, mu, active, codes):
    x, inverse = _active_set_solve(layout, A, b, mu, codes)
    return x, inverse, _check(layout, A, b, mu, active, codes, x)


def _untie_friction(layout, A, b, mu, active, codes, x, inverse):
    """Reclassify friction at a bound without slip (``|x_t| = mu x_n``, ``w_t = 0``) as clamped.

    Such a tie satisfies complementarity but not strictly: the linear model of a bounded
    variable leaves its slip velocity free, so its Jacobian lets a sticking contact slide
    (e.g. two corners of a sliding box at opposite t2 bounds, ±mu x_n of internal stress,
    where any perturbation keeps them sticking). When the clamped classification also
    solves the problem (its minimum-norm friction within the bounds), it is the strictly
    complementary one and its Jacobian is the two-sided derivative; otherwise the tie is a
    real kink and the first classification stays.
    """
    w = matvec(A, x) + b
    tol_w, _ = contact_tolerances(A, b, x)
    tied = ~layout.is_normal[None, :] & ((codes == UPPER) | (codes == LOWER)) & (w.abs() <= tol_w)
    rows = tied.any(-1)
    if not bool(rows.any()):
        return x, inverse, codes
    idx = rows.nonzero().flatten()
    untied = torch.where(tied[idx], torch.full_like(codes[idx], CLAMPED), codes[idx])
    x_u, inv_u, ok_u = _try(layout, A[idx], b[idx], mu[idx], active[idx], untied)
    x, inverse, codes = x.clone(), inverse.clone(), codes.clone()
    x[idx] = torch.where(ok_u[:, None], x_u, x[idx])
    inverse[idx] = torch.where(ok_u[:, None, None], inv_u, inverse[idx])
    codes[idx] = torch.where(ok_u[:, None], untied, codes[idx])
    return x, inverse, codes


def _solve_subset(layout, A, b, mu, active, codes):
    """Repair rounds, then Gauss-Seidel + polish, for the batch entries whose first guess failed."""
    x, inverse, ok = _try(layout, A, b, mu, active, codes)
    for _ in range(REPAIR_ROUNDS):
        if bool(ok.all()):
            break
        codes = torch.where(ok[:, None], codes, _repair(layout, A, b, mu, active, codes, x))
        x, inverse, ok = _try(layout, A, b, mu, active, codes)
    fallback = ~ok
    if bool(fallback.any()):
        idx = fallback.nonzero().flatten()
        sub = (A[idx], b[idx], mu[idx], active[idx])
        x_gs = _gauss_seidel(layout, *sub, PGS_SWEEPS)
        codes_gs = _classify(layout, sub[0], sub[1], sub[2], sub[3], x_gs)
        x_p, inv_p, ok_p = _try(layout, *sub[:3], sub[3], codes_gs)
        for _ in range(REPAIR_ROUNDS):
            if bool(ok_p.all()):
                break
            codes_gs = torch.where(ok_p[:, None], codes_gs, _repair(layout, *sub, codes_gs, x_p))
            x_p, inv_p, ok_p = _try(layout, *sub[:3], sub[3], codes_gs)
        # Not converged: keep the Gauss-Seidel impulses (feasible, approximate) and their classification.
        x_p = torch.where(ok_p[:, None], x_p, x_gs)
        x, inverse, codes, ok = x.clone(), inverse.clone(), codes.clone(), ok.clone()
        x[idx], inverse[idx], codes[idx], ok[idx] = x_p, inv_p, codes_gs, ok_p
    return x, inverse, codes, ok, fallback


def solve_lcp(delassus, bias, mu, active, warm_codes=None, complementarity_aware=False):
    """Solve the boxed contact LCP and attach Nimble's clamping-set gradients.

    Args:
        delassus: Delassus matrix ``A = J M⁻¹ Jᵀ`` [m/(N·s²)·s], shape (..., 3K, 3K), rows and
            columns ordered ``[n, t1, t2]`` per contact.
        bias: Contact velocities without impulses plus normal bias [m/s], shape (..., 3K).
        mu: Friction coefficients, shape (..., K).
        active: Contacts taking part, bool (..., K); the others get zero impulse.
        warm_codes: Classification to try first (e.g. the previous step's ``codes``), int (..., K, 3).
        complementarity_aware: Nimble §IV-D: in the backward pass, treat a tied contact (zero
            impulse and zero normal velocity) as clamped when the loss wants it to push
            (dL/dx_n < 0) and as separated otherwise, instead of the forward's arbitrary choice.

    Returns:
        LCPSolution.
    """
    batch, A, b, mu_f, act = flatten_problem(delassus, bias, mu, active)
    k = mu_f.shape[-1]
    layout = ContactLayout(k, b.device)
    with torch.no_grad():
        A0, b0, mu0 = A.detach(), b.detach(), mu_f.detach()
        warm_given = warm_codes is not None
        if warm_given:
            codes = warm_codes.to(device=b.device, dtype=torch.int8).expand(*batch, k, 3).reshape(-1, 3 * k)
            codes = torch.where(act[:, layout.contact], codes, torch.zeros_like(codes))
        else:
            codes = _heuristic_codes(layout, b0, act)
        x, inverse, ok = _try(layout, A0, b0, mu0, act, codes)
        warm_hit = ok & warm_given
        fallback = torch.zeros_like(ok)
        converged = ok.clone()
        if not bool(ok.all()):
            idx = (~ok).nonzero().flatten()
            start = _heuristic_codes(layout, b0[idx], act[idx]) if warm_given else codes[idx]
            xs, invs, cs, oks, fbs = _solve_subset(layout, A0[idx], b0[idx], mu0[idx], act[idx], start)
            x, inverse, codes = x.clone(), inverse.clone(), codes.clone()
            x[idx], inverse[idx], codes[idx], converged[idx], fallback[idx] = xs, invs, cs, oks, fbs
        x, inverse, codes = _untie_friction(layout, A0, b0, mu0, act, codes, x, inverse)
    impulse = _LCPImpulse.apply(A, b, mu_f, x, codes, inverse, act, bool(complementarity_aware))
    return LCPSolution(
        impulse=impulse.reshape(*batch, k, 3),
        codes=codes.reshape(*batch, k, 3),
        warm_hit=warm_hit.reshape(batch),
        converged=converged.reshape(batch),
        fallback=fallback.reshape(batch),
    )


def lcp_impulse(delassus, bias, mu, active, codes):
    """Differentiable impulses (..., K, 3) for a *given* classification (no search): Nimble's f_C = -A_CC⁻¹ b_C."""
    batch, A, b, mu_f, act = flatten_problem(delassus, bias, mu, active)
    k = mu_f.shape[-1]
    layout = ContactLayout(k, b.device)
    codes = codes.to(device=b.device, dtype=torch.int8).expand(*batch, k, 3).reshape(-1, 3 * k)
    with torch.no_grad():
        x, inverse = _active_set_solve(layout, A.detach(), b.detach(), mu_f.detach(), codes)
    return _LCPImpulse.apply(A, b, mu_f, x, codes, inverse, act, False).reshape(*batch, k, 3)


def _tie_codes(layout, A, b, active, codes, x, grad):
    """Complementarity-aware classification of tied normals from the incoming gradient."""
    w = matvec(A, x) + b
    tol_w, tol_x = contact_tolerances(A, b, x)
    normal = layout.is_normal[None, :]
    act = active[:, layout.contact]
    tied = normal & act & (((codes == CLAMPED) & (x <= tol_x)) | ((codes == SEPARATED) & (w <= tol_w)))
    if not bool(tied.any()):
        return codes, False
    wanted = torch.where(grad < 0, CLAMPED, SEPARATED).to(codes.dtype)
    new = torch.where(tied, wanted, codes)
    return _with_friction_of_normals(layout, new), True


class _LCPImpulse(SolvedImpulse):
    """Identity on the solved impulses; gradients from the linear system of the classification.

    Inputs ``(A, b, mu, x, codes, inverse, active, aware)`` (:class:`SolvedImpulse`); ``aware``:
    Nimble's complementarity-aware classification of tied normals in backward.
    """

    @staticmethod
    def setup_context(ctx, inputs, output):
        SolvedImpulse.setup_context(ctx, inputs, output)
        ctx.aware = inputs[-1]

    @staticmethod
    def backward(ctx, grad):
        A, b, mu, x, codes, inverse, active = ctx.saved_tensors
        layout = ContactLayout(mu.shape[-1], b.device)
        if ctx.aware:
            codes, changed = _tie_codes(layout, A, b, active, codes, x, grad)
            if changed:
                _, G, _ = _reduced_system(layout, A, b, mu, codes)
                inverse = pinv(G)
        E = _expansion(layout, codes, mu)
        clamped = (codes == CLAMPED).to(b.dtype)
        # Adjoint of x = E x_hat, G x_hat = -b_hat:  v = G⁻ᵀ Eᵀ g, restricted to clamped rows.
        v = matvec(inverse.transpose(-1, -2), matvec(E.transpose(-1, -2), grad)) * clamped
        grad_b = -v
        grad_A = -v[:, :, None] * x[:, None, :]
        bounded_sign = (codes == UPPER).to(b.dtype) - (codes == LOWER).to(b.dtype)
        per_var = (grad - matvec(A.transpose(-1, -2), v)) * bounded_sign * x[:, layout.normal_of]
        grad_mu = per_var @ layout.contact_matrix(mu.dtype)
        return grad_A, grad_b, grad_mu, None, None, None, None, None

    @staticmethod
    def jvp(ctx, dA, db, dmu, *_):
        A, b, mu, x, codes, inverse, active = ctx.saved_tensors
        layout = ContactLayout(mu.shape[-1], b.device)
        dA, db, dmu = SolvedImpulse.tangents(A, b, mu, dA, db, dmu)
        E = _expansion(layout, codes, mu)
        clamped = (codes == CLAMPED).to(b.dtype)
        bounded_sign = (codes == UPPER).to(b.dtype) - (codes == LOWER).to(b.dtype)
        delta = bounded_sign * dmu[:, layout.contact] * x[:, layout.normal_of]  # dE x_hat
        rhs = (matvec(dA, x) + matvec(A, delta) + db) * clamped
        return delta - matvec(E, matvec(inverse, rhs))
