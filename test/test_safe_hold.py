"""The safe hold on ros2_control (issue 47, item 3): when the controller stops commanding (stale
joint states, a bad command, deactivation), a JointGroupEffortController keeps applying the last
command forever, so the safety layer hands it the model's holding torque g(q) - tau_spring(q)
at the last valid state, ramped in at the torque-rate limit and faded out to zero effort after
``safety.hold_fade_after``. ``safety.hold: fixed`` keeps the old fixed hold (zero effort by
default).

The ramp and the fade on the safety layer alone; then the real nodes on the embedded runtime
with MuJoCo as the arm behind an emulated effort controller: a 0.5 s stale-state episode and a
5 s deactivation leave the arm where it was, and the same episodes under the zero-effort hold let
it fall (so the tolerance can fail).
"""

import math

import numpy as np
import pytest

from diffsim_ros.control import ControlError, ControlLoop, GravityCompensation, SafetyConfig, SafetyLayer, \
    holding_torques
from diffsim_ros.control.safety import HOLD_FADE_TIME, MAX_RATE_INTERVAL
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.io.ros_messages import NS_PER_S
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY
from diffsim_ros.model import load_robot_config
from diffsim_ros.nodes.controller_node import ControllerNode
from diffsim_ros.nodes.sim_robot_node import SimRobotNode
from diffsim_ros.runtime import COMMAND_QOS
from diffsim_ros.runtime.embedded import DEFAULT_START_NS, EmbeddedRuntime
from oracles import BAXTER_LEFT, REPO

EXACT = 1e-12  # [N·m] arithmetic only
DT = 0.005  # [s] control period (200 Hz, as the params file)
RATE = 100.0  # [N·m/s] torque-rate limit of the unit tests: ramps take visible time
Q = np.array([0.0, -0.55, 0.0, 1.3, 0.0, 0.8, 0.0])  # [rad] the sim's start pose (s1 and e1 loaded)
PARAMS = REPO / "config" / "baxter_sim.params.yaml"
HOLD_TOLERANCE = 0.05  # [rad] largest motion of any joint over a stale episode or a deactivation
FALLEN = 0.5  # [rad] the zero-effort hold lets the arm move at least this far in the same episodes
STALE_EPISODE = 0.5  # [s] joint states dropped
DEACTIVATION = 5.0  # [s] controller inactive
SETTLE = 2.0  # [s] of commanding before an episode (ramp-in, the impedance hold settles)
RECOVERY = 0.5  # [s] after the episode, commanding again, still inside the episode's bound
SAMPLE = 0.01  # [s] between samples of the true joint positions


@pytest.fixture(scope="module")
def model():
    return load_robot_config(BAXTER_LEFT).build_model()


def _holding(model, q):
    return holding_torques(FastDynamics.from_model(model), q)


def _commanding(layer, seconds, tau=np.zeros(7), q=Q):
    """Active cycles for ``seconds`` from t = 0 (ramping to ``tau``); returns the last time [s]."""
    t = 0.0
    for k in range(int(round(seconds / DT)) + 1):
        t = k * DT
        out, status = layer.filter(t, tau, q, np.zeros(7), state_time=t)
        assert status.active
    return t, out


def _stale(layer, start, seconds):
    """Cycles on a stale state (1 s old) after ``start`` [s]: the commands (k, 7) and statuses.

    The hold starts with the first of them, at ``start + DT``.
    """
    outs, statuses = [], []
    for k in range(1, int(round(seconds / DT)) + 1):
        out, status = layer.filter(start + k * DT, np.zeros(7), Q, np.zeros(7), state_time=start - 1.0)
        outs.append(out)
        statuses.append(status)
    return np.array(outs), statuses


# ---------------------------------------------------------------------- the safety layer
def test_gravity_hold_ramps_from_the_last_command_to_the_holding_torque_at_the_rate_limit(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=RATE))
    t, last = _commanding(layer, 0.5, tau=np.full(7, 2.0))
    np.testing.assert_allclose(last, 2.0)
    outs, statuses = _stale(layer, t, 0.5)
    hold = _holding(model, Q)
    assert np.abs(hold).max() > 5.0  # the pose loads s1 and e1: zero effort would drop the arm
    steps = np.abs(np.diff(np.vstack([last, outs]), axis=0))
    assert np.all(steps <= RATE * DT + EXACT)  # from the last command, at the rate limit
    assert steps[0].max() == pytest.approx(RATE * DT)  # as fast as allowed
    np.testing.assert_allclose(outs[-1], hold, atol=EXACT)  # 12 N·m at 100 N·m/s: there after 0.12 s
    assert all(s.reason == "stale_state" and s.publish and not s.active and s.hold == "gravity" for s in statuses)


