"""``diffsim-ros validate``: torque prediction of the nominal and a calibrated model on a recording it did not see."""

from dataclasses import replace

import pytest
import yaml

from diffsim_ros.cli import exits
from diffsim_ros.cli import main as cli_main
from diffsim_ros.io.calibration import Calibration, write_calibration
from diffsim_ros.model import load_robot_config
from motion_recordings import ARM, MotionSpec, random_truth, simulate, write_motion_bag, write_robot_config

IMPROVEMENT = 0.25
"""The true parameters predict the torques at least 4x better than the nominal model (the
payload alone moves the shoulder torques by several N·m; the commands' noise is far below)."""


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """A recording of a hidden truth, the robot config, and the truth written as a calibration."""
    root = tmp_path_factory.mktemp("validate")
    truth = random_truth(2)
    spec = replace(MotionSpec(duration=8.0), excitation_seed=21, noise_seed=121)
    bag = write_motion_bag(simulate(truth, spec), root / "other_bag")
    config_path = write_robot_config(root / "robot.yaml")
    parameters = {"payload.mass": truth.payload_mass, "payload.com": list(truth.payload_com),
                  "left_s1.spring.stiffness": truth.stiffness, "left_s1.spring.offset": truth.offset}
    parameters.update({f"{joint}.damping": value for joint, value in zip(ARM, truth.damping)})
    calibration = write_calibration(root / "calibration.yaml",
                                    Calibration(robot=load_robot_config(config_path).name, parameters=parameters))
    return root, bag, config_path, calibration


def _validate(recording, out, *extra):
    root, bag, config, calibration = recording
    return cli_main(["validate", "--config", str(config), "--calibration", str(calibration), "--bag", str(bag),
                     "--out", str(out), *extra])


def test_the_calibrated_model_predicts_the_other_recording_better(recording, tmp_path, capsys):
    out = tmp_path / "out"
    assert _validate(recording, out) == exits.OK
    printed = capsys.readouterr().out
    assert "all joints" in printed and "left_s1" in printed
    document = yaml.safe_load((out / "validation.yaml").read_text())
    overall = document["overall_rmse_nm"]
    assert overall["calibrated"] < IMPROVEMENT * overall["nominal"], overall
    assert set(document["rmse_nm"]["calibrated"]) == set(ARM)
    assert document["motion_seconds"] > 5.0
    assert (out / "validation.png").stat().st_size > 0


def test_bad_input_and_too_little_motion_write_nothing(recording, tmp_path, capsys):
    root, bag, config, calibration = recording
    out = tmp_path / "out"
    missing = ["validate", "--config", str(config), "--calibration", str(root / "nope.yaml"), "--bag", str(bag),
               "--out", str(out)]
    assert cli_main(missing) == exits.BAD_INPUT
    assert "nope.yaml" in capsys.readouterr().err
    assert _validate(recording, out, "--end", "1.0") == exits.UNDETERMINED
    assert "validation needs at least" in capsys.readouterr().err
    assert _validate(recording, out, "--start", "5", "--end", "1") == exits.BAD_INPUT
    assert not out.exists()
    out.mkdir()
    assert _validate(recording, out) == exits.BAD_INPUT  # exists, no --force
    assert list(out.iterdir()) == []
