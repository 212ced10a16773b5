"""Safety layer: effort and rate limits, NaN/inf guard, joint-limit zone, per-output-type watchdog."""

import math

import numpy as np
import pytest
import torch

from diffsim_ros.control import ControlError, SafetyConfig, SafetyLayer
from diffsim_ros.model import load_robot_config
from oracles import BAXTER_LEFT

EXACT = 1e-12  # [N·m] arithmetic only
DT = 1e-3  # [s] control period of the tests
BAXTER_TIMEOUT = 0.2  # [s] the robot leaves torque mode after this gap (issue 6)
URDF_EFFORT = np.array([50.0, 100.0, 50.0, 50.0, 15.0, 15.0, 15.0])  # Baxter URDF [N·m]


@pytest.fixture(scope="module")
def model():
    return load_robot_config(BAXTER_LEFT).build_model()


@pytest.fixture()
def q_mid(model):
    """A configuration far from every position limit, at rest."""
    return 0.5 * (model.lower + model.upper).numpy(), np.zeros(model.nq)


def _fast_layer(model, **overrides):
    """A layer whose rate limit never binds (to test the other stages alone)."""
    return SafetyLayer(model, SafetyConfig(**{"torque_rate_limit": 1e12, **overrides}))


def _engaged(layer, q, qd, tau, t=0.0):
    """Run one cycle to engage, then return the output of the next one."""
    layer.filter(t, tau, q, qd)
    return layer.filter(t + DT, tau, q, qd)


def test_effort_limits_are_the_smaller_of_urdf_and_config(model, q_mid):
    layer = _fast_layer(model, effort_limit={"left_s0": 20.0, "left_s1": 500.0}, output="ros2_control")
    expected = URDF_EFFORT.copy()
    expected[0] = 20.0  # config tighter; s1: URDF 100 is tighter than the configured 500
    np.testing.assert_allclose(layer.effort_limit, expected)
    out, status = _engaged(layer, *q_mid, np.full(7, 1000.0))
    np.testing.assert_allclose(out, expected, atol=EXACT)
    assert status.active and set(status.clipped) == set(model.joint_names)
    out, status = layer.filter(2 * DT, np.full(7, -3.0), *q_mid)
    np.testing.assert_allclose(out, -3.0, atol=EXACT)
    assert status.clipped == ()
    scaled = _fast_layer(model, effort_limit=10.0)
    np.testing.assert_allclose(scaled.effort_limit, np.minimum(URDF_EFFORT, 10.0))


def test_bad_configurations_are_refused(model):
    unlimited = model.replace(effort_limit=torch.full((7,), math.inf, dtype=torch.float64))
    with pytest.raises(ControlError, match="no positive finite effort limit"):
        SafetyLayer(unlimited)
    SafetyLayer(unlimited, SafetyConfig(effort_limit=30.0))  # a config limit makes it usable
    with pytest.raises(ControlError, match="unknown joints"):
        SafetyLayer(model, SafetyConfig(effort_limit={"right_s0": 1.0}))
    with pytest.raises(ControlError, match="7 entries"):
        SafetyLayer(model, SafetyConfig(torque_rate_limit=[1.0, 2.0]))
    with pytest.raises(ControlError, match="exceeds the effort limits"):
        SafetyLayer(model, SafetyConfig(output="ros2_control", hold="fixed", hold_command=[0, 0, 0, 0, 0, 0, 99.0]))
    with pytest.raises(ControlError, match="unknown safety output"):
        SafetyLayer(model, SafetyConfig(output="position"))
    with pytest.raises(ControlError, match="torque_rate_limit must be positive"):
        SafetyLayer(model, SafetyConfig(torque_rate_limit=0.0))


def test_torque_rate_limit(model, q_mid):
    rate = 100.0  # [N·m/s]
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=rate))
    target = np.array([10.0, -10.0, 5.0, 0.0, 1.0, -1.0, 0.5])
    out, status = layer.filter(0.0, target, *q_mid)
    np.testing.assert_allclose(out, 0.0, atol=EXACT)  # engaging: starts from the hold command (zeros)
    assert status.engaged
    previous = out
    for k in range(1, 200):
        out, status = layer.filter(k * DT, target, *q_mid)
        assert np.all(np.abs(out - previous) <= rate * DT + EXACT)
        previous = out
    np.testing.assert_allclose(out, target, atol=EXACT)  # 10 N·m at 100 N·m/s: reached after 0.1 s
    assert status.rate_limited == ()
    out, status = layer.filter(200 * DT, -target, *q_mid)
    np.testing.assert_allclose(np.abs(out - target), np.minimum(rate * DT, 2 * np.abs(target)), atol=EXACT)
    assert "left_s0" in status.rate_limited and "left_e1" not in status.rate_limited
    out, _ = layer.filter(0.1, -target, *q_mid)  # the clock jumped back: no change at all
    assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= layer.effort_limit)


