"""Contact solvers on their own: the boxed LCP (Nimble) and the Coulomb-cone solver (Le Lidec).

Problems are physical (A = J M⁻¹ Jᵀ, b = J v) with random contact Jacobians; every custom
gradient is checked by torch.autograd.gradcheck (central differences, float64) in reverse
and forward mode, at points away from mode switches (the classification is fixed there).
"""

import pytest
import torch

from diffsim_ros.dynamics.spatial import matvec
from diffsim_ros.sim.contact import lcp_impulse, solve_cone, solve_lcp, staggered_projections
from diffsim_ros.sim.contact.cone import regularize
from diffsim_ros.sim.contact.lcp import CLAMPED, LOWER, SEPARATED, UPPER
from diffsim_ros.sim.contact.linsolve import pinv_solve, refined_solve, scaled_pinv

COMPLEMENTARITY_TOL = 1e-10  # |x_n w_n| [N·s·m/s] at a converged solution
FEASIBILITY_TOL = 1e-10  # bound / cone violations [N·s]
MIN_CONVERGED = 0.95  # fraction of random multi-contact problems solved exactly
GRADCHECK = dict(eps=1e-6, atol=1e-6, rtol=1e-5)
SPLIT_TOL = 1e-9  # [N·s] Newton stops at round-off of the 1 N·s impulses
REGULARIZED_TOL = 1e-5  # [N·s] the cone solver's 1e-6 relative compliance
ALGORITHM1_REL_TOL = 1e-3  # staggered projections before the Newton polish
ALGORITHM1_SHARE = 0.9  # of random problems where it is within that after its iteration budget
DTYPE = torch.float64


def _problems(batch, contacts, dof, seed, speed=1.0):
    gen = torch.Generator().manual_seed(seed)
    jac = torch.randn(batch, 3 * contacts, dof, generator=gen, dtype=DTYPE)
    velocity = speed * torch.randn(batch, dof, 1, generator=gen, dtype=DTYPE)
    A = jac @ jac.transpose(-1, -2)
    b = (jac @ velocity)[..., 0]
    mu = 0.1 + torch.rand(batch, contacts, generator=gen, dtype=DTYPE)
    active = torch.ones(batch, contacts, dtype=torch.bool)
    return A, b, mu, active


def _lcp_violations(A, b, mu, x):
    x = x.reshape(x.shape[0], -1)
    w = matvec(A, x) + b
    xn, wn = x[:, 0::3], w[:, 0::3]
    bound = (mu * xn).repeat_interleave(2, -1)
    xt = torch.stack([x[:, 1::3], x[:, 2::3]], -1).reshape(x.shape[0], -1)
    return (
        (-xn).clamp_min(0).amax(-1),
        (-wn).clamp_min(0).amax(-1),
        (xn * wn).abs().amax(-1),
        (xt.abs() - bound).clamp_min(0).amax(-1),
    )


@pytest.mark.parametrize("contacts,dof", [(1, 6), (2, 6), (4, 12), (4, 6)])
def test_lcp_solutions_satisfy_complementarity(contacts, dof):
    A, b, mu, active = _problems(60, contacts, dof, seed=contacts * 10 + dof)
    solution = solve_lcp(A, b, mu, active)
    ok = solution.converged
    assert ok.double().mean() >= MIN_CONVERGED
    for violation in _lcp_violations(A[ok], b[ok], mu[ok], solution.impulse[ok]):
        assert float(violation.max()) < COMPLEMENTARITY_TOL
    # Friction at a bound opposes the sliding velocity; clamped friction does not slide.
    w = matvec(A, solution.impulse.reshape(60, -1)) + b
    codes = solution.codes.reshape(60, -1)
    assert bool(((codes == UPPER) & ok[:, None]).any() or ((codes == LOWER) & ok[:, None]).any())
    zero = torch.zeros(1, dtype=DTYPE)
    assert float(torch.cat([zero, w[(codes == UPPER) & ok[:, None]]]).clamp_min(0).max()) < COMPLEMENTARITY_TOL
    assert float(torch.cat([zero, -w[(codes == LOWER) & ok[:, None]]]).clamp_min(0).max()) < COMPLEMENTARITY_TOL
    assert float(torch.cat([zero, w[(codes == CLAMPED) & ok[:, None]].abs()]).max()) < COMPLEMENTARITY_TOL


