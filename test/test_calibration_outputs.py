"""calibrate CLI and its outputs: calibration.yaml, calibrated URDF, report, atomic writes, bad input."""

import os

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.cli import main
from diffsim_ros.io.bags import BagTopics, write_bag
from diffsim_ros.io.calibration import Calibration, atomic_directory, apply_calibration, load_calibration, write_calibration, CalibrationError
from diffsim_ros.io.recording import write_recording_bag
from diffsim_ros.io.ros_messages import joint_state_msg
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore
from diffsim_ros.io.urdf_export import export_calibrated_urdf
from diffsim_ros.model import RobotModel, load_robot_config
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth, random_camera_pose
from diffsim_ros.model.poses import random_poses
from diffsim_ros.testbed.scenarios import RecordingScenario, nearest_neighbour_order, record
from ctrl_c import python_sigint_handler, swallow_a_ctrl_c
from oracles import BAXTER_LEFT, PinocchioOracle

EXPORT_TOL = 1e-9  # dynamics of the exported URDF vs the calibrated model [N·m]
PAYLOAD_SPHERE_TOL = 1e-5  # the payload link is a 1 mm sphere, not a point [N·m]
SHORT_FIT_ITERATIONS = 2  # a calibration that runs to its end in ~25 s CPU instead of ~95 s (where it ends does not matter)


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    config = load_robot_config(BAXTER_LEFT)
    model = config.build_model()
    rng = np.random.default_rng(3)
    truth = PlantTruth(0.9, (0.01, 0.0, 0.04), {"left_s1": {"stiffness": 8800.0}}, camera_pose=random_camera_pose(rng))
    plant = MujocoPlant(model, config.urdf, truth, seed=4)
    scenario = RecordingScenario(poses=nearest_neighbour_order(random_poses(model, 10, rng)), camera_frame="left_hand",
                                 excitation=4.0, excitation_amplitude=(2, 4, 2, 2, 0.5, 0.5, 0.3))
    path = tmp_path_factory.mktemp("bags") / "calib"
    return write_recording_bag(path, record(plant, model, scenario), BagTopics.from_config(config), storage="mcap")


