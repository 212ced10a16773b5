"""Coulomb friction-cone contact by staggered projections with implicit gradients (Le Lidec et al.).

Same contact problem as :mod:`~diffsim_ros.sim.contact.lcp` (``w = A x + b``, impulses
``[n, t1, t2]`` per contact) but with the true second-order cone ``|x_t| <= mu x_n`` and
maximum dissipation, so sliding friction is isotropic.

Forward (Algorithm 1 of Le Lidec et al.): staggered projections alternate

* the normal QP  ``min ½ x_nᵀ A_nn x_n + x_nᵀ (b_n + A_nt x_t)``  s.t. ``x_n >= 0`` and
* the friction QCQP ``min ½ x_tᵀ A_tt x_t + x_tᵀ (b_t + A_tn x_n)`` s.t. ``|x_t,i| <= mu_i x_n,i``,

each solved by over-relaxed ADMM, warm-started from the previous outer iteration and the
previous time step. Its result fixes each contact's mode (separated, sticking, sliding) and a
Newton solve of the modes' KKT equations polishes it to machine precision. When the previous
step's modes are passed, that Newton solve is tried first and Algorithm 1 runs only if the
modes are no longer right (``method="staggered"`` always runs Algorithm 1).

Backward: implicit differentiation of the KKT system at the solution (their Eq. 7),
``F(x, nu) = 0`` with, per contact,

* separated: ``x = 0``; sticking: ``w = 0``;
* sliding: ``w_n = 0``, ``w_t + 2 nu x_t = 0``, ``½(|x_t|² - mu² x_n²) = 0`` (``nu >= 0`` the
  cone multiplier),

solved (transposed) by a pseudo-inverse with iterative refinement, since rank-deficient
contact sets make it singular.
"""

from dataclasses import dataclass

import torch

from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.sim.contact.layout import ContactLayout, flatten_problem
from diffsim_ros.sim.contact.linsolve import SolvedImpulse, contact_tolerances, refined_solve, scaled_pinv

__all__ = ["SEPARATED", "STICKING", "SLIDING", "ConeSolution", "solve_cone", "staggered_projections", "regularize"]

SEPARATED, STICKING, SLIDING = 0, 1, 2

OUTER_ITERATIONS = 20
ADMM_ITERATIONS = 300
ADMM_RELAXATION = 1.6
NEWTON_ITERATIONS = 30
NEWTON_STEP_TOL = 1e-15
LINE_SEARCH_STEPS = 8
REGULARIZATION = 1e-6
# Warm-started sliding contacts slower than this fraction of the problem's velocity scale are
# tried as sticking first.
SLIP_TOL = 1e-4
REPAIR_ROUNDS = 8  # mode fixes of a Newton solve that fails its KKT check, before giving up
# Relative accuracy at which Algorithm 1 stops (the Newton polish then finishes the job).
STAGGERED_TOL = 1e-9


@dataclass(frozen=True)
class ConeSolution:
    """Result of :func:`solve_cone` (leading batch shape ``...``, K contacts).

    Attributes:
        impulse: Contact impulses ``[n, t1, t2]`` [N·s], shape (..., K, 3), differentiable.
        multiplier: Cone multipliers nu >= 0 of sliding contacts [m/(N·s²)], shape (..., K).
        modes: SEPARATED, STICKING or SLIDING per contact, int8 (..., K).
        warm_hit: The warm-start modes were right on the first try, bool (...).
        converged: A solution satisfying every KKT condition was found, bool (...).
        fallback: Algorithm 1 (staggered projections) ran, bool (...).
    """

    impulse: torch.Tensor
    multiplier: torch.Tensor
    modes: torch.Tensor
    warm_hit: torch.Tensor
    converged: torch.Tensor
    fallback: torch.Tensor


def _parts(layout, x):
    """(x_n (B, K), x_t (B, K, 2)) of stacked impulses (B, 3K)."""
    view = x.reshape(x.shape[0], layout.count, 3)
    return view[..., 0], view[..., 1:]


def _masks(layout, modes, mu, active):
    """Per-contact (separated, frictionless, sliding) masks and the per-row 'velocity equation' mask."""
    sep = (modes == SEPARATED) | ~active
    frictionless = ~sep & (mu <= 0)
    sliding = ~sep & ~frictionless & (modes == SLIDING)
    velocity_row = ~sep[:, layout.contact] & (layout.is_normal[None, :] | ~frictionless[:, layout.contact])
    return sep, frictionless, sliding, velocity_row


