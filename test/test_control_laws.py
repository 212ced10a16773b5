"""Gravity compensation and impedance control laws against Pinocchio; references; bad input."""

import numpy as np
import pytest

from diffsim_ros.control import (
    ControlError,
    GravityCompensation,
    JointImpedanceController,
    MinimumJerkMove,
    SetPoint,
    joint_inertias,
)
from diffsim_ros.control.impedance import DAMPING_MARGIN, PERIOD_CHANGE, stable_damping
from diffsim_ros.control.loop import ControlLoop, StatePeriod
from diffsim_ros.control.safety import SafetyConfig, SafetyLayer
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.model import load_robot_config
from diffsim_ros.testbed.mujoco_plant import MujocoPlant
from diffsim_ros.model.poses import random_poses
from oracles import BAXTER_LEFT, BAXTER_URDF, PinocchioOracle

PIN_TOL = 1e-9  # [N·m], [kg·m²]: same law, independent dynamics
FD_TOL = 1e-6  # [rad/s, rad/s²] finite differences of the reference
POSES = 8
EIG_TOL = 1e-12  # relative: the damping limit's eigenvalue against its margin
# The demo's impedance gains and Baxter's 100 Hz joint states (config/baxter_sim.params.yaml).
DEMO_STIFFNESS = np.array([80.0, 80.0, 30.0, 30.0, 10.0, 10.0, 5.0])  # [N·m/rad]
DEMO_DAMPING = np.array([30.0, 30.0, 8.0, 10.0, 0.1, 0.1, 0.05])  # [N·m·s/rad]
STATE_PERIOD = 0.01  # [s]
# Near where the nominal-model gravity hold of the demo leaves the arm (s1 and e1 near their
# limits; e1 just inside its 2.618 rad): s0's effective inertia is 0.1 kg·m² there, 0.8 at home.
FOLDED = np.array([-0.06, -2.04, 0.18, 2.55, 0.1, 0.96, 0.02])  # [rad]
RUNAWAY_SPEED = 1.0  # [rad/s] from a 0.01 rad/s nudge: the loop amplifies it
STABLE_SPEED = 0.05  # [rad/s]


@pytest.fixture(scope="module")
def setup():
    model = load_robot_config(BAXTER_LEFT).build_model()
    oracle = PinocchioOracle(model, BAXTER_URDF)
    # The MuJoCo plant's spring law is an independent implementation of the same formula.
    springs = MujocoPlant(model, BAXTER_URDF, noise=None)
    rng = np.random.default_rng(3)
    states = [(q, rng.normal(0, 0.5, 7), rng.normal(0, 2.0, 7)) for q in random_poses(model, POSES, rng)]
    return model, oracle, springs, states


def test_gravity_compensation_matches_pinocchio(setup):
    model, oracle, springs, states = setup
    pin, pm, pd = oracle.pin, oracle.model, oracle.data
    controller = GravityCompensation(model)
    half = GravityCompensation(model, scale=0.5)
    for q, qd, _ in states:
        expected = oracle.sel(pin.computeGeneralizedGravity(pm, pd, oracle.q(q))) - springs.spring_torques(q)
        np.testing.assert_allclose(controller.compute(0.0, q, qd), expected, atol=PIN_TOL, rtol=0)
        np.testing.assert_allclose(half.compute(0.0, q, qd), 0.5 * expected, atol=PIN_TOL, rtol=0)


def test_impedance_law_matches_pinocchio(setup):
    model, oracle, springs, states = setup
    pin, pm, pd = oracle.pin, oracle.model, oracle.data
    stiffness = np.array([80.0, 90.0, 40.0, 40.0, 10.0, 10.0, 5.0])
    damping = {"left_s0": 8.0, "left_w2": 0.3}
    d = np.array([8.0, 0, 0, 0, 0, 0, 0.3])
    for q, qd, qdd in states:
        goal = q + 0.1

        def reference(t, goal=goal, qdd=qdd):
            return goal, np.full(7, 0.2), qdd

        feedback = stiffness * (goal - q) + d * (0.2 - qd)
        model_term = oracle.sel(pin.rnea(pm, pd, oracle.q(q), oracle.v(qd), oracle.v(qdd))) - springs.spring_torques(q)
        gravity = oracle.sel(pin.computeGeneralizedGravity(pm, pd, oracle.q(q))) - springs.spring_torques(q)
        for term, scale, expected in (
            ("analytic", 0.6, feedback + 0.6 * model_term),
            ("gravity", 1.0, feedback + gravity),
            ("none", 1.0, feedback),
        ):
            controller = JointImpedanceController(model, stiffness, damping, reference, model_term=term, model_scale=scale)
            np.testing.assert_allclose(controller.compute(0.0, q, qd), expected, atol=PIN_TOL, rtol=0)


