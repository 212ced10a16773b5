"""Parameter covariance under serially correlated residuals (filtered motion data).

A linear regression whose noise is white noise smoothed by a Savitzky-Golay filter (as the
motion residuals are: filtered torques, accelerations from filtered positions): the
Gauss-Newton covariance counts every row as new information and is overconfident; the
sandwich of :func:`~diffsim_ros.estimation.identifiability.serial_covariance` must give
z-scores of unit spread, and stay honest on white noise.
"""

import numpy as np
import pytest
import torch
from scipy.signal import savgol_coeffs

from diffsim_ros.estimation import identifiability as ident
from diffsim_ros.estimation import solvers
from diffsim_ros.estimation.data import Trajectory
from diffsim_ros.estimation.residuals import InverseDynamicsResidual, RolloutResidual, SimulatorDynamicsResidual
from diffsim_ros.model import load_robot_config
from diffsim_ros.sim.rigid import RigidBodySimulator
from oracles import BAXTER_LEFT

SEEDS = 200
Z_RMS_BAND = (0.8, 1.25)  # rms of (estimate - truth) / std over seeds and parameters
GAUSS_NEWTON_Z_RMS_MIN = 1.5  # the plain covariance on the filtered noise: clearly overconfident
SAME_TOL = 1e-12  # relative: no serial rows is the Gauss-Newton covariance
INFLUENCE_FD_TOL = 1e-6
FILTER = savgol_coeffs(31, 3)  # smoothing over 31 samples: reach 30 lags
SEGMENTS = (350, 250)  # samples of two gap-free runs
COLUMNS = 2


def _regressors():
    """Smooth Jacobian (S, COLUMNS, 3): a constant and slow sinusoids, as a payload's is."""
    t = np.arange(sum(SEGMENTS)) * 0.01
    base = np.stack([np.ones_like(t), np.sin(2 * np.pi * 0.3 * t), np.cos(2 * np.pi * 0.17 * t + 0.4)], -1)
    return np.stack([base, base[:, [1, 2, 0]] * np.array([0.7, 1.3, 0.5])], 1)


def _noise(rng, filtered):
    """Errors (S, COLUMNS): white, or filtered per segment with correlated columns."""
    parts = []
    for length in SEGMENTS:
        raw = rng.standard_normal((length + len(FILTER) - 1, COLUMNS))
        if not filtered:
            parts.append(raw[: length])
            continue
        smooth = np.stack([np.convolve(raw[:, c], FILTER, mode="valid") for c in range(COLUMNS)], -1)
        parts.append(smooth @ np.array([[1.0, 0.5], [0.0, 1.0]]))  # column 1 shares column 0's noise
    return np.concatenate(parts)


def _z_scores(filtered, serial_rows):
    """(estimate - truth) / std of every seed and parameter: sandwich and Gauss-Newton, (SEEDS, 3) each."""
    jac3 = _regressors()
    jac = jac3.reshape(-1, jac3.shape[-1])
    truth = np.array([0.3, -1.0, 2.0])
    serial = (ident.SerialRows(0, COLUMNS, SEGMENTS, len(FILTER) - 1),) if serial_rows else ()
    sandwich, plain = [], []
    for seed in range(SEEDS):
        y = jac @ truth + _noise(np.random.default_rng(seed), filtered).reshape(-1)
        estimate = np.linalg.lstsq(jac, y, rcond=None)[0]
        residual = y - jac @ estimate
        variance = residual @ residual / (len(y) - len(truth))
        for out, cov in ((sandwich, ident.serial_covariance(jac, residual, variance, serial)),
                         (plain, ident.covariance(jac, variance))):
            out.append((estimate - truth) / np.sqrt(np.diag(cov)))
    return np.array(sandwich), np.array(plain)


def _rms(z):
    return float(np.sqrt(np.mean(z**2)))


def test_filtered_noise_gets_unit_z_scores_where_gauss_newton_is_overconfident():
    sandwich, plain = _z_scores(filtered=True, serial_rows=True)
    assert _rms(plain) > GAUSS_NEWTON_Z_RMS_MIN
    assert Z_RMS_BAND[0] <= _rms(sandwich) <= Z_RMS_BAND[1], _rms(sandwich)
    for column in range(sandwich.shape[1]):  # every parameter, not only on average
        assert Z_RMS_BAND[0] <= _rms(sandwich[:, column]) <= Z_RMS_BAND[1], (column, _rms(sandwich[:, column]))


def test_white_noise_declared_serial_stays_honest():
    sandwich, plain = _z_scores(filtered=False, serial_rows=True)
    for z in (sandwich, plain):
        assert Z_RMS_BAND[0] <= _rms(z) <= Z_RMS_BAND[1], _rms(z)


