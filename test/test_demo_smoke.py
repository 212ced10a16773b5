"""``diffsim-ros demo``, shortened (calibration while moving, then a payload change): outputs,
summary, refusal to overwrite."""

import contextlib
import io

import numpy as np
import pytest

from diffsim_ros.cli import main
from diffsim_ros.control.safety import SafetyConfig
from diffsim_ros.io.bags import BagTopics, bag_info, read_bag
from diffsim_ros.io.calibration import load_calibration
from diffsim_ros.nodes.robot import DEFAULT_ROBOT_CONFIG, load_robot
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE, POSE_STAMPED

SECONDS = 24.0  # [s] simulated calibration while moving: six moves (the full demo uses 45)
PAYLOAD_SECONDS = 24.0  # [s] of motion after the payload change (the full demo uses 40)
PAYLOAD_AFTER = 2.0  # [kg] the hidden payload after the change (1.3 before)
PAYLOAD_TOL = 0.05  # [kg] around the hidden payload
GRAVITY_IMPROVEMENT = 10.0  # the released arm drifts 1.5 rad on the nominal model, ~0.01 rad calibrated
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SPEED_FACTOR = SafetyConfig().speed_factor  # x the URDF velocity limit: the safety layer drops such states


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["demo", "--out", str(out), "--seconds", str(SECONDS), "--payload-seconds", str(PAYLOAD_SECONDS),
                     "--payload-change", str(PAYLOAD_AFTER)])
    return out, code, stdout.getvalue()


def row(text, label):
    """The cells after ``label`` in the summary line starting with it."""
    (line,) = [line for line in text.splitlines() if line.startswith(label)]
    return line[len(label):].split()


def test_demo_writes_bag_calibration_urdf_and_report(demo):
    out, code, _ = demo
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["bag", "baxter_left_calibrated.urdf", "calibration.yaml", "report.png"]
    calibration = load_calibration(out / "calibration.yaml")
    assert abs(calibration.parameters["payload.mass"] - PAYLOAD_AFTER) < PAYLOAD_TOL
    assert (out / "report.png").read_bytes()[:8] == PNG_MAGIC
    assert "left_hand_payload" in (out / "baxter_left_calibrated.urdf").read_text()  # the payload link
    topics = bag_info(out / "bag").topics
    assert topics["/robot/joint_states"][0] == JOINT_STATE
    assert topics["/robot/limb/left/joint_command"][0] == JOINT_COMMAND
    assert topics["/estimator/estimates"][0] == FLOAT64_MULTI_ARRAY
    assert topics["/camera/left_hand/pose"][0] == POSE_STAMPED


def test_demo_prints_estimates_against_truth_and_tracking_before_after(demo):
    _, _, text = demo
    nominal, true, estimate, _ = row(text, "payload.mass [kg]")
    assert (float(nominal), float(true)) == (0.0, PAYLOAD_AFTER) and abs(float(estimate) - PAYLOAD_AFTER) < PAYLOAD_TOL
    (change,) = [line for line in text.splitlines() if line.startswith("payload change at")]
    assert "1.3 -> 2 kg while moving; tracked within 2% from" in change, change
    assert row(text, "left_s1.spring.stiffness [N/m]")[:2] == ["8000", "9600"]
    before, after, _ = row(text, "impedance tracking RMS error [rad]")
    assert float(after) < float(before)
    before, after, _ = row(text, "gravity compensation drift")[-3:]
    assert float(after) * GRAVITY_IMPROVEMENT < float(before)
    assert "camera pose error:" in text  # the camera frame is estimated too
    assert "wrote calibration:" in text and "wrote report:" in text


def test_the_arm_never_runs_away(demo):
    # Before the impedance damping was limited to what 100 Hz joint states can stabilize, the
    # arm ran away where the elbow is folded: e0 at 54.7 rad/s, states dropped as implausible.
    out, _, _ = demo
    model = load_robot(DEFAULT_ROBOT_CONFIG).nominal
    states = read_bag(out / "bag", list(model.joint_names), topics=BagTopics(joint_states="/robot/joint_states")).joint_states
    ratio = np.abs(states.velocities) / model.velocity_limit.numpy()
    assert ratio.max() < SPEED_FACTOR, f"{model.joint_names[int(ratio.max(0).argmax())]} at {ratio.max():.1f} x its limit"


def test_demo_refuses_to_overwrite_without_force(demo, capsys):
    out, _, _ = demo
    before = (out / "calibration.yaml").read_bytes()
    assert main(["demo", "--out", str(out)]) == 2
    assert "exists; use --force" in capsys.readouterr().err
    assert (out / "calibration.yaml").read_bytes() == before
    for bad in (["--payload-change", "9"], ["--payload-seconds", "1"], ["--payload-change", "nan"]):
        assert main(["demo", "--out", str(out.parent / "never"), *bad]) == 2
        assert "--payload-seconds must be 0 or at least" in capsys.readouterr().err
    assert not (out.parent / "never").exists()