def test_joint_inertias_match_pinocchio(setup):
    model, oracle, _, states = setup
    fast = FastDynamics.from_model(model.with_payload(1.1, (0.01, 0.02, 0.05)))
    heavy = PinocchioOracle(model, BAXTER_URDF)
    pin = heavy.pin
    hand = heavy.model.frames[heavy.frame_id("left_hand")]
    # The payload as a point mass on the hand frame's parent joint.
    placement = hand.placement * pin.SE3(np.eye(3), np.array([0.01, 0.02, 0.05]))
    heavy.model.inertias[hand.parentJoint] += pin.Inertia.FromSphere(1.1, 0.0).se3Action(placement)
    data = heavy.model.createData()
    for q, _, _ in states:
        expected = np.diag(heavy.sel2(pin.crba(heavy.model, data, heavy.q(q))))
        np.testing.assert_allclose(joint_inertias(fast, q), expected, atol=PIN_TOL, rtol=0)


def test_mass_matrix_matches_pinocchio(setup):
    model, oracle, _, states = setup
    fast = FastDynamics.from_model(model)
    for q, _, _ in states:
        expected = oracle.sel2(oracle.pin.crba(oracle.model, oracle.data, oracle.q(q)))
        np.testing.assert_allclose(fast.mass_matrix(q), expected, atol=PIN_TOL, rtol=0)


def test_stable_damping_keeps_stable_gains_and_limits_the_rest(setup):
    model = setup[0]
    fast = FastDynamics.from_model(model)
    rng = np.random.default_rng(5)
    for q in [FOLDED, *random_poses(model, 6, rng)]:
        inverse = np.linalg.inv(fast.mass_matrix(q))
        damping = stable_damping(DEMO_DAMPING, inverse, STATE_PERIOD)
        assert np.all(damping <= DEMO_DAMPING) and np.all(damping >= 0)
        root = np.sqrt(damping)
        largest = STATE_PERIOD * np.linalg.eigvalsh(root[:, None] * inverse * root[None, :])[-1]
        assert largest <= DAMPING_MARGIN * (1 + EIG_TOL)
        small = 0.01 * DEMO_DAMPING  # stable everywhere: left as given
        np.testing.assert_array_equal(stable_damping(small, inverse, STATE_PERIOD), small)
    assert stable_damping(DEMO_DAMPING, np.linalg.inv(fast.mass_matrix(FOLDED)), STATE_PERIOD)[0] < 0.5 * DEMO_DAMPING[0]


def _hold_on_mujoco(model, state_period, period=STATE_PERIOD, through_loop=False, seconds=1.0):
    """Largest joint speed [rad/s] while impedance holds FOLDED on the MuJoCo arm, commands and
    joint states every ``period`` [s] (zero-order hold), from a 0.01 rad/s nudge of every joint;
    and the control loop's notice (None without the loop)."""
    plant = MujocoPlant(model, BAXTER_URDF, noise=None)
    plant.reset(FOLDED, np.full(7, 0.01))
    controller = JointImpedanceController(model, DEMO_STIFFNESS, DEMO_DAMPING, SetPoint(FOLDED), state_period=state_period)
    safety = SafetyLayer(model, SafetyConfig(output="ros2_control", torque_rate_limit=1e6))
    loop = ControlLoop(controller, safety, model) if through_loop else None
    fastest, steps = 0.0, int(round(period / plant.mj_model.opt.timestep))
    for k in range(int(round(seconds / period))):
        q, qd = plant.true_state()
        fastest = max(fastest, float(np.abs(qd).max()))
        if fastest > 10 * RUNAWAY_SPEED:
            break
        tau = controller.compute(k * period, q, qd) if loop is None else loop.step(k * period, q, qd, k * period)[0]
        assert tau is not None
        plant.step(tau, steps)
    return fastest, loop.notice if loop else None


def test_damping_limited_where_it_would_destabilize_the_arm(setup):
    # The demo's gains at the pose its gravity test leaves the arm in: with D as given the arm
    # ran away on MuJoCo (e0 at 54 rad/s); limited for 100 Hz states it holds.
    model = setup[0]
    assert _hold_on_mujoco(model, None)[0] > RUNAWAY_SPEED
    assert _hold_on_mujoco(model, STATE_PERIOD)[0] < STABLE_SPEED


def test_state_period_is_the_median_interval_between_new_states():
    rng = np.random.default_rng(2)
    meter = StatePeriod(min_intervals=3)
    times = np.cumsum(0.04 + rng.uniform(-0.004, 0.004, 60))  # 25 Hz with 4 ms of jitter
    assert [meter(t) for t in times[:3]] == [None, None, None]
    assert meter(times[3]) == pytest.approx(0.04, abs=0.004)
    for t in times[4:30]:
        assert meter(t) == meter(t)  # the same state seen by two cycles is one state
    meter(times[29] + 2.0)  # a dropout: not a period
    meter(times[29] - 5.0)  # a clock running backwards: not a period
    for t in times[30:] - 5.0 + 2.0:
        measured = meter(t)
    assert measured == pytest.approx(0.04, abs=0.002)
    bursts = StatePeriod()  # four states 0.1 ms apart every 40 ms: held 40 ms
    for t in (0.04 * np.arange(30)[:, None] + 1e-4 * np.arange(4)[None, :]).ravel():
        measured = bursts(t)
    assert measured == pytest.approx(0.04 - 3e-4)
    gap = StatePeriod()  # one 0.4 s pause among 10 ms states is not the period
    for t in np.concatenate([0.01 * np.arange(30), 0.69 + 0.01 * np.arange(20)]):
        measured = gap(t)
    assert measured == pytest.approx(0.01)


