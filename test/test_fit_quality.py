"""The arm's fit-quality check: a model that does not explain the torques is no result.

Efforts of the opposite sign, or a damping the robot does not have, used to end in values
reported as determined (``calibrate`` exit 0, online updates accepted). The check regresses
each joint's measured torque on the fitted model's (:mod:`diffsim_ros.estimation.fit_quality`).
The motion here is this package's own exact rigid-body model with white torque noise, so a
right model must pass and every failure comes from the error put in on purpose.
"""

import math

import numpy as np
import pytest
import torch
import yaml

from diffsim_ros import dynamics as dyn
from diffsim_ros.cli import exits
from diffsim_ros.cli import main as cli_main
from diffsim_ros.estimation.data import Dataset, Trajectory
from diffsim_ros.estimation.fit_quality import SLOPE_LIMIT, agreement_verdict, torque_agreement
from diffsim_ros.estimation.identification import identify
from diffsim_ros.estimation.online import OnlineEstimator, OnlineEstimatorConfig
from diffsim_ros.io.bags import write_bag
from diffsim_ros.io.ros_messages import joint_state_msg
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore
from diffsim_ros.model import load_robot_config
from oracles import BAXTER_LEFT

RATE = 100.0  # [Hz]
TORQUE_NOISE = 0.05  # [N·m] white noise on the efforts
STIFFNESS_REL = 0.01  # a right model's spring estimate from 6 s of exact motion
SLOPE_TOL = 0.02  # a right model's slopes on joints with torque well above the noise
CONFIG = load_robot_config(BAXTER_LEFT)
# These bags hold joint states with efforts only; the config also names commands and a camera.
EFFORTS_ONLY = ("--torque-source", "effort", "--no-camera")
JOINTS = CONFIG.joints

_CENTER = np.array([0.0, -0.55, 0.0, 0.75, 0.0, 1.26, 0.0])  # [rad] inside every limit
_AMPLITUDE = np.array([0.5, 0.3, 0.6, 0.5, 0.8, 0.5, 0.9])  # [rad]
_FREQUENCY = np.array([0.11, 0.17, 0.13, 0.19, 0.23, 0.29, 0.31])  # [Hz]


def _multi_sine(t):
    """Positions, velocities and accelerations of the reference motion at times ``t`` (T,)."""
    w, phase = 2 * math.pi * _FREQUENCY, 0.7 * np.arange(7)
    angle = w * t[:, None] + phase
    return _CENTER + _AMPLITUDE * np.sin(angle), _AMPLITUDE * w * np.cos(angle), -_AMPLITUDE * w**2 * np.sin(angle)


def arm_motion(model, seconds, *, effort_scale=1.0, damping=None, seed=0, effort_bias=0.0, effort_delay=0.0):
    """Exact multi-sine motion of the model and the torques that drive it.

    Args:
        model: RobotModel (float64) whose dynamics make the torques.
        seconds: Duration [s].
        effort_scale: The efforts are multiplied by this (-1: the wrong sign convention).
        damping: Joint damping of the robot [N·m·s/rad] if not the model's.
        seed: Noise seed.
        effort_bias: Added to the efforts [N·m], scalar or (7,) (a torque sensor's offset).
        effort_delay: The efforts are the torques this much earlier [s] (a sensor's lag).

    Returns:
        ``(t, q, qd, qdd, effort)``: arrays (T,) and (T, 7).
    """
    t = np.arange(int(round(seconds * RATE))) / RATE
    q, qd, qdd = _multi_sine(t)
    robot = model if damping is None else model.with_parameters(
        {f"{j}.damping": torch.tensor(float(damping), dtype=torch.float64) for j in JOINTS})
    as_t = lambda x: torch.as_tensor(x, dtype=torch.float64)  # noqa: E731
    earlier = [as_t(x) for x in _multi_sine(t - effort_delay)]
    tau = (dyn.rnea(robot, *earlier) - dyn.passive_torques(robot, *earlier[:2])).numpy()
    tau = tau + TORQUE_NOISE * np.random.default_rng(seed).standard_normal(tau.shape)
    return t, q, qd, qdd, effort_scale * tau + effort_bias


@pytest.fixture(scope="module")
def model():
    return CONFIG.build_model()


def _dataset(model, **kwargs):
    _, q, qd, qdd, effort = arm_motion(model, 6.0, **kwargs)
    return Dataset(trajectories=(Trajectory(dt=1 / RATE, q=q, qd=qd, tau=effort, qdd=qdd),))