def test_gravity_hold_fades_to_zero_after_hold_fade_after(model):
    fade_after = 1.0
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=1e6, hold_fade_after=fade_after))
    t, _ = _commanding(layer, 0.1)
    outs, statuses = _stale(layer, t, fade_after + HOLD_FADE_TIME + 1.0)
    elapsed = DT * np.arange(len(outs))  # since the hold started
    hold = _holding(model, Q)
    expected = np.clip(1.0 - (elapsed - fade_after) / HOLD_FADE_TIME, 0.0, 1.0)[:, None] * hold
    np.testing.assert_allclose(outs, expected, atol=1e-9)  # full, then linearly down to zero
    phases = [s.hold for s in statuses]
    assert phases[0] == "gravity" and "fading" in phases and phases[-1] == "zero"
    np.testing.assert_array_equal(outs[-1], 0.0)  # a long outage ends at zero effort
    # The rate limit applies to the fade too.
    slow = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=1.0, hold_fade_after=0.0))
    out, _ = slow.filter(0.0, hold, Q, np.zeros(7), engage_torque=hold)  # engaged holding the arm
    np.testing.assert_array_equal(out, hold)
    outs, _ = _stale(slow, 0.0, 1.0)  # the fade asks for 5 N·m/s on s1
    assert np.all(np.abs(np.diff(np.vstack([hold, outs]), axis=0)) <= 1.0 * DT + EXACT)
    assert outs[-1][1] == pytest.approx(hold[1] - 1.0 * (1.0 - DT))  # 1 N·m/s from the fade's first step on


def test_a_controller_command_ends_the_hold_and_the_next_one_starts_its_fade_afresh(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=1e6, hold_fade_after=0.5))
    t, _ = _commanding(layer, 0.1)
    outs, statuses = _stale(layer, t, 0.6)
    assert statuses[-1].hold == "fading"
    t += 0.6
    out, status = layer.filter(t + DT, np.zeros(7), Q, np.zeros(7))
    assert status.active and status.hold == ""
    outs, statuses = _stale(layer, t + DT, 0.5)
    assert statuses[-1].hold == "gravity"
    np.testing.assert_allclose(outs[-1], _holding(model, Q), atol=EXACT)


def test_a_clock_jumping_back_does_not_restart_or_advance_the_fade(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=1e6, hold_fade_after=1.0))
    t, _ = _commanding(layer, 0.1)
    _stale(layer, t, 1.5)  # 1.5 s of hold: fading, ~0.5 s into the fade
    before, status = layer.filter(t + 1.5, None, None, None)
    after, jumped = layer.filter(t + 1.5 - 100.0, None, None, None)  # /clock reset
    assert jumped.clock_jumped and status.hold == jumped.hold == "fading"
    np.testing.assert_allclose(after, before, atol=EXACT)  # no time elapsed: neither back to full nor faster
    later, _ = layer.filter(t + 1.5 - 100.0 + 0.5, None, None, None)
    fade = 1.0 - (1.5 - DT + 0.5 - 1.0) / HOLD_FADE_TIME  # held 1.5 - DT s before the jump, 0.5 s after
    np.testing.assert_allclose(later, fade * _holding(model, Q), atol=1e-9)


def test_an_inactive_node_holds_the_arm_as_it_is_and_falls_silent_once_faded(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=1e6, hold_fade_after=0.5))
    t, _ = _commanding(layer, 0.1)
    moved = Q + np.array([0.0, 0.1, 0.0, -0.2, 0.0, 0.0, 0.0])
    out, status = layer.hold(t + DT, moved, np.zeros(7), state_time=t + DT)  # fresh states: the arm as it is
    assert status.reason == "inactive" and status.publish and layer.holding
    np.testing.assert_allclose(out, _holding(model, moved), atol=EXACT)
    out, _ = layer.hold(t + 2 * DT, Q, np.zeros(7), state_time=t - 1.0)  # a stale state is not held
    np.testing.assert_allclose(out, _holding(model, moved), atol=EXACT)
    k = 2
    while layer.holding:
        k += 1
        out, status = layer.hold(t + k * DT, moved, np.zeros(7), state_time=t + k * DT)
        assert k * DT < 0.5 + HOLD_FADE_TIME + 2 * DT
    assert k * DT > 0.5 + HOLD_FADE_TIME - 2 * DT and status.hold == "zero"
    np.testing.assert_array_equal(out, 0.0)  # the last command the effort controller keeps