def test_lcp_warm_start_with_its_own_classification_hits():
    A, b, mu, active = _problems(40, 4, 12, seed=3)
    first = solve_lcp(A, b, mu, active)
    again = solve_lcp(A, b, mu, active, warm_codes=first.codes)
    assert bool((again.warm_hit == first.converged).all())
    assert not bool(again.fallback.any())
    torch.testing.assert_close(again.impulse, first.impulse, atol=1e-12, rtol=0)


def test_lcp_inactive_contacts_get_no_impulse():
    A, b, mu, active = _problems(10, 3, 12, seed=4, speed=3.0)
    active[:, 1] = False
    solution = solve_lcp(A, b, mu, active)
    assert float(solution.impulse[:, 1].abs().max()) == 0.0
    assert bool((solution.codes[:, 1] == SEPARATED).all())


def _mixed_lcp_problem():
    """Two contacts: one sliding (friction at a bound), one sticking (clamped), one extra separating."""
    A, b, mu, active = _problems(200, 3, 12, seed=11, speed=1.0)
    solution = solve_lcp(A, b, mu, active)
    codes = solution.codes.reshape(200, -1)
    has_all = (codes == CLAMPED).any(-1) & ((codes == UPPER) | (codes == LOWER)).any(-1) & (codes == SEPARATED).any(-1)
    i = int((has_all & solution.converged).nonzero()[0])
    return A[i : i + 1], b[i : i + 1], mu[i : i + 1], active[i : i + 1], solution.codes[i : i + 1]


def test_lcp_clamping_set_gradient_matches_finite_differences():
    A, b, mu, active, codes = _mixed_lcp_problem()
    inputs = tuple(t.clone().requires_grad_() for t in (A, b, mu))

    def fixed_classification(A, b, mu):
        return lcp_impulse(A, b, mu, active, codes)

    def searched(A, b, mu):
        return solve_lcp(A, b, mu, active).impulse

    assert torch.autograd.gradcheck(fixed_classification, inputs, check_forward_ad=True, **GRADCHECK)
    assert torch.autograd.gradcheck(searched, inputs, **GRADCHECK)


def test_separating_contacts_have_zero_force_gradient():
    A, b, mu, active, codes = _mixed_lcp_problem()
    A, b, mu = (t.clone().requires_grad_() for t in (A, b, mu))
    impulse = solve_lcp(A, b, mu, active).impulse
    separated = codes[0, :, 0] == SEPARATED
    target = impulse[0, separated].sum()
    grads = torch.autograd.grad(target, (A, b, mu), allow_unused=True)
    for grad in grads:
        assert grad is None or float(grad.abs().max()) == 0.0


def test_rank_deficient_duplicate_contacts_split_equally():
    # Two identical contact rows on a point mass: A_CC is singular (rank 3 of 6).
    jac_one = torch.eye(3, dtype=DTYPE)
    jac = torch.cat([jac_one, jac_one], 0)[None]
    A = jac @ jac.transpose(-1, -2) / 2.0  # mass 2 kg
    b = torch.tensor([[-1.0, 0.1, 0.0, -1.0, 0.1, 0.0]], dtype=DTYPE)
    mu = torch.tensor([[0.5, 0.5]], dtype=DTYPE)
    active = torch.ones(1, 2, dtype=torch.bool)
    for impulse in (solve_lcp(A, b, mu, active).impulse, solve_cone(A, b, mu, active).impulse):
        torch.testing.assert_close(impulse[0, 0], impulse[0, 1], atol=SPLIT_TOL, rtol=0)
        # The total normal impulse stops the 1 m/s approach of a 2 kg mass.
        torch.testing.assert_close(impulse[0, :, 0].sum(), torch.tensor(2.0, dtype=DTYPE), atol=REGULARIZED_TOL, rtol=0)
    # Gradient of the post-impulse velocity with respect to the free velocity (b = J v stays
    # consistent, as physics makes it) against central differences.
    def post_velocity(v):
        impulse = solve_lcp(A, (jac @ v[..., None])[..., 0], mu, active).impulse
        return v + (jac.transpose(-1, -2) @ impulse.reshape(1, 6, 1))[..., 0] / 2.0

    v = torch.tensor([[-1.0, 0.1, 0.0]], dtype=DTYPE, requires_grad=True)
    assert torch.autograd.gradcheck(post_velocity, (v,), **GRADCHECK)


