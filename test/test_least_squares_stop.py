"""The identification solver's statistical stopping rule (solvers.gauss_newton_decrement).

The decrement is the cost reduction of the full Gauss-Newton step; stopping below
DECREMENT_TOLERANCE leaves the estimate within sqrt(2 * tol) standard deviations of the
optimum, with fewer residual evaluations than scipy's relative tolerances alone.
"""

import numpy as np
import torch

from diffsim_ros.estimation import solvers

EXACT = 1e-10  # float64 linear algebra on well-conditioned 4-column problems


def _linear(seed=0, rows=200):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(rows, 4)) * np.array([1.0, 1e3, 1e-3, 10.0])  # columns many decades apart
    b = rng.normal(size=rows)
    return a, b


def test_decrement_of_a_linear_problem_is_the_gauss_newton_reduction():
    a, b = _linear()
    z = np.array([0.3, -1e-3, 20.0, 0.1])
    r = a @ z - b
    step = np.linalg.lstsq(a, -r, rcond=None)[0]
    expected = 0.5 * r @ r - 0.5 * np.sum((r + a @ step) ** 2)
    inf = np.full(4, np.inf)
    got = solvers.gauss_newton_decrement(r, a, z, -inf, inf)
    assert abs(got - expected) <= EXACT * expected
    # At the optimum nothing is left.
    optimum = np.linalg.lstsq(a, b, rcond=None)[0]
    assert solvers.gauss_newton_decrement(a @ optimum - b, a, optimum, -inf, inf) <= EXACT * expected


def test_a_bound_that_blocks_the_descent_leaves_its_coordinate_out():
    a, b = _linear(1)
    z = np.array([0.0, 0.0, 0.0, 0.0])
    r = a @ z - b
    gradient = a.T @ r
    lower, upper = np.full(4, -np.inf), np.full(4, np.inf)
    lower[0] = 0.0 if gradient[0] > 0 else -np.inf  # z[0] sits on a bound the descent pushes against
    upper[0] = 0.0 if gradient[0] < 0 else np.inf
    open_ = [1, 2, 3]
    step = np.linalg.lstsq(a[:, open_], -r, rcond=None)[0]
    expected = 0.5 * r @ r - 0.5 * np.sum((r + a[:, open_] @ step) ** 2)
    got = solvers.gauss_newton_decrement(r, a, z, lower, upper)
    assert abs(got - expected) <= EXACT * expected


def test_not_finite_residuals_never_look_converged():
    a, b = _linear()
    r = a @ np.zeros(4) - b
    r[3] = np.nan
    inf = np.full(4, np.inf)
    assert solvers.gauss_newton_decrement(r, a, np.zeros(4), -inf, inf) == np.inf


def _fit_problem():
    """A nonlinear fit y = c0 exp(-c1 t) + c2, noise 0.05, a few outliers: (value_and_jacobian, z0, lower, upper)."""
    rng = np.random.default_rng(3)
    t = np.linspace(0.0, 4.0, 400)
    y = 5.0 * np.exp(-1.3 * t) + 0.7 + rng.normal(size=t.size) * 0.05
    y[::50] += 2.0

    def value_and_jacobian(z):
        c = z.numpy()
        e = np.exp(-c[1] * t)
        jac = np.stack([e, -c[0] * t * e, np.ones_like(t)], axis=1) / 0.05
        return torch.as_tensor((c[0] * e + c[2] - y) / 0.05), torch.as_tensor(jac)

    z0 = torch.tensor([1.0, 0.2, 0.0], dtype=torch.float64)
    return value_and_jacobian, z0, np.array([0.0, 0.0, -10.0]), np.array([100.0, 10.0, 10.0])


def _fits(robust):
    fn, z0, lower, upper = _fit_problem()
    stopped = solvers.least_squares(fn, z0, lower, upper, robust, 3.0, 100)
    tight = solvers.least_squares(fn, z0, lower, upper, robust, 3.0, 100, decrement_tolerance=0.0)
    r, jac = (x.numpy() for x in fn(tight.z))
    weights = np.where(np.abs(r) <= 3.0, 1.0, 0.0) if robust == "huber" else np.ones_like(r)
    std = np.sqrt(np.diag(np.linalg.inv((jac * weights[:, None]).T @ jac)))
    return stopped, tight, std


def test_the_stop_lands_within_its_tolerance_of_the_tight_optimum_with_fewer_evaluations():
    for robust in ("linear", "huber"):
        stopped, tight, std = _fits(robust)
        assert stopped.success and stopped.message == solvers.CONVERGED_MESSAGE
        distance = np.abs((stopped.z - tight.z).numpy()) / std
        # sqrt(2 * DECREMENT_TOLERANCE) = 0.0045 std in the covariance's metric; per coordinate at most that.
        assert distance.max() <= np.sqrt(2 * solvers.DECREMENT_TOLERANCE), (robust, distance)
        assert stopped.evaluations < tight.evaluations, (robust, stopped.evaluations, tight.evaluations)


def test_a_converged_start_costs_one_evaluation():
    fn, _, lower, upper = _fit_problem()
    _, tight, _ = _fits("linear")
    again = solvers.least_squares(fn, tight.z, lower, upper)
    assert again.evaluations == 1 and again.message == solvers.CONVERGED_MESSAGE
