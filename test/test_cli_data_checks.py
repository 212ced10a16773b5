"""What the data of a bag must hold before ``calibrate`` or ``replay`` estimates anything.

Too little motion and rest determines nothing (exit 3, the same minimum as the online
estimator); efforts that are all exactly 0 are bad data (exit 2); ``replay`` refuses what
``calibrate`` refuses, with the same messages, before it plays the bag. The bags are small
and synthetic: nothing here runs a fit. Bad arguments of these commands are named too.
"""

import numpy as np
import pytest

from diffsim_ros.cli import exits
from diffsim_ros.cli import main as cli_main
from diffsim_ros.estimation.data import MIN_MOTION_SECONDS, MIN_REST_POSES
from diffsim_ros.estimation.online import OnlineEstimatorConfig
from diffsim_ros.io.bags import BagWriter, read_robot_bag, write_bag
from diffsim_ros.io.ros_messages import float64_multi_array_msg, joint_state_msg
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore
from diffsim_ros.model import load_robot_config
from diffsim_ros.pipelines.calibration import read_bag_dataset
from oracles import BAXTER_LEFT, REPO

RATE = 100.0  # [Hz] joint states
CONFIG = load_robot_config(BAXTER_LEFT)
JOINTS = CONFIG.joints
_LOWER, _UPPER = (limit.numpy() for limit in (CONFIG.build_model().lower, CONFIG.build_model().upper))
TOPIC = "/robot/joint_states"  # the topic of config/baxter_left.yaml


def write_joint_state_bag(path, seconds, *, efforts="measured", names=JOINTS, scale=1.0, nan_every=0, same_stamps=False):
    """A bag of a moving arm's joint states at RATE.

    Args:
        path: Bag directory to create.
        seconds: Duration [s].
        efforts: ``"measured"`` (nonzero), ``"zero"`` (exactly 0.0 everywhere) or None (absent).
        names: Joint names of the messages.
        scale: Positions are multiplied by this (57.3: written in degrees).
        nan_every: Every k-th sample's positions are +inf (0: none).
        same_stamps: Every sample stamped as the first.
    """
    factory = TypestoreMessages(default_typestore())
    rng = np.random.default_rng(0)
    count = int(round(seconds * RATE))
    messages = []
    for i in range(count):
        t = i / RATE
        swing = np.minimum(0.3, 0.4 * (_UPPER - _LOWER))  # [rad] within the joint limits
        q = scale * ((_LOWER + _UPPER) / 2 + swing * np.sin(2 * np.pi * 0.5 * t + np.arange(len(names))))
        if nan_every and i % nan_every == 0:
            q = np.full(len(names), np.inf)
        tau = {"measured": 5.0 + rng.normal(0, 0.1, len(names)), "zero": np.zeros(len(names)), None: None}[efforts]
        stamp = 1_700_000_000 * 10**9 + (0 if same_stamps else int(round(t * 1e9)))
        messages.append((TOPIC, joint_state_msg(factory, stamp, list(names), q, efforts=tau), stamp))
    return write_bag(path, messages, storage="sqlite3")


def with_commanded_torques(bag, path):
    """A copy of a joint-state bag with Float64MultiArray commanded torques at every joint state."""
    factory = TypestoreMessages(default_typestore())
    data = read_robot_bag(bag, CONFIG)
    stamps = data.t0_ns + np.round(data.joint_states.times * 1e9).astype(np.int64)
    messages = [(TOPIC, joint_state_msg(factory, int(ns), list(JOINTS), q, efforts=tau), int(ns))
                for ns, q, tau in zip(stamps, data.joint_states.positions, data.joint_states.efforts)]
    messages += [("/robot/limb/left/joint_command", float64_multi_array_msg(factory, np.full(len(JOINTS), 5.0)), int(ns))
                 for ns in stamps]
    return write_bag(path, sorted(messages, key=lambda m: m[2]), storage="sqlite3")


# These bags hold joint states only: the torques are the efforts, and there is no camera (the
# config names both topics, which must otherwise be in the bag).
WITHOUT = ("--torque-source", "effort", "--no-camera")


def calibrate(tmp_path, bag, *extra):
    """Exit code of ``calibrate`` of ``bag`` into tmp_path/out."""
    return cli_main(["calibrate", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(tmp_path / "out"),
                     *WITHOUT, *extra])


def test_one_minimum_of_data_offline_and_online():
    config = OnlineEstimatorConfig()
    assert (config.min_motion_seconds, config.min_poses) == (MIN_MOTION_SECONDS, MIN_REST_POSES)