@pytest.mark.parametrize("output", ["baxter", "ros2_control"])
def test_nan_and_inf_never_pass(model, q_mid, output):
    layer = _fast_layer(model, output=output, hold="fixed",
                        hold_command=[0.0, 1.0, 0, 0, 0, 0, 0] if output != "baxter" else None)
    q, qd = q_mid
    _engaged(layer, q, qd, np.ones(7))
    bad_tau = np.ones(7)
    bad_tau[3] = np.nan
    out, status = layer.filter(2 * DT, bad_tau, q, qd)
    assert not status.active and status.reason == "bad_command" and status.faults == 1
    if output == "baxter":
        assert out is None and not status.publish
    else:
        np.testing.assert_array_equal(out, [0.0, 1.0, 0, 0, 0, 0, 0])
        assert status.publish
    bad_q = q.copy()
    bad_q[0] = np.inf
    out, status = layer.filter(3 * DT, np.ones(7), bad_q, qd)
    assert status.reason == "bad_state" and status.faults == 2
    out, status = layer.filter(4 * DT, np.ones(6), q, qd)
    assert status.reason == "bad_command" and status.faults == 3
    out, status = layer.filter(5 * DT, None, q, qd)
    assert status.reason == "no_command"
    out, status = layer.filter(6 * DT, np.ones(7), q, qd)
    assert status.active and np.all(np.isfinite(out))


def test_fuzzed_inputs_only_ever_give_safe_outputs(model):
    rng = np.random.default_rng(0)
    specials = np.array([np.nan, np.inf, -np.inf, 1e308, -1e308, 0.0])
    for output in ("baxter", "ros2_control"):
        layer = SafetyLayer(model, SafetyConfig(output=output, torque_rate_limit=500.0))
        t = 0.0
        for _ in range(3000):
            t += rng.choice([1e-3, 5e-3, 0.3, -0.05])
            tau, q, qd = (rng.normal(0, 200, 7) for _ in range(3))
            for x in (tau, q, qd):
                mask = rng.random(7) < 0.02
                x[mask] = rng.choice(specials, mask.sum())
            out, status = layer.filter(t, tau, q, qd, state_time=t - rng.choice([0.0, 0.01, 1.0]))
            if out is None:
                assert output == "baxter" and not status.publish
                continue
            assert out.shape == (7,) and out.dtype == np.float64
            assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= layer.effort_limit + EXACT)


def test_joint_limit_zone(model):
    margin, stiffness, damping = 0.1, 50.0, 5.0
    layer = _fast_layer(model, limit_margin=margin, limit_stiffness=stiffness, limit_damping=damping)
    lower = model.lower.numpy()
    q = 0.5 * (model.lower + model.upper).numpy()
    qd = np.zeros(7)
    tau = np.full(7, -4.0)  # every joint driven towards its lower limit
    q[1] = lower[1] + 0.5 * margin  # s1 half-way into the zone
    q[2] = lower[2]  # e0 exactly at its limit
    q[3] = lower[3] - 0.02  # e1 past its limit, moving further into it
    qd[3] = -0.3
    out, status = _engaged(layer, q, qd, tau)
    np.testing.assert_allclose(out[1], -4.0 * 0.5 + stiffness * 0.5 * margin, atol=EXACT)
    np.testing.assert_allclose(out[2], stiffness * margin, atol=EXACT)  # push into the limit fully removed
    np.testing.assert_allclose(out[3], stiffness * (margin + 0.02) + damping * 0.3, atol=EXACT)
    np.testing.assert_allclose(out[[0, 4, 5, 6]], -4.0, atol=EXACT)  # far from limits: untouched
    assert set(status.near_limit) == {"left_s1", "left_e0", "left_e1"}
    # Torque away from the limit passes unchanged (apart from the restoring push).
    out, _ = layer.filter(2 * DT, np.full(7, 4.0), q, np.zeros(7))
    np.testing.assert_allclose(out[2], 4.0 + stiffness * margin, atol=EXACT)