def test_slopes_judge_the_model_not_the_noise():
    rng = np.random.default_rng(1)
    predicted = np.stack([5 * np.sin(np.linspace(0, 20, 500)), 0.01 * np.cos(np.linspace(0, 9, 500)),
                          3 * np.cos(np.linspace(0, 7, 500))], 1)
    noise = 0.1 * rng.standard_normal(predicted.shape)
    measured = predicted * np.array([1.0, 1.0, -1.0]) + noise
    item = torque_agreement("test", measured, predicted - measured)
    assert abs(item.slope[0] - 1) < SLOPE_TOL
    # Joint 1's torque is mostly noise: its slope is anything, with a std to match, and passes.
    assert item.slope_std[1] > SLOPE_LIMIT
    assert list(item.failing()) == [2]
    message = agreement_verdict([item], ["a", "b", "c"])
    assert "c slope -1.00" in message and message.count(" N·m rms vs ") == 1
    # Correlated rows count once per filter window: the std widens by sqrt(2 span + 1).
    wide = torque_agreement("test", measured, predicted - measured, span=12)
    assert np.allclose(wide.slope_std, 5 * item.slope_std)
    # A constant offset (an effort sensor's bias) is no slope, and a small one passes; one of
    # the size of the arm's torques (a shoulder's torque under an elbow's name) fails.
    biased = torque_agreement("test", measured + 0.2, predicted - measured - 0.2)
    assert np.allclose(biased.slope, item.slope) and np.allclose(biased.offset - item.offset, 0.2)
    assert list(biased.failing()) == [2]
    assert list(torque_agreement("test", measured + [0, 2.0, 0], predicted - measured - [0, 2.0, 0]).failing()) == [1, 2]
    # A joint missed by little next to the arm's torques is not material: 4x of 0.02 N·m.
    small = np.stack([predicted[:, 0], 0.02 * np.sin(np.linspace(0, 13, 500))], 1)
    seen = small * np.array([1.0, 4.0])
    assert torque_agreement("test", seen, small - seen).failing().size == 0
    assert list(torque_agreement("test", seen, small - seen).failing(material=0.0)) == [1]
    # One rest pose: no slope, and an offset of 0.01 N·m next to 5 N·m passes.
    single = torque_agreement("test", measured[:1], np.full((1, 3), 0.01))
    assert np.all(np.isnan(single.slope)) and single.failing().size == 0
    # Entries left out (weight 0) do not count; a joint with none has no slope.
    weight = np.ones_like(measured)
    weight[:, 2] = 0
    assert np.isnan(torque_agreement("test", measured, predicted - measured, weight).slope[2])
    assert agreement_verdict([torque_agreement("test", measured, predicted - measured, weight)], "abc") is None


def test_a_right_model_passes_and_its_spring_is_recovered(model):
    result = identify(model, _dataset(model), ("spring",))
    assert result.poor_fit is None
    (item,) = result.agreement
    strong = item.measured_rms > 20 * TORQUE_NOISE
    assert strong.sum() >= 3 and np.all(np.abs(item.slope[strong] - 1) < SLOPE_TOL)
    nominal = float(model.get_parameter("left_s1.spring.stiffness"))
    assert abs(result.values["left_s1.spring.stiffness"] - nominal) < STIFFNESS_REL * nominal


@pytest.mark.parametrize("error, joint", [({"effort_scale": -1.0}, "left_e1"), ({"damping": 0.0}, "left_w2")])
def test_torques_the_model_cannot_explain_are_a_poor_fit(model, error, joint):
    # The nominal model's damping is 0.7 N·m·s/rad: a robot without it, fitted with the
    # spring only, left the payload 1.7 % off at 6 std before the check.
    assert float(model.get_parameter("left_w2.damping")) > 0.5
    result = identify(model, _dataset(model, **error), ("spring",))
    assert joint in [JOINTS[j] for item in result.agreement for j in item.failing()]
    assert result.poor_fit.startswith("poor fit") and "effort sign" in result.poor_fit


def _stream(estimator, model, **kwargs):
    t, q, qd, _, effort = arm_motion(model, 16.0, **kwargs)
    updates = []
    for row in zip(t, q, qd, effort):
        estimator.add_joint_state(*row)
        update = estimator.update(row[0])
        if update is not None:
            updates.append(update)
    return updates


def test_online_updates_of_a_poor_fit_are_rejected(model):
    config = OnlineEstimatorConfig(groups=("spring",), update_period=4.0)
    right = _stream(OnlineEstimator(model, config), model)
    assert any(u.accepted for u in right)
    wrong = _stream(OnlineEstimator(model, config), model, effort_scale=-1.0)
    fitted = [u for u in wrong if "poor fit" in u.reason]
    assert fitted and not any(u.accepted for u in wrong)
    assert all(u.reason.startswith("rejected: poor fit") for u in fitted)


