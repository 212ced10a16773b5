"""The halves of a recording must agree: the split test of identification (estimation/time_split.py).

Linear theory first (``split_consistency`` on a linear model with serially correlated noise,
as filtered motion has): calibrated p-values under one model, power when a parameter steps
half way, invariance to the coordinates' scale. The recording whose payload changes half way
is in test_online_replay.py (``calibrate`` refuses it, and calibrates its first half); rest
poses held before and after a payload swap are here.
"""

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.estimation.consistency import CONSISTENCY_P_VALUE, split_consistency
from diffsim_ros.estimation.data import Dataset, StaticPoses
from diffsim_ros.estimation.identification import identify
from diffsim_ros.estimation.identifiability import SerialRows
from diffsim_ros.estimation.time_split import TimeSplit, time_split
from test_fit_quality import CONFIG

SAMPLES = 600
WIDTH = 2  # residual columns per sample
REACH = 4  # [samples] of correlated noise (a moving average over 5 samples)
DRAWS = 300
# Share of p < 0.05 over the draws under one model. The long-run variance is estimated from the
# same residuals, and such (HAC) estimators run liberal in finite samples: measured 0.10 here,
# 0.02 below p = 0.01; counting every correlated row as independent gives 0.69.
FALSE_ALARM_BAND = (0.02, 0.15)
POWER_P = 1e-6
REST_NOISE = 0.05  # [N·m] effort noise of a rest pose's average


def _design(rng):
    """Regressors that vary slowly along the samples, as a robot's motion does (with white
    regressors, correlated noise would not matter), (SAMPLES * WIDTH, 3)."""
    t = np.arange(SAMPLES)[:, None] / SAMPLES
    phase = rng.uniform(0, 2 * np.pi, size=(1, WIDTH))
    columns = [np.ones((SAMPLES, WIDTH)), np.sin(2 * np.pi * 3 * t + phase), np.cos(2 * np.pi * 5 * t + 2 * phase)]
    return np.stack(columns, -1).reshape(SAMPLES * WIDTH, 3)


def _correlated_noise(rng):
    """Moving average of white noise along the samples, per column: correlated over REACH samples."""
    white = rng.normal(size=(SAMPLES + REACH, WIDTH))
    kernel = np.ones(REACH + 1) / np.sqrt(REACH + 1)
    return np.stack([np.convolve(white[:, c], kernel, mode="valid") for c in range(WIDTH)], 1).reshape(-1)