def _residual(layout, A, b, mu, active, modes, x, nu):
    """KKT residual F(x, nu), shape (B, 4K)."""
    _, _, sliding, velocity_row = _masks(layout, modes, mu, active)
    w = matvec(A, x) + b
    slide_row = sliding[:, layout.contact] & ~layout.is_normal[None, :]
    f_x = torch.where(velocity_row, w + 2.0 * nu[:, layout.contact] * x * slide_row, x)
    xn, xt = _parts(layout, x)
    cone = 0.5 * ((xt * xt).sum(-1) - (mu * xn) ** 2)
    f_nu = torch.where(sliding, cone, nu)
    return torch.cat([f_x, f_nu], -1)


def _kkt_matrix(layout, A, mu, active, modes, x, nu):
    """Jacobian dF/d(x, nu), shape (B, 4K, 4K)."""
    k, m = layout.count, layout.m
    _, _, sliding, velocity_row = _masks(layout, modes, mu, active)
    eye_m = torch.eye(m, dtype=A.dtype, device=A.device)
    slide_row = (sliding[:, layout.contact] & ~layout.is_normal[None, :]).to(A.dtype)
    top_left = torch.where(velocity_row[:, :, None], A, eye_m) + torch.diag_embed(2.0 * nu[:, layout.contact] * slide_row)
    onehot = (layout.contact[:, None] == torch.arange(k, device=A.device)[None, :]).to(A.dtype)  # (m, K)
    top_right = (2.0 * x * slide_row)[:, :, None] * onehot
    xn = x[:, layout.normal_idx]
    d_cone = torch.where(layout.is_normal[None, :], -(mu * mu * xn)[:, layout.contact], x)
    bottom_left = onehot.transpose(0, 1)[None] * (d_cone * sliding[:, layout.contact].to(A.dtype))[:, None, :]
    bottom_right = torch.diag_embed((~sliding).to(A.dtype))
    return torch.cat([torch.cat([top_left, top_right], -1), torch.cat([bottom_left, bottom_right], -1)], -2)


def _newton(layout, A, b, mu, active, modes, x, nu):
    """Solve F(x, nu) = 0 for fixed modes: damped Newton with backtracking on |F|².

    An element whose line search finds no decrease at all is abandoned (wrong modes make
    Newton wander; the caller then repairs the modes) instead of burning the iteration budget.
    """
    z = torch.cat([x, nu], -1)
    m = layout.m
    tiny = torch.finfo(A.dtype).tiny
    # Below this |F|² the residual is round-off: any step is accepted (no futile backtracking).
    noise = (16.0 * torch.finfo(A.dtype).eps * (b.abs().amax(-1) + 1e-3 * tiny)) ** 2 * z.shape[-1]
    f = _residual(layout, A, b, mu, active, modes, z[:, :m], z[:, m:])
    stalled = torch.zeros(z.shape[0], dtype=torch.bool, device=z.device)
    for _ in range(NEWTON_ITERATIONS):
        kkt = _kkt_matrix(layout, A, mu, active, modes, z[:, :m], z[:, m:])
        step = -refined_solve(kkt, f, iterations=1)
        norm0 = (f * f).sum(-1)
        alpha = torch.ones_like(norm0)
        for _ in range(LINE_SEARCH_STEPS):
            trial = z + alpha[:, None] * step
            f_trial = _residual(layout, A, b, mu, active, modes, trial[:, :m], trial[:, m:])
            worse = (f_trial * f_trial).sum(-1) > torch.maximum(norm0 * (1.0 - 1e-4 * alpha), noise)
            if not bool((worse & ~stalled).any()):
                break
            alpha = torch.where(worse, 0.5 * alpha, alpha)
        stalled = stalled | worse
        accept = torch.isfinite(f_trial).all(-1) & torch.isfinite(trial).all(-1) & ~stalled
        moved = (trial - z).abs().amax(-1) * accept
        z = torch.where(accept[:, None], trial, z)
        f = torch.where(accept[:, None], f_trial, f)
        # Done when the residual is round-off or the iterate stopped moving (stagnation):
        # iterating to round-off keeps the result a deterministic function of the data.
        done = ((f * f).sum(-1) <= noise) | (moved <= NEWTON_STEP_TOL * z.abs().amax(-1).clamp_min(tiny)) | stalled
        if bool(done.all()):
            break
    return z[:, :m], z[:, m:]


