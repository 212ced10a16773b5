"""The pieces of the new-arm controller benchmark (benchmarks/bench_new_arm_control.py, issue 46) on their own:
the wrong-URDF generator's payload step and the gravity-compensation drift scorer on the real arm's plant."""

import sys

import numpy as np

from diffsim_ros.model import RobotModel
from oracles import REPO
from wrong_urdf import ARMS, Excitation, PayloadStep, make_real_arm, record

sys.path.insert(0, str(REPO))  # benchmarks/ holds the scorer shared with the test

from benchmarks.bench_new_arm_control import hold_drift, real_plant  # noqa: E402

TRUTH_DRIFT = 2e-4  # [rad] over 0.5 s: the real URDF's gravity on its own plant, sensor noise only (measured 1.4e-5)
NOMINAL_DRIFT = 0.02  # [rad] at least, over 0.5 s: the nominal URDF's gravity, links 15-25 % off (measured 0.33)
RELEASE_TOL = 1e-4  # [rad] one 1 ms step from rest after the release
PAYLOAD_FRAME = "panda_hand"


def test_the_payload_step_changes_the_recording_at_its_time_only(tmp_path):
    arm = make_real_arm("panda", 1)
    excitation, step_time = Excitation(0.2, 3, 7), 0.1
    kept = record(arm, excitation, 0.2, tmp_path, 3, PayloadStep(PAYLOAD_FRAME, (0.0, 0.0, 0.05), 1.0, 1.0, step_time))
    moved = record(arm, excitation, 0.2, tmp_path, 3, PayloadStep(PAYLOAD_FRAME, (0.0, 0.0, 0.05), 1.0, 2.0, step_time))
    without = record(arm, excitation, 0.2, tmp_path, 3)
    before = kept.joint_time <= step_time  # the state at the step's own stamp precedes it
    np.testing.assert_array_equal(kept.q[before], moved.q[before])
    assert np.abs(kept.q[~before] - moved.q[~before]).max() > 1e-6  # a heavier payload sags the tracking
    assert np.abs(kept.q - without.q).max() > 1e-6  # the payload is carried from the start


def test_the_drift_scorer_tells_the_real_urdf_from_the_nominal_one(tmp_path):
    arm = make_real_arm("panda", 1)
    arm.save(tmp_path)
    spec = ARMS["panda"]
    build = lambda urdf: RobotModel.from_urdf(urdf, base_link="panda_link0", tip_link=PAYLOAD_FRAME)  # noqa: E731
    nominal, truth = build(spec.urdf_path), build(tmp_path / "real.urdf")
    q0 = np.array([0.3, -0.4, 0.2, -2.0, 0.1, 1.8, 0.5])
    drift = {}
    for name, model in (("truth", truth), ("nominal", nominal)):
        plant = real_plant(arm, nominal, tmp_path / "real.urdf", friction=False)
        drift[name], deviation = hold_drift(plant, model, q0, seconds=0.5, held=0.3)
        assert len(deviation) == 500 and drift[name] == deviation.max()
        assert deviation[0] < RELEASE_TOL  # held at q0 until the release
    assert drift["truth"] < TRUTH_DRIFT
    assert drift["nominal"] > NOMINAL_DRIFT