def _parts():
    return np.repeat((np.arange(SAMPLES) >= SAMPLES // 2).astype(int), WIDTH)


def _test(jac, residual, serial):
    variance = float(residual @ residual / residual.size)
    return split_consistency(jac, residual, variance, _parts(), serial)


def _fitted(jac, data):
    """Residuals at the joint least-squares solution (what identification hands the test)."""
    theta = np.linalg.lstsq(jac, data, rcond=None)[0]
    return jac @ theta - data


def test_p_values_of_one_model_with_correlated_noise_are_calibrated():
    rng = np.random.default_rng(0)
    jac = _design(rng)
    serial = (SerialRows(0, WIDTH, (SAMPLES,), REACH),)
    p_serial, p_white = [], []
    for _ in range(DRAWS):
        residual = _fitted(jac, _correlated_noise(rng))
        p_serial.append(_test(jac, residual, serial).p_value)
        p_white.append(_test(jac, residual, ()).p_value)
    share = np.mean(np.array(p_serial) < 0.05)
    assert FALSE_ALARM_BAND[0] <= share <= FALSE_ALARM_BAND[1], share
    # Counting every correlated row as new information would flag a correct model often.
    assert np.mean(np.array(p_white) < 0.05) > 2 * FALSE_ALARM_BAND[1]


def test_a_parameter_that_steps_half_way_is_found():
    rng = np.random.default_rng(1)
    jac = _design(rng)
    theta = np.array([1.0, -0.5, 0.3])
    later = np.repeat(np.arange(SAMPLES) >= SAMPLES // 2, WIDTH)
    data = jac @ theta + _correlated_noise(rng)
    data[later] += jac[later, 1] * 1.0  # the second parameter steps by 1 (std of the difference ~0.13)
    result = _test(jac, _fitted(jac, data), (SerialRows(0, WIDTH, (SAMPLES,), REACH),))
    assert result.p_value < POWER_P
    step = result.steps[1] - result.steps[0]
    assert abs(step[1] - 1.0) < 0.4 and abs(step[0]) < 0.4 and abs(step[2]) < 0.4


def test_the_statistic_does_not_depend_on_the_coordinates_scale():
    rng = np.random.default_rng(2)
    jac = _design(rng)
    residual = _fitted(jac, _correlated_noise(rng))
    serial = (SerialRows(0, WIDTH, (SAMPLES,), REACH),)
    scale = np.array([1e-4, 1.0, 1e5])  # e.g. a camera's metres next to a stiffness
    a, b = _test(jac, residual, serial), _test(jac * scale, residual, serial)
    assert b.statistic == pytest.approx(a.statistic, rel=1e-6)
    assert np.allclose(b.steps[0] * scale, a.steps[0], rtol=1e-6, atol=1e-12)


def test_a_parameter_one_half_cannot_see_is_not_tested():
    rng = np.random.default_rng(3)
    jac = _design(rng)
    jac[SAMPLES * WIDTH // 2 :, 2] = 0.0  # the third parameter moves only the first half
    residual = _fitted(jac, _correlated_noise(rng))
    result = _test(jac, residual, (SerialRows(0, WIDTH, (SAMPLES,), REACH),))
    assert list(result.tested) == [True, True, False]
    assert result.dof == 2


def test_parts_that_share_no_coordinate_are_not_compared():
    """Each part sees its own parameter only (e.g. a cut that leaves the rests out): nothing to test."""
    rng = np.random.default_rng(6)
    jac = _design(rng)[:, :2]
    half = SAMPLES * WIDTH // 2
    jac[half:, 0] = 0.0
    jac[:half, 1] = 0.0
    result = _test(jac, _fitted(jac, _correlated_noise(rng)), (SerialRows(0, WIDTH, (SAMPLES,), REACH),))
    assert result.dof == 0 and result.p_value == 1.0 and not result.tested.any()
    assert result.agrees()


class _Numel:
    """Stands in for a block's ``scale`` tensor: only its number of entries is read."""

    def __init__(self, count):
        self.count = count

    def numel(self):
        return self.count


class _Block:
    """A residual block as time_split reads it: its entries, and the stamps of its samples."""

    def __init__(self, rows, sample_ns):
        self.scale = _Numel(rows)
        self.sample_ns = sample_ns


def test_time_split_names_the_parameter_that_changed_and_both_values():
    rng = np.random.default_rng(4)
    jac = _design(rng)
    later = np.repeat(np.arange(SAMPLES) >= SAMPLES // 2, WIDTH)
    data = _correlated_noise(rng) * 0.01
    data[later] += jac[later, 0] * 0.5
    residual = _fitted(jac, data)
    block = _Block(SAMPLES * WIDTH, np.arange(SAMPLES, dtype=np.int64) * 10_000_000)
    value = np.array([1.5, 0.0, 2.0])  # physical = coordinates here: payload mass, a damping, ...
    layout = [("payload.mass", ()), ("left_s0.damping", ()), ("camera.pose", ())]
    split = time_split(jac, residual, float(residual @ residual / residual.size), [block],
                       (SerialRows(0, WIDTH, (SAMPLES,), REACH),), (value, np.eye(3), layout), {})
    assert isinstance(split, TimeSplit)
    assert split.differ == ("payload.mass",)
    assert float(split.after["payload.mass"] - split.before["payload.mass"]) == pytest.approx(0.5, abs=0.01)
    message = split.verdict()
    assert "payload.mass" in message and "before" in message and "after" in message


def _stepped_split(changes, value):
    """time_split of data whose first parameter moves by ``size`` from each ``(share, size)`` of
    ``changes`` on (as shares of the samples); the parameter's value is ``value``."""
    rng = np.random.default_rng(5)
    jac = _design(rng)
    data = _correlated_noise(rng) * 0.01
    sample = np.repeat(np.arange(SAMPLES), WIDTH)
    for share, size in changes:
        later = sample >= share * SAMPLES
        data[later] += jac[later, 0] * size
    residual = _fitted(jac, data)
    block = _Block(SAMPLES * WIDTH, np.arange(SAMPLES, dtype=np.int64) * 10_000_000)
    layout = [("payload.mass", ()), ("left_s0.damping", ()), ("left_s1.damping", ())]
    return time_split(jac, residual, float(residual @ residual / residual.size), [block],
                      (SerialRows(0, WIDTH, (SAMPLES,), REACH),), (np.array([value, 0.0, 0.0]), np.eye(3), layout), {})


def test_a_change_near_the_start_is_found_by_the_first_quartile():
    """A 20 % step a tenth into the data: the halves are 4 % of the value apart (below the
    relevance floor), the cut at the first quartile 8 %."""
    split = _stepped_split([(0.1, 0.5)], 2.5)
    assert split.differ == ("payload.mass",) and split.fraction == 0.25, split
    assert split.at_ns == pytest.approx(0.25 * SAMPLES * 10_000_000, rel=0.01)
    assert "the data before and after 25 % of their samples disagree" in split.verdict()
    assert float(split.after["payload.mass"] - split.before["payload.mass"]) == pytest.approx(0.3, abs=0.03)


def test_a_change_that_went_back_is_found():
    """A B A B by quarters: both halves hold as much of each, a quartile cut does not."""
    split = _stepped_split([(0.25, 0.5), (0.5, -0.5), (0.75, 0.5)], 2.0)
    assert split.differ == ("payload.mass",) and split.fraction in (0.25, 0.75), split
    assert abs(float(split.after["payload.mass"] - split.before["payload.mass"])) == pytest.approx(1 / 3, abs=0.03)


def test_one_model_passes_every_cut_and_the_cuts_are_counted():
    """No change: nothing differs, and the reported p-value is the smallest cut's times the cuts."""
    split = _stepped_split([], 1.0)
    assert split.differ == () and split.verdict() is None
    assert split.p_value > CONSISTENCY_P_VALUE


def _rests(robot, count, seed, start):
    """Rest poses of ``robot`` held one after the other from ``start`` [s], 2 s apart."""
    rng = np.random.default_rng(seed)
    low, high = robot.lower.numpy(), robot.upper.numpy()
    q = low + (0.15 + 0.7 * rng.random((count, robot.nq))) * (high - low)
    as_t = torch.as_tensor(q, dtype=torch.float64)
    effort = (dyn.gravity_torques(robot, as_t) - dyn.spring_torques(robot, as_t)).numpy()
    effort = effort + REST_NOISE * rng.standard_normal(effort.shape)
    return StaticPoses(q, effort, np.full_like(effort, REST_NOISE), start + 2.0 * np.arange(count))


def _joined(a, b):
    return StaticPoses(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in ("q", "effort", "effort_std", "times")))


def test_rest_poses_held_before_and_after_a_payload_change_are_refused():
    """A static calibration whose payload was swapped halfway (no motion, times from the rests)."""
    model = CONFIG.build_model()
    light, heavy = (model.with_parameters({"payload.mass": torch.tensor(m, dtype=torch.float64),
                                           "payload.com": torch.tensor([0.0, 0.0, 0.05], dtype=torch.float64)})
                    for m in (1.0, 1.3))
    one = identify(model, Dataset(static=_joined(_rests(light, 18, 1, 0.0), _rests(light, 18, 2, 40.0))), ("payload",))
    assert one.poor_fit is None and one.split is not None and not one.split.differ
    assert abs(one.values["payload.mass"] - 1.0) < 0.02
    both = identify(model, Dataset(static=_joined(_rests(light, 18, 1, 0.0), _rests(heavy, 18, 2, 40.0))), ("payload",))
    assert both.split.differ == ("payload.mass",), both.split
    assert "the data before and after their middle disagree" in both.poor_fit
    before, after = (float(half["payload.mass"]) for half in (both.split.before, both.split.after))
    assert abs(before - 1.0) < 0.02 and abs(after - 1.3) < 0.03