def test_baxter_watchdog(model, q_mid):
    q, qd = q_mid
    tau = np.full(7, 2.0)
    layer = SafetyLayer(model, SafetyConfig(output="baxter", torque_rate_limit=1000.0, state_timeout=0.05))
    out, status = layer.filter(0.0, tau, None, None)
    assert out is None and status.reason == "no_state" and not status.publish
    out, status = layer.filter(0.0, tau, q, qd)
    assert status.engaged and np.all(out == 0.0)  # the robot enters torque mode at zero torque
    for k in range(1, 10):
        out, status = layer.filter(k * DT, tau, q, qd, state_time=k * DT - 0.01)
        assert not status.late
    np.testing.assert_allclose(out, 2.0)
    out, status = layer.filter(0.02, tau, q, qd, state_time=0.02 - 0.06)  # joint states stopped
    assert out is None and status.reason == "stale_state"
    # Back within 0.2 s: the robot still applies the last command, continue from it.
    out, status = layer.filter(0.15, tau * 2, q, qd)
    assert not status.engaged and status.late  # 130 ms without a command exceeds 100 Hz
    np.testing.assert_allclose(out, 4.0)  # 2 N·m more in 0.141 s at 1000 N·m/s
    # Gone for longer than 0.2 s: torque mode was left; re-engage from zero.
    layer.filter(0.16, None, q, qd)
    out, status = layer.filter(0.15 + BAXTER_TIMEOUT + 0.01, tau, q, qd)
    assert status.engaged and np.all(out == 0.0)
    out, status = layer.stop(0.5)
    assert out is None and status.reason == "stopped"


def test_effort_controller_watchdog_holds(model, q_mid):
    q, qd = q_mid
    hold = np.array([0.0, 3.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", hold="fixed", hold_command=hold, torque_rate_limit=100.0))
    out, status = layer.filter(0.0, np.zeros(7), None, None)
    np.testing.assert_array_equal(out, hold)
    assert status.publish and not status.active and status.reason == "no_state"
    out, status = layer.filter(0.001, np.zeros(7), q, qd)
    np.testing.assert_allclose(out, hold - np.minimum(hold, 0.1))  # ramps from what the controller applies
    out, _ = layer.filter(0.002, np.zeros(7), q, qd)
    np.testing.assert_allclose(out, hold - np.minimum(hold, 0.2))
    out, status = layer.filter(1.0, np.zeros(7), q, qd, state_time=0.5)
    np.testing.assert_array_equal(out, hold)
    assert status.reason == "stale_state" and not status.late  # no rate requirement for ros2_control
    out, status = layer.stop(2.0)
    np.testing.assert_array_equal(out, hold)


def test_engagement_ramps_from_the_holding_torque_not_zero():
    """Baxter: starting torque mode while its gravity compensation is suppressed must not drop the arm."""
    model = load_robot_config(BAXTER_LEFT).build_model()
    safety = SafetyLayer(model, SafetyConfig(output="baxter"))
    q, qd = np.full(7, 0.2), np.zeros(7)
    hold = np.linspace(-10.0, 10.0, 7)  # within every effort limit
    assert safety.needs_engagement(0.0)
    first, status = safety.filter(0.0, hold + 1.0, q, qd, engage_torque=hold)
    assert status.engaged
    np.testing.assert_allclose(first, hold)  # continuous with what the motors applied
    second, status = safety.filter(0.01, hold + 1.0, q, qd)
    assert not status.engaged and not safety.needs_engagement(0.01)
    np.testing.assert_allclose(second, hold + 1.0)
    # A non-finite engagement torque is not trusted: ramp from what the hardware applies.
    fresh = SafetyLayer(model, SafetyConfig(output="baxter"))
    command, _ = fresh.filter(0.0, hold, q, qd, engage_torque=np.full(7, np.nan))
    np.testing.assert_allclose(command, 0.0)
    assert fresh.faults == 1


def test_timer_jitter_is_not_late():
    model = load_robot_config(BAXTER_LEFT).build_model()
    safety = SafetyLayer(model, SafetyConfig(output="baxter"))
    q = np.zeros(7)
    safety.filter(0.0, q, q, q)
    assert not safety.filter(0.0102, q, q, q)[1].late  # 0.2 ms of jitter at 100 Hz
    assert safety.filter(0.0302, q, q, q)[1].late  # a missed cycle


# --- issue 16: the zone bounds the final command, implausible states, clock jumps, stop ramps -----


def test_the_limit_zone_fades_the_clipped_command_not_the_request(model, q_mid):
    """At 0.01 rad from s0's upper limit a +1000 N·m request must not go out as full effort into the limit."""
    margin, stiffness = 0.1, 50.0
    layer = _fast_layer(model, output="ros2_control", limit_margin=margin, limit_stiffness=stiffness)
    q, qd = q_mid
    q = q.copy()
    q[0] = model.upper[0].item() - 0.01
    tau = np.zeros(7)
    tau[0] = 1000.0
    out, status = _engaged(layer, q, qd, tau)
    fade = 0.01 / margin
    expected = URDF_EFFORT[0] * fade - stiffness * (margin - 0.01)  # clip, fade, then the spring pushes back
    np.testing.assert_allclose(out[0], expected, atol=EXACT)
    assert out[0] <= URDF_EFFORT[0] * fade and "left_s0" in status.near_limit and "left_s0" in status.clipped
    q[0] = model.upper[0].item()  # at the limit: no push into it at all, only the restoring spring
    out, _ = layer.filter(2 * DT, tau, q, qd)
    np.testing.assert_allclose(out[0], -stiffness * margin, atol=EXACT)


def test_the_rate_limit_never_holds_a_push_into_a_limit(model, q_mid):
    """Rate limit and zone conflict when a joint enters the zone fast: the zone wins, the push is cut at once."""
    rate = 200.0
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=rate))
    q, qd = q_mid
    tau = np.full(7, 40.0)
    layer.filter(0.0, tau, q, qd)
    for k in range(1, 400):
        out, _ = layer.filter(k * DT, tau, q, qd)
    np.testing.assert_allclose(out[[0, 2, 3]], 40.0)  # ramped in: 40 N·m towards every upper limit
    at_limit = q.copy()
    at_limit[0] = model.upper[0].item()  # the joint reaches its limit between two cycles
    out, status = layer.filter(400 * DT, tau, at_limit, qd)
    assert out[0] <= 0.0 and "left_s0" in status.near_limit  # no push into the limit, although 40 -> 0 exceeds 0.2 N·m
    assert abs(out[2] - 40.0) <= EXACT  # other joints unchanged
    out2, _ = layer.filter(401 * DT, tau, at_limit, qd)
    assert abs(out2[0] - out[0]) <= rate * DT + EXACT  # the restoring push itself ramps in