def regularize(delassus, active, relative=REGULARIZATION):
    """``A + eps I`` with eps = ``relative`` times the mean diagonal of the active rows.

    Rank-deficient contact sets (four corners of a box on a plane) have a manifold of
    solutions; this tiny compliance (1e-6 of the contact stiffness scale: velocity errors of
    order 1e-6 of an impulse's velocity change) makes the solution unique, so the
    simulation is a smooth, deterministic function of its inputs and Newton converges
    quadratically. Object fits take 1e-3 (``ContactOptions.regularization``): at 1e-6 the
    corners' load split is pinned only to the solver's tolerance over it, and a hit beside
    sliding corners can have no solution passing the KKT check. Shape (B, m, m).
    """
    layout_rows = active.repeat_interleave(3, -1).to(delassus.dtype)
    diag = delassus.diagonal(dim1=-2, dim2=-1)
    mean = (diag * layout_rows).sum(-1) / layout_rows.sum(-1).clamp_min(1.0)
    eps = relative * mean.clamp_min(torch.finfo(delassus.dtype).tiny)
    return delassus + eps[:, None, None] * torch.eye(delassus.shape[-1], dtype=delassus.dtype, device=delassus.device)


def _check(layout, A, b, mu, active, modes, x, nu):
    """True where (x, nu) with these modes satisfies every KKT condition."""
    sep, frictionless, sliding, velocity_row = _masks(layout, modes, mu, active)
    w = matvec(A, x) + b
    tol_w, tol_x = contact_tolerances(A, b, x)
    f = _residual(layout, A, b, mu, active, modes, x, nu)
    xn, xt = _parts(layout, x)
    wt = _parts(layout, w)[1]
    norm_t = torch.linalg.vector_norm(xt, dim=-1)
    sticking = ~sep & ~frictionless & ~sliding
    ok = ((f[:, : layout.m].abs() <= tol_w) | ~velocity_row).all(-1)
    ok &= (~sep | ~active | (w[:, layout.normal_idx] >= -tol_w)).all(-1)
    ok &= (sep | (xn >= -tol_x)).all(-1)
    ok &= (~sticking | (norm_t <= mu * xn + tol_x)).all(-1)
    ok &= (~sliding | ((norm_t - mu * xn).abs() <= tol_x)).all(-1)
    # Sliding friction must oppose the sliding velocity (nu >= 0).
    ok &= (~sliding | ((wt * xt).sum(-1) <= tol_w * norm_t.clamp_min(tol_x[:, 0:1]))).all(-1)
    finite = torch.isfinite(x).all(-1) & torch.isfinite(nu).all(-1)
    return ok & finite


def _multiplier(layout, A, b, x, sliding):
    """nu = |w_t| / (2 |x_t|) for sliding contacts, 0 elsewhere."""
    w = matvec(A, x) + b
    xt, wt = _parts(layout, x)[1], _parts(layout, w)[1]
    norm_x = torch.linalg.vector_norm(xt, dim=-1).clamp_min(torch.finfo(x.dtype).tiny)
    return torch.where(sliding, torch.linalg.vector_norm(wt, dim=-1) / (2.0 * norm_x), torch.zeros_like(norm_x))


def _classify(layout, A, b, mu, active, x):
    """Modes of an approximate solution from Algorithm 1."""
    w = matvec(A, x) + b
    tol_w, tol_x = contact_tolerances(A, b, x, rel=torch.finfo(b.dtype).eps ** 0.25)
    xn, xt = _parts(layout, x)
    wt = _parts(layout, w)[1]
    touching = active & (xn > tol_x)
    on_boundary = torch.linalg.vector_norm(xt, dim=-1) >= mu * xn - tol_x
    moving = torch.linalg.vector_norm(wt, dim=-1) > tol_w
    modes = torch.where(touching, STICKING, SEPARATED).to(torch.int8)
    return torch.where(touching & on_boundary & moving & (mu > 0), torch.full_like(modes, SLIDING), modes)