def test_shutdown_holds_at_once_and_the_fixed_hold_keeps_its_old_behaviour(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=RATE))
    t, _ = _commanding(layer, 0.1, tau=np.full(7, 2.0))
    out, status = layer.stop(t + DT)
    np.testing.assert_allclose(out, _holding(model, Q), atol=EXACT)  # the last command the controller keeps
    assert status.reason == "stopped" and status.hold == "gravity"
    fixed = SafetyLayer(model, SafetyConfig(output="ros2_control", hold="fixed", torque_rate_limit=RATE))
    t, _ = _commanding(fixed, 0.1, tau=np.full(7, 2.0))
    outs, statuses = _stale(fixed, t, 0.1)
    np.testing.assert_array_equal(outs[-1], 0.0)  # zero effort: the arm is not held
    assert statuses[-1].hold == "fixed"
    out, status = fixed.hold(t + 0.2)
    np.testing.assert_array_equal(out, 0.0)
    assert status.reason == "inactive" and not fixed.holding  # published at once, nothing after
    baxter = SafetyLayer(model, SafetyConfig(output="baxter"))
    _commanding(baxter, 0.1)
    out, status = baxter.hold(0.2, Q, np.zeros(7))
    assert out is None and not status.publish and not baxter.holding  # Baxter holds in position mode


def test_the_hold_follows_calibration_updates(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=1e6))
    controller = GravityCompensation(model)
    loop = ControlLoop(controller, layer, model)
    for k in range(20):
        loop.step(k * DT, Q, np.zeros(7))
    decision = loop.apply_estimates({"payload.mass": 1.3, "payload.com": [0.02, -0.01, 0.06]})
    assert decision.applied
    out, status = layer.filter(20 * DT, None, Q, np.zeros(7))
    assert status.reason == "no_command"
    np.testing.assert_allclose(out, _holding(loop.model, Q), atol=EXACT)
    assert np.abs(_holding(loop.model, Q) - _holding(model, Q)).max() > 1.0  # the payload is held too
    retuned = SafetyLayer(loop.model, SafetyConfig(output="ros2_control", torque_rate_limit=1e6)).continue_from(layer)
    out, status = retuned.filter(21 * DT, None, None, None)  # a retune keeps the state held and the hold's time
    np.testing.assert_allclose(out, _holding(loop.model, Q), atol=EXACT)


@pytest.mark.parametrize("config, match", [
    (dict(hold="limp"), r"safety hold must be one of \('gravity', 'fixed'\), got 'limp'"),
    (dict(hold_command=[1.0] * 7), "is the torque of hold 'fixed'; set safety hold to 'fixed'"),
    (dict(hold_fade_after=-1.0), "hold_fade_after must be a finite number >= 0"),
    (dict(hold_fade_after=math.nan), "hold_fade_after must be a finite number >= 0"),
    (dict(hold_fade_after=math.inf), "hold_fade_after must be a finite number >= 0"),
])
def test_bad_hold_settings_are_refused(model, config, match):
    with pytest.raises(ControlError, match=match):
        SafetyLayer(model, SafetyConfig(output="ros2_control", **config))


def test_the_rate_credit_bounds_the_ramp_after_a_pause(model):
    layer = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=RATE))
    t, last = _commanding(layer, 0.1)
    out, _ = layer.filter(t + 100.0, None, None, None)  # a paused process: one cycle 100 s later
    assert np.abs(out - last).max() <= RATE * MAX_RATE_INTERVAL + EXACT


# ---------------------------------------------------------------------- the nodes on MuJoCo
def seconds(now_ns):
    return (now_ns - DEFAULT_START_NS) / NS_PER_S


def arm_graph(runtime, hold, **controller):
    """MuJoCo arm behind an emulated JointGroupEffortController + the impedance controller holding
    its start (params file), on ros2_control. The plant's hidden payload and spring are those
    of the model: the hold is as good as the model, and calibration is another test's subject."""
    sim = runtime.add_node(SimRobotNode, "sim_robot", parameter_overrides={
        "output": "ros2_control", "camera_rate_hz": 0.0, "truth.payload_mass": 0.0, "truth.spring_joints": [],
        "truth.spring_stiffness": [], "truth.spring_offset": []})
    node = runtime.add_node(ControllerNode, "controller", parameter_overrides={
        "output": "ros2_control", "follow_estimates": False, "safety.hold": hold, **controller})
    return sim, node