@pytest.mark.parametrize("field, joint, value, match", [
    ("q", 0, 1e6, r"left_s0 position 1e\+06 rad is more than 0.25 rad outside its limits"),
    ("q", 3, -0.5, r"left_e1 position -0.5 rad is more than 0.25 rad outside its limits \[-0.05, 2.618\]"),
    ("qd", 4, 1e3, r"left_w0 speed 1000 rad/s exceeds 4 x its velocity limit 4"),
    ("qd", 1, -7.0, r"left_s1 speed 7 rad/s exceeds 4 x its velocity limit 1.5"),
])
def test_implausible_joint_states_are_sensor_faults_not_commands(model, q_mid, field, joint, value, match):
    import re

    layer = _fast_layer(model)
    q, qd = (x.copy() for x in q_mid)
    _engaged(layer, q, qd, np.ones(7))
    (q if field == "q" else qd)[joint] = value
    out, status = layer.filter(2 * DT, np.ones(7), q, qd)
    assert out is None and status.reason == "implausible_state" and status.faults == 1
    assert re.search(match, status.detail), status.detail
    out, status = layer.filter(3 * DT, np.ones(7), *q_mid)
    assert status.active  # the next plausible state is commanded again


def test_a_state_from_the_future_is_not_fresh(model, q_mid):
    layer = _fast_layer(model)
    out, status = layer.filter(1.0, np.ones(7), *q_mid, state_time=101.0)
    assert out is None and status.reason == "stale_state"