def _slip_directions(layout, A, b, x):
    """Unit slip direction per contact: the tangential velocity at x, else opposite the
    friction impulse (where a sticking impulse left the cone), shape (B, K, 2)."""
    w = matvec(A, x) + b
    xt, wt = _parts(layout, x)[1], _parts(layout, w)[1]
    tiny = torch.finfo(x.dtype).tiny
    norm_w = torch.linalg.vector_norm(wt, dim=-1, keepdim=True)
    norm_x = torch.linalg.vector_norm(xt, dim=-1, keepdim=True)
    tol = torch.finfo(x.dtype).eps ** 0.5 * (b.abs().amax(-1)[:, None, None] + tiny)
    fallback = torch.where(norm_x > tiny, -xt / norm_x.clamp_min(tiny), torch.zeros_like(xt))
    return torch.where(norm_w > tol, wt / norm_w.clamp_min(tiny), fallback)


def _fixed_direction_guess(layout, A, b, mu, active, modes, directions):
    """Impulses for given modes with sliding friction fixed at ``-mu x_n d`` (a linear solve).

    Like the LCP's active-set solve (friction at a bound), with the slip directions ``d``
    (B, K, 2) of the sliding contacts: a starting point on which Newton converges quickly,
    since only the directions are then left to adjust. Returns ``(x, nu)``.
    """
    sep, frictionless, sliding, velocity_row = _masks(layout, modes, mu, active)
    tangent_row = ~layout.is_normal[None, :]
    clamped = velocity_row & ~(sliding[:, layout.contact] & tangent_row)
    coeff = (-mu[..., None] * directions * sliding[..., None]).reshape(mu.shape[0], layout.count, 2)
    coeff = torch.cat([torch.zeros_like(coeff[..., :1]), coeff], -1).reshape(mu.shape[0], layout.m)
    mask = clamped.to(A.dtype)
    E = torch.diag_embed(mask) + coeff[:, :, None] * layout.normal_matrix(A.dtype)
    G = (A @ E) * mask[:, :, None] * mask[:, None, :] + torch.diag_embed(1.0 - mask)
    x = matvec(E, -refined_solve(G, b * mask, iterations=1))
    return x, _multiplier(layout, A, b, x, sliding)


def _repair(layout, A, b, mu, active, modes, x, nu):
    """Update the modes from a violating solution (like a primal-dual active-set step)."""
    sep, frictionless, sliding, _ = _masks(layout, modes, mu, active)
    w = matvec(A, x) + b
    tol_w, tol_x = contact_tolerances(A, b, x)
    xn, xt = _parts(layout, x)
    wn, wt = w[:, layout.normal_idx], _parts(layout, w)[1]
    norm_t = torch.linalg.vector_norm(xt, dim=-1)
    sticking = ~sep & ~frictionless & ~sliding
    pulling = ~sep & (xn < -tol_x)
    touching = sep & active & (wn < -tol_w)
    new = modes.clone()
    new[pulling & ~sticking] = SEPARATED
    new[pulling & sticking] = SLIDING
    new[touching] = STICKING
    new[touching & (torch.linalg.vector_norm(wt, dim=-1) > tol_w[:, 0:1]) & (mu > 0)] = SLIDING
    new[~pulling & sticking & (norm_t > mu * xn + tol_x)] = SLIDING
    new[~pulling & sliding & ((wt * xt).sum(-1) > tol_w * norm_t.clamp_min(tol_x[:, 0:1]))] = STICKING
    new = torch.where(active, new, torch.zeros_like(new))
    # Restart Newton from the linear solve of the new modes with the current slip directions.
    x, nu = _fixed_direction_guess(layout, A, b, mu, active, new, _slip_directions(layout, A, b, x))
    return new, x, nu


def _admm(P, q, project, x0, iterations, tol):
    """Over-relaxed ADMM for ``min ½ xᵀ P x + qᵀ x`` over a convex set given by ``project``."""
    rho = P.diagonal(dim1=-2, dim2=-1).mean(-1, keepdim=True).clamp_min(torch.finfo(P.dtype).tiny)
    eye = torch.eye(P.shape[-1], dtype=P.dtype, device=P.device)
    inverse = torch.linalg.inv(P + rho[..., None] * eye)
    z = project(x0)
    u = torch.zeros_like(z)
    scale = tol * (1.0 + q.abs().amax(-1, keepdim=True) / rho)
    for it in range(iterations):
        x = matvec(inverse, rho * (z - u) - q)
        relaxed = ADMM_RELAXATION * x + (1.0 - ADMM_RELAXATION) * z
        z_new = project(relaxed + u)
        u = u + relaxed - z_new
        if it % 10 == 9:
            primal = (x - z_new).abs().amax(-1, keepdim=True)
            dual = (z_new - z).abs().amax(-1, keepdim=True)
            if bool(((primal <= scale) & (dual <= scale)).all()):
                z = z_new
                break
        z = z_new
    return z