def _bag(path, model, seconds=5.0, **kwargs):
    factory = TypestoreMessages(default_typestore())
    t, q, _, _, effort = arm_motion(model, seconds, **kwargs)
    stamps = 1_700_000_000 * 10**9 + np.round(t * 1e9).astype(np.int64)
    return write_bag(path, [("/robot/joint_states", joint_state_msg(factory, int(ns), list(JOINTS), qi, efforts=ei), int(ns))
                            for ns, qi, ei in zip(stamps, q, effort)], storage="sqlite3")


def test_calibrate_writes_no_calibration_for_a_poor_fit_only_its_diagnostics(tmp_path, model, capsys):
    bag = _bag(tmp_path / "negated", model, effort_scale=-1.0)
    out = tmp_path / "out"
    args = ["calibrate", "--bag", str(bag), "--config", str(BAXTER_LEFT), *EFFORTS_ONLY, "--out", str(out),
            "--estimate", "spring"]
    assert cli_main(args) == exits.UNDETERMINED
    err = capsys.readouterr().err
    assert "poor fit" in err and "nothing written" in err and " N·m rms vs " in err
    assert not out.exists()
    # --allow-partial: what shows why (per-joint slopes, offsets, the torque plots), never a
    # file a node could load as a calibration.
    assert cli_main(args + ["--allow-partial"]) == exits.UNDETERMINED
    assert "no calibration written" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["diagnostics.yaml", "report.png"]
    document = yaml.safe_load((out / "diagnostics.yaml").read_text())
    assert document["status"] == "poor_fit" and "poor fit" in document["message"]
    assert "left_s1.spring.stiffness" in document["not_a_result"]
    (quality,) = document["fit_quality"].values()
    assert quality["joints"] == list(model.joint_names) and quality["failing"]
    assert all(quality["slope"][model.joint_names.index(j)] < 0 for j in quality["failing"])
    assert cli_main(["calibrate", "--bag", str(_bag(tmp_path / "right", model)), "--config", str(BAXTER_LEFT), *EFFORTS_ONLY,
                     "--out", str(out), "--estimate", "spring", "--force"]) == exits.OK
    assert (out / "calibration.yaml").exists() and not (out / "diagnostics.yaml").exists()


def test_replay_of_a_poor_fit_writes_nothing_and_says_why(tmp_path, model, capsys):
    bag = _bag(tmp_path / "negated", model, seconds=10.0, effort_scale=-1.0)
    out = tmp_path / "out"
    code = cli_main(["replay", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--torque-source", "effort", "--out", str(out),
                     "--estimate", "spring"])
    assert code == exits.UNDETERMINED and not out.exists()
    err = capsys.readouterr().err
    assert "no estimate was accepted" in err and "last: rejected: poor fit" in err and " N·m rms vs " in err


def test_a_block_the_data_do_not_determine_is_held_at_nominal_while_the_rest_is_fitted(model):
    # The arm carries no payload (nominal 0): the payload is held up at its bound and kept
    # nominal. The refit of the rest used to hold it at the optimizer's start mass (0.1 kg)
    # instead, so the spring absorbed a payload the reported model does not have.
    result = identify(model, _dataset(model), ("payload", "spring"))
    assert "payload.mass" in result.unidentifiable and float(result.model.get_parameter("payload.mass")) == 0.0
    (item,) = result.agreement
    assert np.all(item.residual_rms < 3 * TORQUE_NOISE)
    nominal = float(model.get_parameter("left_s1.spring.stiffness"))
    assert abs(result.values["left_s1.spring.stiffness"] - nominal) < 1e-3 * nominal


def test_the_table_of_a_poor_fit_calls_no_parameter_determined_or_undetermined(model):
    from types import SimpleNamespace

    from diffsim_ros.cli.calibrate import summary_table
    from diffsim_ros.io.calibration import Calibration

    calibration = Calibration(robot="baxter_left", parameters={"payload.mass": 1.6}, stddev={"payload.mass": 0.007},
                              groups=("payload", "damping"),
                              unidentifiable={"left_s0.damping": "too imprecise: std 0.42; record more motion"})
    run = SimpleNamespace(calibration=calibration, nominal=model, poor_fit=None)
    assert "NOT DETERMINED: too imprecise" in summary_table(run) and "determined" in summary_table(run)
    run.poor_fit = "poor fit: left_s0 offset +2.5 N·m"
    rows = summary_table(run).splitlines()[2:]
    assert len(rows) == 2 and all(row.endswith("POOR FIT (not a result)") for row in rows)
