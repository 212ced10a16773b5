"""The position/orientation consistency test of pose fits (estimation.consistency).

Checked on linear least-squares problems, where the theory is exact: under a correct model
the statistic is chi-square (its p-values are uniform), a model error that pulls one channel
by a few standard deviations is found, a parameter one channel cannot see does not count,
and the per-row noise estimate the test uses (objects.row_noise) recovers each channel's noise.
"""

import numpy as np
import pytest
from scipy.optimize import least_squares

from diffsim_ros.estimation.consistency import CONSISTENCY_P_VALUE, STD_RATIO, channel_consistency
from diffsim_ros.estimation.objects import row_noise

SEED = 7
ROWS = 60  # per channel
DRAWS = 1500
# Fraction of draws with p below 0.05 under a correct model: binomial std 0.0056 at 1500
# draws, so 0.05 ± 0.02 is ±3.5 std.
LEVEL = 0.05
LEVEL_TOL = 0.02
SHIFT_STD = 6.0  # model error: orientation channel pulled by this many std of the difference
NOISE = (1e-3, 4e-3)  # position, orientation row noise
NOISE_REL_TOL = 0.15


def _problem(rng, blind=False):
    """Jacobian (2R, 3): two parameters and one nuisance; channel labels; true sigma."""
    jac = rng.normal(size=(2 * ROWS, 3))
    if blind:
        jac[ROWS:, 1] = 0.0  # the orientation rows do not see parameter 1
    channels = np.repeat([0, 1], ROWS)
    sigma = np.where(channels == 0, NOISE[0], NOISE[1])
    return jac, channels, sigma


def _fit(jac, data):
    """Least-squares solution and residuals (as a fit would leave them)."""
    x = np.linalg.lstsq(jac, data, rcond=None)[0]
    return x, jac @ x - data


def _test(jac, channels, sigma, data):
    x, residual = _fit(jac, data)
    return channel_consistency(jac, residual, sigma, channels, ["a", "b"], x, shared=2)


def test_a_correct_model_gives_uniform_p_values():
    rng = np.random.default_rng(SEED)
    jac, channels, sigma = _problem(rng)
    p = np.array([_test(jac, channels, sigma, rng.normal(size=2 * ROWS) * sigma).p_value for _ in range(DRAWS)])
    assert abs(np.mean(p < LEVEL) - LEVEL) < LEVEL_TOL
    assert abs(np.mean(p < 0.5) - 0.5) < 0.05


def test_a_channel_pulled_by_a_model_error_is_found():
    rng = np.random.default_rng(SEED)
    jac, channels, sigma = _problem(rng)
    clean = _test(jac, channels, sigma, np.zeros(2 * ROWS))
    assert clean.statistic < 1e-20 and clean.agrees()
    # The difference's std along parameter 0, from each channel's own fit.
    std = np.sqrt(sum(np.linalg.inv((jac[channels == c] / sigma[channels == c, None]).T
                                    @ (jac[channels == c] / sigma[channels == c, None]))[0, 0] for c in (0, 1)))
    bias = np.where(channels == 1, jac[:, 0] * SHIFT_STD * std, 0.0)
    flagged = [not _test(jac, channels, sigma, bias + rng.normal(size=2 * ROWS) * sigma).agrees() for _ in range(50)]
    assert np.mean(flagged) > 0.9
    result = _test(jac, channels, sigma, bias)
    assert result.z["a"] == pytest.approx(-SHIFT_STD, rel=1e-6)
    assert result.by_channel["orientation"]["a"] - result.by_channel["position"]["a"] == pytest.approx(SHIFT_STD * std, rel=1e-6)
    assert result.p_value < CONSISTENCY_P_VALUE
    # Each channel's own std, whose sum in quadrature is the difference's.
    own = [result.std_by_channel[c]["a"] for c in ("position", "orientation")]
    assert np.hypot(*own) == pytest.approx(std, rel=1e-9)


def test_a_parameter_one_channel_cannot_see_carries_no_evidence():
    rng = np.random.default_rng(SEED)
    jac, channels, sigma = _problem(rng, blind=True)
    # Position rows pulled along the parameter the orientation rows do not see: the pull is
    # absorbed by that parameter and no channel disagrees with it.
    bias = np.where(channels == 0, jac[:, 1] * 0.5, 0.0)
    results = [_test(jac, channels, sigma, bias + rng.normal(size=2 * ROWS) * sigma) for _ in range(400)]
    assert {r.dof for r in results} == {1}
    assert results[0].z["b"] == 0.0
    assert results[0].std_by_channel["orientation"]["b"] == np.inf and np.isfinite(results[0].std_by_channel["position"]["b"])
    p = np.array([r.p_value for r in results])
    assert abs(np.mean(p < LEVEL) - LEVEL) < 2 * LEVEL_TOL


def test_row_noise_recovers_each_channel():
    rng = np.random.default_rng(SEED)
    jac, channels, sigma = _problem(rng)
    _, residual = _fit(jac, rng.normal(size=2 * ROWS) * sigma)
    estimated = row_noise(jac, residual, channels)
    for c, value in enumerate(NOISE):
        assert estimated[channels == c][0] == pytest.approx(value, rel=NOISE_REL_TOL)


def test_a_nonlinear_fit_is_tested_at_its_solution():
    """Through scipy's least_squares on a mildly nonlinear model: the test sees the bias."""
    rng = np.random.default_rng(SEED)
    t = np.linspace(0.0, 1.0, ROWS)
    truth = np.array([1.3, 0.4])

    def model(x, k):
        return np.concatenate([np.exp(-x[0] * t) + x[1] * t, (1 + k) * x[0] * np.cos(3 * t) + x[1] * t**2])

    sigma = np.repeat(NOISE, ROWS)
    channels = np.repeat([0, 1], ROWS)
    for k, expect_agree in ((0.0, True), (0.05, False)):
        data = model(truth, k) + rng.normal(size=2 * ROWS) * sigma
        fit = least_squares(lambda x: model(x, 0.0) - data, np.ones(2))
        result = channel_consistency(fit.jac, fit.fun, sigma, channels, ["a", "b"], fit.x)
        assert result.agrees() is expect_agree


def test_a_parameter_one_channel_barely_sees_is_not_tested():
    # Before a hit, a box's mass is seen only through second-order effects (a contact's
    # compliance): a model error there is no disagreement about the mass.
    rng = np.random.default_rng(SEED)
    jac, channels, sigma = _problem(rng)
    jac[ROWS:, 1] *= 1e-3  # the orientation rows see parameter 1, 1000x less well
    std_o = np.sqrt(np.linalg.inv((jac[ROWS:] / sigma[ROWS:, None]).T @ (jac[ROWS:] / sigma[ROWS:, None]))[1, 1])
    bias = np.where(channels == 1, jac[:, 1] * 5 * std_o, 0.0)  # 5 of its own std, on the weak side only
    result = _test(jac, channels, sigma, bias)
    assert result.dof == 1 and result.z["b"] == 0.0 and result.agrees()
    assert result.std_by_channel["orientation"]["b"] > STD_RATIO * result.std_by_channel["position"]["b"]
    # The parameter both channels see is still tested, and a disagreement on it is found.
    std = np.sqrt(sum(np.linalg.inv((jac[channels == c] / sigma[channels == c, None]).T
                                    @ (jac[channels == c] / sigma[channels == c, None]))[0, 0] for c in (0, 1)))
    pulled = _test(jac, channels, sigma, bias + np.where(channels == 1, jac[:, 0] * SHIFT_STD * std, 0.0))
    assert pulled.dof == 1 and not pulled.agrees()