def test_complementarity_aware_gradient_on_a_tie():
    # One contact exactly at the tie: approaching velocity zero, zero impulse.
    A = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]]], dtype=DTYPE)
    b = torch.tensor([[0.0, 0.3, 0.0]], dtype=DTYPE, requires_grad=True)
    mu = torch.tensor([[0.5]], dtype=DTYPE)
    active = torch.ones(1, 1, dtype=torch.bool)
    for aware, expect_zero in ((False, True), (True, False)):
        impulse = solve_lcp(A, b, mu, active, complementarity_aware=aware).impulse
        assert float(impulse.detach().abs().max()) < 1e-14
        # The loss wants more normal impulse (d loss / d x_n < 0): aware treats the tie as clamped.
        (grad,) = torch.autograd.grad(-impulse[0, 0, 0], b)
        assert (float(grad.abs().max()) == 0.0) == expect_zero
    assert float(grad[0, 0]) == pytest.approx(1.0 / 2.0)


@pytest.mark.parametrize("contacts,dof", [(1, 6), (2, 6), (4, 12)])
def test_cone_solutions_satisfy_kkt(contacts, dof):
    A, b, mu, active = _problems(40, contacts, dof, seed=100 + contacts)
    solution = solve_cone(A, b, mu, active)
    ok = solution.converged
    assert ok.double().mean() >= MIN_CONVERGED
    A_reg = regularize(A, active)
    x = solution.impulse[ok].reshape(int(ok.sum()), -1)
    w = matvec(A_reg[ok], x) + b[ok]
    xn, wn = x[:, 0::3], w[:, 0::3]
    xt = solution.impulse[ok][..., 1:]
    wt = w.reshape(-1, contacts, 3)[..., 1:]
    assert float((-xn).clamp_min(0).max()) < FEASIBILITY_TOL
    assert float((-wn).clamp_min(0).max()) < COMPLEMENTARITY_TOL
    assert float((xn * wn).abs().max()) < COMPLEMENTARITY_TOL
    radius = mu[ok] * xn
    assert float((xt.norm(dim=-1) - radius).max()) < FEASIBILITY_TOL
    # Maximum dissipation: sliding friction is on the cone boundary and opposite to the slip.
    sliding = solution.modes[ok] == 2
    assert bool(sliding.any())
    slip_dir = wt[sliding] / wt[sliding].norm(dim=-1, keepdim=True)
    torch.testing.assert_close(xt[sliding], -radius[sliding][:, None] * slip_dir, atol=1e-9, rtol=0)


def test_cone_algorithm1_agrees_with_warm_newton_and_warm_start_hits():
    A, b, mu, active = _problems(20, 2, 6, seed=7)
    auto = solve_cone(A, b, mu, active)
    staggered = solve_cone(A, b, mu, active, method="staggered")
    both = auto.converged & staggered.converged
    assert both.double().mean() >= MIN_CONVERGED
    torch.testing.assert_close(staggered.impulse[both], auto.impulse[both], atol=1e-9, rtol=0)
    again = solve_cone(A, b, mu, active, warm=auto)
    assert bool((again.warm_hit == auto.converged).all())
    # Algorithm 1 alone (no polish) is already close on most problems.
    raw = staggered_projections(regularize(A, active), b, mu, active)
    scale = auto.impulse.reshape(20, -1).abs().amax(-1).clamp_min(torch.finfo(DTYPE).tiny)
    error = (raw - auto.impulse.reshape(20, -1)).abs().amax(-1) / scale
    assert float((error[both] < ALGORITHM1_REL_TOL).double().mean()) >= ALGORITHM1_SHARE