def largest_motion(runtime, sim, seconds_, at=None):
    """Largest |q - q_start| [rad] per joint of the true arm over ``seconds_``; ``at`` (time [s]
    from now -> callback) runs callbacks on the way."""
    start = sim.plant.true_state()[0].copy()
    motion = np.zeros(7)
    for k in range(int(round(seconds_ / SAMPLE))):
        if at and k in at:
            at[k]()
        runtime.spin_for(SAMPLE)
        motion = np.maximum(motion, np.abs(sim.plant.true_state()[0] - start))
    return motion


@pytest.mark.parametrize("hold", ["gravity", "fixed"])
def test_a_stale_state_episode_leaves_the_arm_where_it_was(hold):
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller = arm_graph(runtime, hold)
        runtime.inject_fault("/robot/joint_states", lambda msg, now_ns: [] if SETTLE <= seconds(now_ns) < SETTLE + STALE_EPISODE
                             else [(0.0, msg)])
        runtime.spin_for(SETTLE)
        motion = largest_motion(runtime, sim, STALE_EPISODE + RECOVERY)
        assert controller.status.active  # commanding again after the episode
    stale = [m for m in (r.message for r in runtime.log_records) if "joint states stale" in m]
    assert len(stale) == 1
    if hold == "gravity":
        assert motion.max() < HOLD_TOLERANCE, motion
    else:  # zero effort: the loaded shoulder and elbow fall
        assert motion.max() > FALLEN, motion


@pytest.mark.parametrize("hold", ["gravity", "fixed"])
def test_a_deactivation_leaves_the_arm_where_it_was(hold):
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller = arm_graph(runtime, hold)
        commands = []
        monitor = runtime.create_node("monitor")
        monitor.create_subscription(FLOAT64_MULTI_ARRAY, "/effort_controller/commands",
                                    lambda msg: commands.append(seconds(runtime.now_ns())), COMMAND_QOS)
        runtime.spin_for(SETTLE)
        steps = int(round(DEACTIVATION / SAMPLE))
        motion = largest_motion(runtime, sim, DEACTIVATION + RECOVERY,
                                at={0: controller.on_deactivate, steps: controller.on_activate})
        assert controller.active and controller.status.active
    commands = np.array(commands)
    inactive = commands[(commands > SETTLE + 0.1) & (commands < SETTLE + DEACTIVATION - 0.1)]
    if hold == "gravity":
        assert motion.max() < HOLD_TOLERANCE, motion
        assert len(inactive) > 0.9 * DEACTIVATION / DT  # the hold follows the arm every cycle
    else:
        assert motion.max() > FALLEN, motion
        assert len(inactive) == 0  # the fixed hold: once, at once


def test_a_long_deactivation_fades_the_hold_to_zero_and_then_publishes_nothing():
    fade_after = 0.5
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim, controller = arm_graph(runtime, "gravity", **{"safety.hold_fade_after": fade_after})
        commands = []
        monitor = runtime.create_node("monitor")
        monitor.create_subscription(FLOAT64_MULTI_ARRAY, "/effort_controller/commands",
                                    lambda msg: commands.append((seconds(runtime.now_ns()), np.array(msg.data))),
                                    COMMAND_QOS)
        runtime.spin_for(SETTLE)
        assert "safety hold must be one of" in controller.handle.set_parameters({"safety.hold": "limp"})
        controller.on_deactivate()
        runtime.spin_for(fade_after + HOLD_FADE_TIME + 0.5)
        assert not controller.safety.holding
    times = np.array([t for t, _ in commands])
    values = np.array([c for _, c in commands])
    assert np.all(values[-1] == 0.0)  # the effort controller keeps zero effort: a known state
    assert times[-1] < SETTLE + fade_after + HOLD_FADE_TIME + 2 * DT  # silent after the fade
    assert np.abs(values[times > SETTLE]).max() > 5.0  # held before the fade
    warnings = [r.message for r in runtime.log_records if r.level == "warning"]
    assert warnings.count(f"no controller command for {fade_after:g} s: the gravity hold fades to zero effort "
                          f"over {HOLD_FADE_TIME:g} s") == 1