@pytest.mark.parametrize("extra", [(), ("--allow-partial",)])
def test_calibrate_refuses_less_motion_than_an_estimate_needs(tmp_path, capsys, extra):
    """0.5 s of motion wrote a payload COM 0.1 m off with a std 10x smaller, marked determined."""
    bag = write_joint_state_bag(tmp_path / "bag", 0.5)
    assert calibrate(tmp_path, bag, "--estimate", "payload,spring", *extra) == exits.UNDETERMINED
    err = capsys.readouterr().err
    assert "s of usable motion and 0 rest pose(s); an estimate needs at least 3 s of motion or 8 rest poses" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("bag_options, extra, cause", [
    ({"seconds": 0.05}, (), "5 joint states are too few"),
    ({"seconds": 4.0, "scale": 180 / np.pi}, (), "all 400 samples lie outside the joint limits"),
    ({"seconds": 4.0, "same_stamps": True}, ("--order-policy", "sort"), "399 of 400 samples with a repeated stamp dropped"),
])
def test_calibrate_names_why_a_bag_determines_nothing(tmp_path, capsys, bag_options, extra, cause):
    """These only said 'no parameter groups to estimate; choose from [...]'."""
    bag = write_joint_state_bag(tmp_path / "bag", bag_options.pop("seconds"), **bag_options)
    assert calibrate(tmp_path, bag, *extra) == exits.UNDETERMINED
    err = capsys.readouterr().err
    assert cause in err and "no parameter groups" not in err


def test_calibrate_refuses_efforts_that_are_all_zero(tmp_path, capsys):
    bag = write_joint_state_bag(tmp_path / "bag", 4.0, efforts="zero")
    assert calibrate(tmp_path, bag, "--allow-partial") == exits.BAD_INPUT
    assert "efforts are exactly 0 on every joint and all 400 samples" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_efforts_that_are_all_zero_are_ignored_beside_commanded_torques(tmp_path):
    bag = with_commanded_torques(write_joint_state_bag(tmp_path / "zero", 4.0, efforts="zero"), tmp_path / "bag")
    _, summary = read_bag_dataset(bag, CONFIG, CONFIG.build_model(), without=("camera_pose",))
    assert summary.torque_source == "commanded" and summary.trajectory_seconds > MIN_MOTION_SECONDS
    assert any("efforts are exactly 0 on every joint and all 400 samples" in note and "ignored" in note
               for note in summary.notes), summary.notes


def write_bad_bag(path, case):
    """A bag ``calibrate`` refuses as bad input: ``case`` names what is wrong with it."""
    if case == "other_arm":
        return write_joint_state_bag(path, 4.0, names=[j.replace("left", "right") for j in JOINTS])
    if case in ("no_efforts", "zero_efforts"):
        return write_joint_state_bag(path, 4.0, efforts=None if case == "no_efforts" else "zero")
    if case == "empty":  # the joint-states topic recorded, without a message
        with BagWriter(path) as writer:
            writer.add_topic(TOPIC, "sensor_msgs/msg/JointState")
        return path
    factory = TypestoreMessages(default_typestore())  # "wrong_type": arrays on the joint-states topic
    return write_bag(path, [(TOPIC, float64_multi_array_msg(factory, np.zeros(7)), 10**9 + i * 10**7) for i in range(50)],
                     storage="sqlite3")


def replay(tmp_path, bag, *extra):
    """Exit code of ``replay`` of ``bag`` into tmp_path/replayed."""
    return cli_main(["replay", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(tmp_path / "replayed"),
                     "--torque-source", "effort", *extra])


@pytest.fixture
def no_play(monkeypatch):
    """Replay fails the test if it starts playing the bag."""
    def play(*args):
        raise AssertionError("the bag was played")

    monkeypatch.setattr("diffsim_ros.cli.replay._play", play)


@pytest.mark.parametrize("case", ["other_arm", "no_efforts", "zero_efforts", "empty", "wrong_type"])
def test_replay_refuses_what_calibrate_refuses_before_playing(tmp_path, capsys, no_play, case):
    """These ended in '0 updates ... no update ran' (exit 3), or an unexpected error (exit 1)."""
    bag = write_bad_bag(tmp_path / "bag", case)
    assert calibrate(tmp_path, bag) == exits.BAD_INPUT
    refused = capsys.readouterr().err.strip().splitlines()[-1].removeprefix("diffsim-ros calibrate: ")
    assert replay(tmp_path, bag) == exits.BAD_INPUT
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"diffsim-ros replay: {refused}"
    assert not (tmp_path / "replayed").exists()