def test_independent_rows_keep_the_gauss_newton_covariance():
    rng = np.random.default_rng(3)
    jac, residual = rng.standard_normal((200, 4)), rng.standard_normal(200)
    expected = ident.covariance(jac, 1.7)
    got = ident.serial_covariance(jac, residual, 1.7, ())
    assert np.abs(got - expected).max() <= SAME_TOL * np.abs(expected).max()


def test_rows_outside_serial_blocks_count_as_independent():
    """A serial block's rows leave the others' Gauss-Newton information untouched."""
    rng = np.random.default_rng(4)
    jac, residual = rng.standard_normal((300, 3)), rng.standard_normal(300)
    serial = ident.SerialRows(100, 2, (40, 60), 5)
    rows = slice(100, 300)
    block = jac[rows].reshape(100, 2, 3)
    info = ident.long_run_information(block, residual[rows].reshape(100, 2), (40, 60), 5)
    bread = np.linalg.pinv(jac.T @ jac)
    share = ident.fitted_share(block, bread, (40, 60), 5)
    assert 0.0 < share < ident.MAX_FITTED_SHARE
    expected = bread @ (0.9 * jac[:100].T @ jac[:100] + info / (1.0 - share)) @ bread
    got = ident.serial_covariance(jac, residual, 0.9, (serial,))
    assert np.abs(got - expected).max() <= SAME_TOL * np.abs(expected).max()
    assert np.linalg.eigvalsh(info).min() >= -SAME_TOL * np.abs(info).max()  # Parzen window: PSD


def test_rows_zeroed_by_a_data_split_change_nothing():
    """A split's part zeroes the other part's rows; the sums skip them (for time), exactly."""
    rng = np.random.default_rng(5)
    jac, residual = rng.standard_normal((200, 3)), rng.standard_normal(200)
    lengths, reach = (40, 60), 5
    zeroed = np.zeros(100, dtype=bool)
    zeroed[:25] = zeroed[70:] = True  # the first segment's start, the second's end
    rows = np.repeat(zeroed, 2)
    jac[rows], residual[rows] = 0.0, 0.0
    block = jac.reshape(100, 2, 3)
    bread = np.linalg.pinv(jac.T @ jac)
    info = ident.long_run_information(block, residual.reshape(100, 2), lengths, reach)
    expected = bread @ (info / (1.0 - ident.fitted_share(block, bread, lengths, reach))) @ bread
    got = ident.serial_covariance(jac, residual, 1.0, (ident.SerialRows(0, 2, lengths, reach),))
    assert np.abs(got - expected).max() <= SAME_TOL * np.abs(expected).max()


@pytest.mark.parametrize("robust", solvers.ROBUST_LOSSES)
def test_influence_is_the_cost_gradient(robust):
    r = np.array([-5.0, -1.0, 0.0, 0.5, 2.9, 3.1, 10.0])
    step = 1e-6
    numeric = [(solvers.robust_cost(r + step * e, robust, 3.0) - solvers.robust_cost(r - step * e, robust, 3.0)) / (2 * step)
               for e in np.eye(len(r))]
    assert np.allclose(solvers.robust_influence(r, robust, 3.0), numeric, atol=INFLUENCE_FD_TOL)


def _trajectories(spans):
    t = np.arange(80)[:, None] * 0.01
    q = 0.3 * np.sin(t + np.arange(7))
    return [Trajectory(dt=0.01, q=q[:n], qd=np.cos(q[:n]), tau=np.zeros((n, 7)), qdd=-q[:n], filter_span=s)
            for n, s in zip((80, 50), spans)]


def test_motion_blocks_name_their_segments_and_reach():
    model = load_robot_config(BAXTER_LEFT).build_model()
    filtered = _trajectories((15, 15))
    assert InverseDynamicsResidual(filtered, model, 0.05).serial_segments() == ((80, 50), 30)
    assert InverseDynamicsResidual(_trajectories((0, 0)), model, 0.05).serial_segments() is None
    sim = RigidBodySimulator(model, 0.01)
    assert SimulatorDynamicsResidual.from_trajectories(filtered, model, sim, 0.05).serial_segments() == ((80, 50), 30)
    # windows of 4 samples every 4: 19 and 12 windows; a window shares data with the next (4 + 30) / 4 -> 9
    rollout = RolloutResidual(filtered, model, sim, horizon=4, scheme="torque")
    assert rollout.serial_segments() == ((19, 12), 9)
    assert rollout.scale.numel() % sum(rollout.serial_segments()[0]) == 0
    torch.testing.assert_close(rollout.scale.reshape(31, -1)[0], rollout.scale[0].reshape(-1))
