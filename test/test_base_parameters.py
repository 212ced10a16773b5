"""A wrong URDF corrected from motion: base parameters of the link inertials, with armature.

The base-parameter analysis is held to Pinocchio's joint-torque regressor (its numerical rank on
random excitation); the whole identification to an independent MuJoCo Baxter arm whose every link
is off the URDF (mass 0.8-1.25x, COM 2 cm, inertia 0.8-1.25x) and whose joints have armature:
the calibrated model must predict the torques of another recording about as well as the truth.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch

from diffsim_ros.dynamics.regressor import joint_torque_regressor, link_parameters
from diffsim_ros.estimation.base_parameters import base_parameters
from diffsim_ros.estimation.identification import identify
from diffsim_ros.estimation.solvers import forward_jacobian
from diffsim_ros.model import RobotModel, load_robot_config
from diffsim_ros.model.inertia import inertial_from_log_cholesky, log_cholesky_from_inertial
from diffsim_ros.pipelines.calibration import read_bag_dataset
from diffsim_ros.pipelines.validation import validate_bag
from motion_recordings import ARM, NOMINAL_SPRING, MotionSpec, random_truth, simulate, write_motion_bag, write_robot_config
from oracles import EXAMPLE_ARMS, PinocchioOracle, example_robot_urdf

SAMPLES = 200  # random states for the regressor's rank
HELD_OUT_RMSE = 0.25  # [N·m] on the other recording (commanded torques; the wrong URDF's is several N·m)
NOMINAL_RATIO = 1.0 / 3.0  # and below a third of the wrong URDF's
ARMATURE_TOL = 0.10  # relative, where a joint's armature is determined on its own
ARMATURE = (0.3, 0.3, 0.15, 0.15, 0.05, 0.05, 0.03)  # [kg·m²]


def _log_cholesky_jacobian(model, y):
    """Regressor (S n, 10 L) in inertial parameters -> the same map in log-Cholesky coordinates."""
    p = model.params
    thetas = log_cholesky_from_inertial(p.mass, p.com, p.inertia)
    blocks = [forward_jacobian(lambda t: link_parameters(*inertial_from_log_cholesky(t)), theta)[1].numpy() for theta in thetas]
    import scipy.linalg

    return y @ scipy.linalg.block_diag(*blocks), thetas.numpy()


def test_base_parameter_count_is_the_rank_of_pinocchios_regressor():
    path, _, tip = EXAMPLE_ARMS["panda_finger"]
    path = example_robot_urdf(path)
    model = RobotModel.from_urdf(path, tip_link="panda_link8")
    oracle = PinocchioOracle(model, path)
    rng = np.random.default_rng(5)
    q = rng.uniform(model.lower.numpy(), model.upper.numpy(), (SAMPLES, model.nq))
    qd, qdd = rng.normal(0, 1.5, (2, SAMPLES, model.nq))
    ours = joint_torque_regressor(model, *(torch.as_tensor(x) for x in (q, qd, qdd)))
    ours = ours.reshape(SAMPLES * model.nq, -1).numpy()
    pin = oracle.pin
    theirs = np.concatenate([pin.computeJointTorqueRegressor(oracle.model, oracle.data, oracle.q(a), oracle.v(b),
                                                             oracle.v(c))[oracle.v_index] for a, b, c in zip(q, qd, qdd)])
    rank = np.linalg.matrix_rank(theirs, tol=np.linalg.norm(theirs, 2) * 1e-9)
    jac, thetas = _log_cholesky_jacobian(model, ours)
    columns = [np.arange(10 * i, 10 * i + 10) for i in range(model.nq)]
    result = base_parameters(jac, columns, list(thetas), model.body_names, [], np.zeros(jac.shape[0]), 1.0, ())
    assert result.count == rank
    # every base parameter reproduces the torques: Y pi = Y_base beta for any pi
    pi = rng.normal(size=10 * model.nq)
    names = list(result.names)
    basis = np.stack([sum(c * ours[:, names.index(n)] for c, n in terms[:1]) for terms in result.terms], 1)
    rows = np.zeros((result.count, len(names)))
    for i, terms in enumerate(result.terms):
        for c, n in terms:
            rows[i, names.index(n)] = c
    np.testing.assert_allclose(basis @ (rows @ pi), ours @ pi, rtol=0, atol=1e-8 * np.abs(ours @ pi).max())


@pytest.fixture(scope="module")
def wrong_urdf(tmp_path_factory):
    """A Baxter arm off its URDF with armature: a 20 s fit recording, an 8 s test one, the config."""
    root = tmp_path_factory.mktemp("wrong_urdf")
    rng = np.random.default_rng(7)
    links = tuple((float(rng.uniform(0.8, 1.25)), tuple(rng.uniform(-0.02, 0.02, 3)), float(rng.uniform(0.8, 1.25)))
                  for _ in ARM)
    truth = replace(random_truth(3), payload_mass=0.0, stiffness=NOMINAL_SPRING["stiffness"],
                    offset=NOMINAL_SPRING["offset"], armature=ARMATURE, links=links)
    bags = {}
    for name, seed, duration in (("fit", 31, 20.0), ("test", 47, 8.0)):
        spec = replace(MotionSpec(duration=duration, camera_rate=0.0), excitation_seed=seed, noise_seed=100 + seed)
        bags[name] = write_motion_bag(simulate(truth, spec), root / name)
    config = load_robot_config(write_robot_config(root / "robot.yaml"))
    model = config.build_model()
    dataset, _ = read_bag_dataset(bags["fit"], config, model, without=("camera_pose",))
    result = identify(model, dataset, ("inertia", "armature", "damping"))
    return truth, bags, config, model, result


def test_the_fit_reports_base_parameters_and_keeps_every_link_consistent(wrong_urdf):
    truth, _, _, model, result = wrong_urdf
    assert result.poor_fit is None, result.poor_fit
    base = result.base_parameters
    assert 20 <= base.count < 10 * model.nq + model.nq
    assert np.isfinite(base.std).all() and (base.std > 0).all()
    inertial = [n for n in result.unidentifiable if n.rsplit(".", 1)[-1] in ("mass", "com", "inertia")]
    assert not inertial, {n: result.unidentifiable[n] for n in inertial}
    for name, reason in result.combined.items():
        assert np.isnan(result.stddev[name]).all() and "combination" in reason or "no effect" in reason
        np.testing.assert_allclose(result.model.get_parameter(name).numpy(), result.values[name])
    for body in range(model.nq):  # log-Cholesky: every link physically consistent
        log_cholesky_from_inertial(result.model.params.mass[body], result.model.params.com[body],
                                   result.model.params.inertia[body])


def test_determined_armatures_and_dampings_are_the_plants(wrong_urdf):
    truth, _, _, model, result = wrong_urdf
    determined = [j for j in ARM if f"{j}.armature" in result.values and f"{j}.armature" not in result.combined]
    assert len(determined) >= 3, (result.combined, result.unidentifiable)
    for joint in determined:
        value = float(result.values[f"{joint}.armature"])
        assert value == pytest.approx(ARMATURE[ARM.index(joint)], rel=ARMATURE_TOL), joint
    for joint, damping in zip(ARM, truth.damping):
        assert float(result.values[f"{joint}.damping"]) == pytest.approx(damping, rel=0.1), joint


def test_the_calibrated_model_predicts_another_recording_as_the_truth_does(wrong_urdf):
    _, bags, config, model, result = wrong_urdf
    validation = validate_bag(bags["test"], config, {"nominal": model, "calibrated": result.model})
    overall = {label: validation.overall(label) for label in ("nominal", "calibrated")}
    assert overall["calibrated"] < NOMINAL_RATIO * overall["nominal"], overall
    assert overall["calibrated"] < HELD_OUT_RMSE, overall