def test_cone_implicit_gradient_matches_finite_differences():
    A, b, mu, active = _problems(60, 2, 6, seed=21)
    solution = solve_cone(A, b, mu, active)
    modes = solution.modes
    # One problem with a sliding and a sticking contact, well inside its modes.
    pick = ((modes == 2).any(-1) & (modes == 1).any(-1) & solution.converged).nonzero()[0]
    i = int(pick)
    inputs = tuple(t[i : i + 1].clone().requires_grad_() for t in (A, b, mu))

    def impulse(A, b, mu):
        return solve_cone(A, b, mu, active[i : i + 1], warm=solution_i).impulse

    solution_i = solve_cone(*[t.detach() for t in inputs], active[i : i + 1])
    assert torch.autograd.gradcheck(impulse, inputs, check_forward_ad=True, **GRADCHECK)


def test_cone_friction_is_isotropic_and_pyramid_is_not():
    # A unit point mass sliding on a plane in direction theta, friction 0.5, 1 m/s.
    A = torch.eye(3, dtype=DTYPE)[None]
    mu = torch.tensor([[0.5]], dtype=DTYPE)
    active = torch.ones(1, 1, dtype=torch.bool)
    magnitudes = {"cone": [], "lcp": []}
    for theta in (0.0, 0.3, 0.7853981633974483):
        slip = torch.tensor([[-0.1, torch.cos(torch.tensor(theta)), torch.sin(torch.tensor(theta))]], dtype=DTYPE)
        cone = solve_cone(A, slip * 10.0, mu, active, regularization=0.0).impulse[0, 0]
        pyramid = solve_lcp(A, slip * 10.0, mu, active).impulse[0, 0]
        magnitudes["cone"].append(float(cone[1:].norm() / cone[0]))
        magnitudes["lcp"].append(float(pyramid[1:].norm() / pyramid[0]))
    assert magnitudes["cone"] == pytest.approx([0.5] * 3, abs=1e-12)
    assert magnitudes["lcp"][0] == pytest.approx(0.5, abs=1e-12)
    assert magnitudes["lcp"][2] == pytest.approx(0.5 * 2**0.5, abs=1e-12)


def test_least_squares_helpers():
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(4, 6, 3, generator=gen, dtype=DTYPE)
    singular = base @ base.transpose(-1, -2)  # rank 3
    rhs = matvec(singular, torch.randn(4, 6, generator=gen, dtype=DTYPE))
    for solve in (pinv_solve, refined_solve):
        x = solve(singular, rhs)
        torch.testing.assert_close(matvec(singular, x), rhs, atol=1e-10, rtol=0)
    # Badly scaled columns: the equilibrated inverse keeps the small-scale direction.
    scaled = torch.diag(torch.tensor([1.0, 1.0, 1e-9], dtype=DTYPE)) @ torch.randn(3, 3, generator=gen, dtype=DTYPE)
    torch.testing.assert_close(scaled_pinv(scaled) @ scaled, torch.eye(3, dtype=DTYPE), atol=1e-6, rtol=0)


def test_solvers_reject_inconsistent_sizes():
    A, b, mu, active = _problems(2, 2, 6, seed=1)
    with pytest.raises(ValueError, match="inconsistent contact sizes"):
        solve_lcp(A, b, mu[:, :1], active)
    with pytest.raises(ValueError, match="inconsistent contact sizes"):
        solve_cone(A, b[:, :5], mu, active)
    with pytest.raises(ValueError, match="method"):
        solve_cone(A, b, mu, active, method="admm")