def test_observed_state_period_only_lengthens_the_configured_one(setup):
    model = setup[0]
    controller = JointImpedanceController(model, DEMO_STIFFNESS, DEMO_DAMPING, SetPoint(FOLDED), state_period=STATE_PERIOD)
    limited = controller.damping_at(FOLDED)
    assert not controller.observe_state_period(0.005)  # faster states: the configured period stays
    assert not controller.observe_state_period(STATE_PERIOD * (1 + 0.5 * PERIOD_CHANGE))  # jitter
    assert controller.observe_state_period(0.04) and controller.state_period == 0.04
    assert np.all(controller.damping_at(FOLDED) <= limited) and controller.damping_at(FOLDED)[0] < limited[0]
    assert controller.observe_state_period(0.01) and controller.state_period == STATE_PERIOD  # back to 100 Hz
    np.testing.assert_array_equal(controller.damping_at(FOLDED), limited)
    unlimited = JointImpedanceController(model, DEMO_STIFFNESS, DEMO_DAMPING, SetPoint(FOLDED))
    assert not unlimited.observe_state_period(0.04)  # the limit switched off stays off
    np.testing.assert_array_equal(unlimited.damping_at(FOLDED), DEMO_DAMPING)


def test_the_control_loop_limits_the_damping_for_the_measured_state_period(setup):
    # A 25 Hz joint-state stream under a limit configured for 100 Hz: the controller alone runs
    # the arm away; the loop measures the period and the arm holds.
    model = setup[0]
    assert _hold_on_mujoco(model, STATE_PERIOD, period=0.04, seconds=2.0)[0] > RUNAWAY_SPEED
    fastest, notice = _hold_on_mujoco(model, STATE_PERIOD, period=0.04, through_loop=True, seconds=2.0)
    assert fastest < RUNAWAY_SPEED  # (the safety layer's limit zone moves the folded arm a little)
    assert notice == "joint states arrive every 40.0 ms: damping now limited for a 40.0 ms state period"


def test_references():
    move = MinimumJerkMove(np.zeros(2), np.array([1.0, -2.0]), t_start=1.0, duration=2.0)
    np.testing.assert_allclose(move(0.0)[0], 0.0)
    np.testing.assert_allclose(move(3.5)[0], [1.0, -2.0])
    np.testing.assert_allclose(move(2.0)[0], [0.5, -1.0])
    for t in (1.3, 2.2, 2.9):
        h = 1e-6
        np.testing.assert_allclose(move(t)[1], (move(t + h)[0] - move(t - h)[0]) / (2 * h), atol=FD_TOL)
        np.testing.assert_allclose(move(t)[2], (move(t + h)[1] - move(t - h)[1]) / (2 * h), atol=FD_TOL)
    q, qd, qdd = SetPoint([0.1, 0.2])(5.0)
    np.testing.assert_array_equal(q, [0.1, 0.2])
    assert not qd.any() and not qdd.any()
    with pytest.raises(ControlError, match="finite"):
        SetPoint([np.nan, 0.0])
    with pytest.raises(ControlError, match="duration must be positive"):
        MinimumJerkMove(np.zeros(2), np.ones(2), 0.0, 0.0)


def test_bad_controller_settings(setup):
    model = setup[0]
    reference = SetPoint(np.zeros(7))
    with pytest.raises(ControlError, match=">= 0"):
        JointImpedanceController(model, -1.0, 1.0, reference)
    with pytest.raises(ControlError, match="unknown model term"):
        JointImpedanceController(model, 1.0, 1.0, reference, model_term="pid")
    with pytest.raises(ControlError, match="needs a torque_map"):
        JointImpedanceController(model, 1.0, 1.0, reference, model_term="map")
    for period in (0.0, -0.01, float("nan")):
        with pytest.raises(ControlError, match="state_period"):
            JointImpedanceController(model, 1.0, 1.0, reference, state_period=period)
    with pytest.raises(ControlError, match="unknown joints"):
        JointImpedanceController(model, {"s0": 1.0}, 1.0, reference)
    other = load_robot_config(BAXTER_LEFT.parent / "baxter_right.yaml").build_model()
    with pytest.raises(ControlError, match="differ"):
        GravityCompensation(model).update_model(other)