def test_cli_writes_all_outputs_and_refuses_to_overwrite(tmp_path, bag, capsys):
    out = tmp_path / "out"
    assert main(["calibrate", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "payload.mass" in printed and "wrote urdf" in printed
    calibration = load_calibration(out / "calibration.yaml")
    assert abs(calibration.parameters["payload.mass"] - 0.9) < 0.02 * 0.9
    assert set(calibration.stddev) == set(calibration.parameters)
    assert "static torques" in calibration.metrics
    assert (out / "report.png").stat().st_size > 10_000
    assert oct(os.stat(out / "calibration.yaml").st_mode & 0o777) != "0o600"
    # The URDF loads with our reader and Pinocchio and carries the calibration.
    config = load_robot_config(BAXTER_LEFT)
    nominal = config.build_model()
    calibrated = apply_calibration(nominal, calibration)
    exported = RobotModel.from_urdf(out / "baxter_left_calibrated.urdf", base_link="base", tip_link="left_hand", springs=nominal.springs)
    exported = exported.with_parameters({f"{s.joint}.spring.{k}": getattr(s, k) for s in calibrated.springs for k in ("stiffness", "offset")})
    q = torch.tensor(random_poses(nominal, 5, np.random.default_rng(0)))
    torch.testing.assert_close(dyn.gravity_torques(exported, q), dyn.gravity_torques(calibrated, q), atol=PAYLOAD_SPHERE_TOL, rtol=0)
    PinocchioOracle(exported, out / "baxter_left_calibrated.urdf")
    # Existing output directory: refused before any work, and left untouched.
    stamp = (out / "calibration.yaml").stat().st_mtime_ns
    assert main(["calibrate", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(out)]) == 2
    assert "exists; use --force" in capsys.readouterr().err
    assert (out / "calibration.yaml").stat().st_mtime_ns == stamp


def test_a_ctrl_c_that_a_library_swallows_stops_the_write(tmp_path, bag, capsys, monkeypatch):
    """A real SIGINT, caught and dropped (as some libraries do): the calibration goes on, but the
    command exits 130 and writes nothing."""
    from diffsim_ros.pipelines import calibration as command  # the module the handler takes calibrate_bag from

    def calibrate_swallowing_a_ctrl_c(*args, **kwargs):
        swallow_a_ctrl_c()
        return calibrate_bag(*args, **kwargs)

    calibrate_bag = command.calibrate_bag
    monkeypatch.setattr(command, "calibrate_bag", calibrate_swallowing_a_ctrl_c)
    out = tmp_path / "out"
    with python_sigint_handler():  # as in a terminal (a pytest-xdist worker ignores SIGINT)
        code = main(["calibrate", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(out), "--estimate", "payload",
                     "--max-iterations", str(SHORT_FIT_ITERATIONS)])
    captured = capsys.readouterr()
    assert code == 130, captured.err
    assert "payload.mass" in captured.out  # the calibration ran to its end
    assert "Traceback" not in captured.err
    assert captured.err.splitlines()[-1] == "diffsim-ros: interrupted (Ctrl-C); no partial outputs were written"
    assert list(tmp_path.iterdir()) == []


def test_a_swallowed_ctrl_c_is_the_outcome_of_a_command_that_stops_early(tmp_path, bag, capsys, monkeypatch):
    """A Ctrl-C a library swallowed, then a command that ends without writing (here: the data
    determine nothing): exit 130, not the command's own code."""
    from diffsim_ros.pipelines import calibration as command  # the module the handler takes calibrate_bag from
    from diffsim_ros.estimation.data import UndeterminedError

    def swallow_then_give_up(*args, **kwargs):
        swallow_a_ctrl_c()
        raise UndeterminedError("nothing")

    monkeypatch.setattr(command, "calibrate_bag", swallow_then_give_up)
    with python_sigint_handler():
        code = main(["calibrate", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(tmp_path / "out")])
    assert code == 130
    assert capsys.readouterr().err.splitlines()[-1] == "diffsim-ros: interrupted (Ctrl-C); no partial outputs were written"


def test_exported_urdf_matches_calibrated_dynamics(tmp_path):
    config = load_robot_config(BAXTER_LEFT)
    nominal = config.build_model()
    calibrated = nominal.with_parameters({
        "left_lower_elbow.mass": 2.3, "left_lower_elbow.com": [0.03, 0.0, -0.01],
        "left_e1.damping": 0.42, "left_w0.friction": 0.1, "left_e1.origin.xyz": [0.1, 0.0, -0.05],
    })
    path = export_calibrated_urdf(calibrated, nominal, config.urdf, tmp_path / "cal.urdf")
    exported = RobotModel.from_urdf(path, base_link="base", tip_link="left_hand")
    rng = np.random.default_rng(1)
    q, qd, qdd = (torch.tensor(rng.uniform(-1, 1, (4, 7))) for _ in range(3))
    torch.testing.assert_close(dyn.rnea(exported, q, qd, qdd), dyn.rnea(calibrated, q, qd, qdd), atol=EXPORT_TOL, rtol=0)
    torch.testing.assert_close(exported.params.damping, calibrated.params.damping)
    torch.testing.assert_close(exported.params.friction, calibrated.params.friction)


def test_calibration_file_round_trip_and_errors(tmp_path):
    calibration = Calibration("baxter_left", {"payload.mass": 1.0, "camera.pose": [0, 0, 1, 0, 0, 0, 1]}, {"payload.mass": 0.01})
    path = write_calibration(tmp_path / "c.yaml", calibration)
    loaded = load_calibration(path)
    assert loaded.parameters["payload.mass"] == 1.0
    np.testing.assert_allclose(loaded.camera_pose[:3, 3], [0, 0, 1])
    model = load_robot_config(BAXTER_LEFT).build_model()
    assert float(apply_calibration(model, loaded).params.payload_mass) == 1.0
    other = Calibration("ur5", {"shoulder_pan_joint.damping": 1.0})
    with pytest.raises(CalibrationError, match="does not fit this model"):
        apply_calibration(model, other)
    with pytest.raises(CalibrationError, match="not found"):
        load_calibration(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("robot: x\n")
    with pytest.raises(CalibrationError, match="'parameters' mapping"):
        load_calibration(tmp_path / "bad.yaml")


def test_atomic_directory_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as tmp:
            (tmp / "partial.txt").write_text("x")
            raise RuntimeError("boom")
    assert not target.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("case", ["empty", "missing_topic", "wrong_joints", "missing_bag"])
def test_cli_bad_input_is_named(tmp_path, case, capsys):
    factory = TypestoreMessages(default_typestore())
    path = tmp_path / "bag"
    if case == "empty":
        write_bag(path, [], storage="sqlite3")
        expected = "empty"
    elif case == "missing_topic":
        write_bag(path, [("/other", joint_state_msg(factory, 1, ["a"], [0.0]), 1)], storage="sqlite3")
        expected = "/robot/joint_states"
    elif case == "wrong_joints":
        msgs = [("/robot/joint_states", joint_state_msg(factory, i * 10**7, ["right_s0"], [0.0], efforts=[0.0]), i * 10**7) for i in range(1, 20)]
        write_bag(path, msgs, storage="sqlite3")
        expected = "left_s0"
    else:
        expected = "not"
    # The bags hold joint states only (the config also names commands and a camera).
    code = main(["calibrate", "--bag", str(path), "--config", str(BAXTER_LEFT), "--out", str(tmp_path / "out"),
                 "--torque-source", "effort", "--no-camera"])
    assert code == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