@pytest.mark.parametrize("option, message", [
    (("--estimate", "payloadd"), "--estimate: unknown parameter group(s) ['payloadd']; choose from payload,"),
    (("--set", "window_seconds=abc"), "--set 'window_seconds=abc': window_seconds must be a number, got 'abc'"),
])
def test_replay_refuses_bad_options_before_playing(tmp_path, capsys, no_play, option, message):
    """An unknown group gave ten 'estimator update failed: KeyError' lines and exit 3."""
    bag = write_joint_state_bag(tmp_path / "bag", 4.0)
    assert replay(tmp_path, bag, *option) == exits.BAD_INPUT
    assert message in capsys.readouterr().err


def test_replay_counts_every_dropped_sample(tmp_path, capsys):
    """1000 of 2000 samples with inf were logged as '1 + 499 more' (the log is rate-limited)."""
    bag = write_joint_state_bag(tmp_path / "bag", 4.0, nan_every=2)
    replay(tmp_path, bag, "--estimate", "payload")
    assert "note: joint states (/robot/joint_states): 200 of 400 samples with NaN/inf dropped" in capsys.readouterr().out


def test_replay_refuses_less_motion_than_an_estimate_needs_before_playing(tmp_path, capsys, no_play):
    bag = write_joint_state_bag(tmp_path / "bag", 0.5)
    assert replay(tmp_path, bag) == exits.UNDETERMINED
    err = capsys.readouterr().err
    assert "an estimate needs at least 3 s of motion or 8 rest poses" in err and "nothing written" in err
    # The estimator's own setting is the minimum: with a lower one, the bag is played.
    assert replay(tmp_path, bag, "--set", "min_motion_seconds=0.1") == exits.FAILURE
    assert "the bag was played" in capsys.readouterr().err


@pytest.mark.parametrize("case, message", [
    ("threads", "--threads must be >= 1, got -2"),
    ("objects_threads", "--threads must be >= 1, got -2"),
    ("config_is_a_directory", "is a directory; give the robot config YAML"),
    ("config_is_a_urdf", "baxter.urdf: that is a URDF; give the robot config YAML"),
    ("bag_without_metadata", "not a rosbag2 directory (no metadata.yaml); to read its storage file alone, give the file:"),
])
def test_bad_arguments_are_named(tmp_path, capsys, case, message):
    """--threads -2 was clamped to 1; a config directory was 'not found', a URDF 'invalid YAML'."""
    bag = write_joint_state_bag(tmp_path / "bag", 4.0)
    argv = ["--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(tmp_path / "out")]
    if case == "threads":
        argv += ["--threads", "-2"]
    elif case == "objects_threads":
        argv = ["--bag", str(bag), "--scene", str(tmp_path / "scene.yaml"), "--out", str(tmp_path / "out"), "--threads", "-2"]
    elif case.startswith("config"):
        argv[3] = str(REPO / "urdf" / ("baxter.urdf" if case == "config_is_a_urdf" else ""))
    else:
        (bag / "metadata.yaml").unlink()
    commands = ["estimate-objects"] if case == "objects_threads" else ["calibrate"] + (["replay"] if case != "threads" else [])
    for command in commands:
        assert cli_main([command] + argv) == exits.BAD_INPUT, command
        assert message in capsys.readouterr().err, command
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("window, code, message", [
    (("--start", "3", "--end", "2"), exits.BAD_INPUT, "--start must be before --end, got 3.0 and 2.0"),
    (("--start", "nan"), exits.BAD_INPUT, "--start must be before --end"),
    (("--start", "100"), exits.BAD_INPUT, "no joint state in [100, inf] s; the recording spans [0, 3.99] s"),
    (("--end", "1"), exits.UNDETERMINED, "[-inf, 1] s: 0.7 s of usable motion and 0 rest pose(s); an estimate needs"),
])
def test_a_time_window_outside_the_data_is_named(tmp_path, capsys, window, code, message):
    """``--start`` / ``--end`` select a segment of the bag; one without enough data is named."""
    bag = write_joint_state_bag(tmp_path / "bag", 4.0)
    argv = ["calibrate", "--bag", str(bag), "--config", str(BAXTER_LEFT), "--out", str(tmp_path / "out"), *WITHOUT,
            *window]
    assert cli_main(argv) == code
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