@pytest.mark.parametrize("output", ["baxter", "ros2_control"])
def test_clock_jumping_back_counts_as_no_time_and_never_locks_out(model, q_mid, output):
    rate = 100.0
    layer = SafetyLayer(model, SafetyConfig(output=output, torque_rate_limit=rate))
    q, qd = q_mid
    for k in range(200):
        out, _ = layer.filter(10.0 + k * DT, np.full(7, 5.0), q, qd, state_time=10.0 + k * DT)
    np.testing.assert_allclose(out, 5.0)
    out, status = layer.filter(5.0, np.full(7, -5.0), q, qd, state_time=5.0)  # /clock jumped back 5 s
    assert status.active and status.clock_jumped and not status.engaged and not status.late
    np.testing.assert_allclose(out, 5.0)  # no time elapsed: no change
    for k in range(1, 101):
        out, status = layer.filter(5.0 + k * DT, np.full(7, -5.0), q, qd, state_time=5.0 + k * DT)
        assert status.active and not status.clock_jumped
    np.testing.assert_allclose(out, 5.0 - rate * 100 * DT)  # ramps at the rate limit from the jump on
    assert layer.clock_jumps == 1


def test_clock_jumping_forward_does_not_release_the_rate_limit(model, q_mid):
    from diffsim_ros.control.safety import MAX_RATE_INTERVAL

    rate = 100.0
    effort = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=rate))
    q, qd = q_mid
    effort.filter(0.0, np.zeros(7), q, qd)
    out, status = effort.filter(100.0, np.full(7, 40.0), q, qd)  # 100 s later (clock jump or a paused process)
    np.testing.assert_allclose(out, rate * MAX_RATE_INTERVAL)  # not a 40 N·m step
    assert "left_s0" in status.rate_limited
    baxter = SafetyLayer(model, SafetyConfig(output="baxter", torque_rate_limit=rate))
    baxter.filter(0.0, np.full(7, 3.0), q, qd)
    out, status = baxter.filter(100.0, np.full(7, 40.0), q, qd, engage_torque=np.full(7, 2.0))
    assert status.engaged  # the robot has left torque mode long ago: engage again
    np.testing.assert_allclose(out, 2.0)


def test_effort_controller_stop_ramps_to_the_hold_command_and_shutdown_holds_at_once(model, q_mid):
    rate = 100.0
    hold = np.array([0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", hold="fixed", hold_command=hold, torque_rate_limit=rate))
    q, qd = q_mid
    for k in range(200):
        out, _ = layer.filter(k * DT, np.full(7, 10.0), q, qd)
    np.testing.assert_allclose(out, 10.0)
    previous = out
    for k in range(200, 400):
        out, status = layer.filter(k * DT, np.full(7, 10.0), q, qd, state_time=0.0)  # joint states stopped
        assert status.reason == "stale_state" and status.publish and not status.active
        assert np.all(np.abs(out - previous) <= rate * DT + EXACT)
        previous = out
    np.testing.assert_allclose(out, hold)  # 10 N·m at 100 N·m/s: there after 0.1 s
    out, status = layer.filter(0.4, np.full(7, 10.0), q, qd)  # active again: ramps from the hold command
    assert status.active and np.all(np.abs(out - hold) <= rate * DT + EXACT)
    out, status = layer.stop(0.401)
    np.testing.assert_array_equal(out, hold)  # shutdown: the last command the controller keeps
    assert status.reason == "stopped"


def test_hold_command_is_bounded_by_the_zone_of_the_last_valid_state(model, q_mid):
    hold = np.array([20.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # pushes s0 towards its upper limit
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", hold="fixed", hold_command=hold))
    q, qd = q_mid
    q = q.copy()
    q[0] = model.upper[0].item() - 0.02
    layer.filter(0.0, np.zeros(7), q, qd)
    bad = q.copy()
    bad[2] = np.nan
    for k in range(1, 200):  # ramping to the hold command while the state is bad: bounded by the last valid one
        out, status = layer.filter(k * DT, np.zeros(7), bad, qd)
        assert status.reason == "bad_state" and out[0] <= URDF_EFFORT[0] * 0.2 + EXACT
    out, status = layer.stop(0.2)
    assert status.publish and out[0] == pytest.approx(URDF_EFFORT[0] * 0.2, abs=EXACT)


def test_non_finite_time_stops_without_a_traceback(model, q_mid):
    for output in ("baxter", "ros2_control"):
        layer = _fast_layer(model, output=output)
        _engaged(layer, *q_mid, np.ones(7))
        out, status = layer.filter(float("nan"), np.ones(7), *q_mid)
        assert status.reason == "bad_time" and not status.active
        assert out is None if output == "baxter" else np.all(np.isfinite(out))
        out, status = layer.filter(3 * DT, np.ones(7), *q_mid)
        assert status.active