def staggered_projections(delassus, bias, mu, active, x0=None, outer_iterations=OUTER_ITERATIONS,
                          admm_iterations=ADMM_ITERATIONS, tol=STAGGERED_TOL):
    """Algorithm 1 of Le Lidec et al.: alternate the normal QP and the friction-cone QCQP.

    Args:
        delassus: Delassus matrices, shape (B, 3K, 3K).
        bias: Free contact velocities [m/s], shape (B, 3K).
        mu: Friction coefficients, shape (B, K).
        active: Contacts taking part, bool (B, K).
        x0: Warm start impulses [N·s], shape (B, 3K).
        outer_iterations: Maximum staggered iterations.
        admm_iterations: Maximum ADMM iterations per sub-problem.
        tol: Relative stopping tolerance.

    Returns:
        Impulses [N·s], shape (B, 3K) (not differentiable; see :func:`solve_cone`).
    """
    layout = ContactLayout(mu.shape[-1], bias.device)
    n, t = layout.normal_idx, layout.tangent_idx
    A, b = delassus, bias
    a_nn, a_nt = A[:, n][:, :, n], A[:, n][:, :, t]
    a_tn, a_tt = A[:, t][:, :, n], A[:, t][:, :, t]
    x = torch.zeros_like(b) if x0 is None else x0.clone()
    xn, xt = x[:, n], x[:, t]
    act = active.to(b.dtype)

    def project_normal(v):
        return v.clamp_min(0.0) * act

    for _ in range(outer_iterations):
        xn_new = _admm(a_nn, b[:, n] + matvec(a_nt, xt), project_normal, xn, admm_iterations, tol)
        radius = mu * xn_new * act

        def project_friction(v, radius=radius):
            pairs = v.reshape(v.shape[0], -1, 2)
            norm = torch.linalg.vector_norm(pairs, dim=-1)
            scale = torch.where(norm > radius, radius / norm.clamp_min(torch.finfo(v.dtype).tiny), torch.ones_like(norm))
            return (pairs * scale[..., None]).reshape(v.shape)

        xt_new = _admm(a_tt, b[:, t] + matvec(a_tn, xn_new), project_friction, xt, admm_iterations, tol)
        change = torch.maximum((xn_new - xn).abs().amax(-1), (xt_new - xt).abs().amax(-1))
        size = torch.maximum(xn_new.abs().amax(-1), xt_new.abs().amax(-1))
        xn, xt = xn_new, xt_new
        if bool((change <= tol * (size + torch.finfo(b.dtype).tiny)).all()):
            break
    out = torch.zeros_like(b)
    out[:, n], out[:, t] = xn, xt
    return out


def _heuristic(layout, A, b, mu, active):
    """Approaching contacts touch; those whose free slip exceeds mu times their approach speed
    slide along it, the others stick. Starts from the matching linear solve."""
    bn, bt = b[:, layout.normal_idx], _parts(layout, b)[1]
    touching = active & (bn < 0)
    slipping = torch.linalg.vector_norm(bt, dim=-1) > mu * bn.abs()
    modes = torch.where(touching, STICKING, SEPARATED).to(torch.int8)
    modes = torch.where(touching & slipping & (mu > 0), torch.full_like(modes, SLIDING), modes)
    x, nu = _fixed_direction_guess(layout, A, b, mu, active, modes, _slip_directions(layout, A, b, torch.zeros_like(b)))
    return modes, x, nu


def _attempt(layout, A, b, mu, active, modes, x, nu):
    x, nu = _newton(layout, A, b, mu, active, modes, x, nu)
    return x, nu, _check(layout, A, b, mu, active, modes, x, nu)


def _attempt_with_repairs(layout, A, b, mu, active, modes, x, nu):
    x, nu, ok = _attempt(layout, A, b, mu, active, modes, x, nu)
    for _ in range(REPAIR_ROUNDS):
        if bool(ok.all()):
            break
        new_modes, x_r, nu_r = _repair(layout, A, b, mu, active, modes, x, nu)
        modes = torch.where(ok[:, None], modes, new_modes)
        x = torch.where(ok[:, None], x, x_r)
        nu = torch.where(ok[:, None], nu, nu_r)
        x, nu, ok = _attempt(layout, A, b, mu, active, modes, x, nu)
    return x, nu, modes, ok


def _algorithm1(layout, A, b, mu, active, x0):
    """Staggered projections, then mode classification and the Newton polish."""
    x_sp = staggered_projections(A, b, mu, active, x0)
    modes = _classify(layout, A, b, mu, active, x_sp)
    sliding = modes == SLIDING
    nu = _multiplier(layout, A, b, x_sp, sliding)
    x, nu, modes, ok = _attempt_with_repairs(layout, A, b, mu, active, modes, x_sp, nu)
    # Not converged: keep Algorithm 1's (feasible, approximate) impulses.
    x = torch.where(ok[:, None], x, x_sp)
    return x, nu, modes, ok


def solve_cone(delassus, bias, mu, active, warm=None, method="auto", regularization=REGULARIZATION):
    """Solve the frictional contact problem on the Coulomb cone, with implicit gradients.

    Args:
        delassus: Delassus matrix ``A = J M⁻¹ Jᵀ``, shape (..., 3K, 3K), ``[n, t1, t2]`` per contact.
        bias: Contact velocities without impulses plus normal bias [m/s], shape (..., 3K).
        mu: Friction coefficients, shape (..., K).
        active: Contacts taking part, bool (..., K).
        warm: Previous :class:`ConeSolution` (same contacts) to warm-start from.
        method: ``"auto"`` tries the warm modes by Newton first and runs Algorithm 1 only when
            they fail; ``"staggered"`` always runs Algorithm 1 (warm-started impulses).
        regularization: Relative compliance added to the Delassus diagonal (see
            :func:`regularize`); the gradients are those of the regularized problem.

    Returns:
        ConeSolution.
    """
    if method not in ("auto", "staggered"):
        raise ValueError(f"method must be 'auto' or 'staggered', got {method!r}")
    batch, A, b, mu_f, act = flatten_problem(delassus, bias, mu, active)
    k = mu_f.shape[-1]
    A = regularize(A, act, regularization)
    layout = ContactLayout(k, b.device)
    nb = b.shape[0]
    with torch.no_grad():
        A0, b0, mu0 = A.detach(), b.detach(), mu_f.detach()
        if warm is not None:
            x_w = warm.impulse.detach().expand(*batch, k, 3).reshape(nb, 3 * k)
            nu_w = warm.multiplier.detach().expand(*batch, k).reshape(nb, k)
            modes_w = warm.modes.expand(*batch, k).reshape(nb, k).to(device=b.device, dtype=torch.int8)
            modes_w = torch.where(act, modes_w, torch.zeros_like(modes_w))
            # A contact that barely slid (|w_t| = 2 nu |x_t|) is most likely sticking now.
            slip = 2.0 * nu_w * torch.linalg.vector_norm(_parts(layout, x_w)[1], dim=-1)
            creeping = (modes_w == SLIDING) & (slip <= SLIP_TOL * b0.abs().amax(-1, keepdim=True))
            modes_w = torch.where(creeping, torch.full_like(modes_w, STICKING), modes_w)
            # Start from this step's linear solve for the warm modes (slip directions from the
            # previous impulses), not from the previous impulses: b has changed since.
            x_w, nu_w = _fixed_direction_guess(layout, A0, b0, mu0, act, modes_w, _slip_directions(layout, A0, b0, x_w))
        else:
            modes_w, x_w, nu_w = _heuristic(layout, A0, b0, mu0, act)
        x, nu, modes = x_w, nu_w, modes_w
        ok = torch.zeros(nb, dtype=torch.bool, device=b.device)
        if method == "auto" and warm is not None:
            x, nu, ok = _attempt(layout, A0, b0, mu0, act, modes, x, nu)
        warm_hit = ok & (warm is not None)
        if method == "auto" and not bool(ok.all()):
            idx = (~ok).nonzero().flatten()
            h_modes, h_x, h_nu = _heuristic(layout, A0[idx], b0[idx], mu0[idx], act[idx])
            xs, nus, ms, oks = _attempt_with_repairs(layout, A0[idx], b0[idx], mu0[idx], act[idx], h_modes, h_x, h_nu)
            x, nu, modes, ok = x.clone(), nu.clone(), modes.clone(), ok.clone()
            x[idx], nu[idx], modes[idx], ok[idx] = xs, nus, ms, oks
        fallback = ~ok
        if bool(fallback.any()):
            idx = fallback.nonzero().flatten()
            start = x_w[idx] if warm is not None else None
            xs, nus, ms, oks = _algorithm1(layout, A0[idx], b0[idx], mu0[idx], act[idx], start)
            x, nu, modes, ok = x.clone(), nu.clone(), modes.clone(), ok.clone()
            x[idx], nu[idx], modes[idx], ok[idx] = xs, nus, ms, oks
        # Contacts that touch with zero normal impulse are ties: treat them as separated, so the
        # KKT system keeps no empty cone rows (a sliding contact with x_n = 0 has none).
        _, tol_x = contact_tolerances(A0, b0, x)
        tied = (modes != SEPARATED) & (x[:, layout.normal_idx] <= tol_x)
        modes = torch.where(tied, torch.zeros_like(modes), modes)
        x = torch.where(tied[:, layout.contact], torch.zeros_like(x), x)
        nu = torch.where(tied, torch.zeros_like(nu), nu)
    impulse = _ConeImpulse.apply(A, b, mu_f, x, nu, modes, act)
    return ConeSolution(
        impulse=impulse.reshape(*batch, k, 3),
        multiplier=nu.reshape(*batch, k),
        modes=modes.reshape(*batch, k),
        warm_hit=warm_hit.reshape(batch),
        converged=ok.reshape(batch),
        fallback=fallback.reshape(batch),
    )


def _kkt_inverse(ctx):
    """The KKT matrix at the solution and its inverse, built once per ``ctx`` (backward and jvp)."""
    if getattr(ctx, "kkt_inverse", None) is None:
        A, _, mu, x, nu, modes, active = ctx.saved_tensors
        layout = ContactLayout(mu.shape[-1], A.device)
        kkt = _kkt_matrix(layout, A, mu, active, modes, x, nu)
        ctx.kkt_inverse = (kkt, scaled_pinv(kkt))
    return ctx.kkt_inverse


class _ConeImpulse(SolvedImpulse):
    """Identity on the solved impulses; gradients by implicit differentiation of F(x, nu) = 0.

    Inputs ``(A, b, mu, x, nu, modes, active)`` (:class:`SolvedImpulse`).
    """

    @staticmethod
    def backward(ctx, grad):
        A, b, mu, x, nu, modes, active = ctx.saved_tensors
        layout = ContactLayout(mu.shape[-1], A.device)
        kkt, inverse = _kkt_inverse(ctx)
        rhs = torch.cat([grad, torch.zeros_like(mu)], -1)
        u = refined_solve(kkt.transpose(-1, -2), rhs, inverse=inverse.transpose(-1, -2))
        _, _, sliding, velocity_row = _masks(layout, modes, mu, active)
        u_x = u[:, : layout.m] * velocity_row
        u_nu = u[:, layout.m :]
        grad_A = -u_x[:, :, None] * x[:, None, :]
        grad_b = -u_x
        xn = x[:, layout.normal_idx]
        grad_mu = u_nu * mu * xn * xn * sliding
        return grad_A, grad_b, grad_mu, None, None, None, None

    @staticmethod
    def jvp(ctx, dA, db, dmu, *_):
        A, b, mu, x, nu, modes, active = ctx.saved_tensors
        layout = ContactLayout(mu.shape[-1], A.device)
        kkt, inverse = _kkt_inverse(ctx)
        dA, db, dmu = SolvedImpulse.tangents(A, b, mu, dA, db, dmu)
        _, _, sliding, velocity_row = _masks(layout, modes, mu, active)
        xn = x[:, layout.normal_idx]
        rhs = torch.cat([(matvec(dA, x) + db) * velocity_row, -mu * xn * xn * dmu * sliding], -1)
        dz = -refined_solve(kkt, rhs, inverse=inverse)
        return dz[:, : layout.m]
