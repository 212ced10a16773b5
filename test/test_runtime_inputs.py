"""Fault-handling building blocks: watchdog states, validated inputs with counters, joint-name checks."""

import numpy as np
import pytest

from diffsim_ros.io.ros_messages import JointMappingError, joint_state_msg, pose_stamped_msg
from diffsim_ros.io.ros_types import POSE_STAMPED, TypestoreMessages
from diffsim_ros.runtime.inputs import (
    FRESH,
    STALE,
    WAITING,
    Watchdog,
    check_joint_names,
    joint_state_input,
    pose_input,
)

MS = 1_000_000
JOINTS = ["j0", "j1"]
FACTORY = TypestoreMessages()


def js(stamp_ns, positions, names=JOINTS):
    return joint_state_msg(FACTORY, stamp_ns, names, positions)


def test_watchdog_states_and_transitions():
    dog = Watchdog(0.05)
    assert dog.state(0) == WAITING and dog.age_s(0) == float("inf") and dog.poll(0) is None
    dog.feed(100 * MS)
    assert dog.poll(120 * MS) == FRESH and dog.poll(130 * MS) is None
    assert dog.is_fresh(150 * MS)  # exactly the timeout: still fresh
    assert dog.poll(151 * MS) == STALE and dog.poll(500 * MS) is None
    assert dog.state(90 * MS) == STALE  # time went backwards (bag loop): do not trust old data
    dog.feed(600 * MS)
    assert dog.poll(600 * MS) == FRESH and dog.age_s(610 * MS) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="timeout must be positive"):
        Watchdog(0.0)


def test_joint_state_input_counts_every_kind_of_bad_sample():
    monitor = joint_state_input(JOINTS, timeout_s=0.05)
    assert monitor.update(js(10 * MS, [1.0, 2.0]), 10 * MS).positions.tolist() == [1.0, 2.0]
    assert monitor.update(js(20 * MS, [np.nan, 2.0]), 20 * MS) is None  # NaN
    assert monitor.update(js(5 * MS, [1.0, 2.0]), 21 * MS) is None  # older than the last accepted
    assert monitor.update(js(10 * MS, [1.0, 2.0]), 22 * MS) is None  # repeated stamp
    assert monitor.update(js(30 * MS, [1.0], names=["j0"]), 30 * MS) is None  # j1 missing
    assert monitor.update(js(31 * MS, [0.5], names=["gripper"]), 31 * MS) is None  # not ours
    assert monitor.update(js(0, [3.0, 4.0]), 40 * MS).stamp_ns == 40 * MS  # unset stamp: ordered by receive time
    c = monitor.counters
    assert (c.received, c.accepted, c.dropped_nonfinite, c.dropped_out_of_order, c.dropped_invalid, c.ignored) == (
        7, 2, 1, 2, 1, 1)
    assert c.dropped == 4
    assert "missing joint(s) ['j1']" in monitor.last_error
    assert monitor.latest.positions.tolist() == [3.0, 4.0]
    assert monitor.is_fresh(90 * MS) and not monitor.is_fresh(91 * MS)
    monitor.reset_order()
    assert monitor.update(js(1 * MS, [0.0, 0.0]), 100 * MS) is not None


def test_pose_input_rejects_degenerate_quaternions():
    monitor = pose_input(timeout_s=0.1)
    assert monitor.update(FACTORY.new(POSE_STAMPED), 1) is None  # all-zero quaternion
    assert monitor.counters.dropped_invalid == 1 and "norm 0" in monitor.last_error
    good = monitor.update(pose_stamped_msg(FACTORY, 5, "camera", [1, 2, 3], [1, 0, 0, 0]), 5)
    assert good.quaternion.tolist() == [1.0, 0.0, 0.0, 0.0]


def test_check_joint_names():
    check_joint_names(JOINTS, ["j1", "x", "j0"])
    with pytest.raises(JointMappingError, match=r"controller joints: missing joint\(s\) \['j1'\]; available: \['j0'\]"):
        check_joint_names(JOINTS, ["j0"], "controller joints")
    with pytest.raises(JointMappingError, match=r"duplicate joint name\(s\) \['j0'\]"):
        check_joint_names(JOINTS, ["j0", "j1", "j0"])


# --- issue 16: time jumps, what is dropped and why, implausible samples, the pose workspace ----------

S = 1_000_000_000
PERIOD = 10 * MS  # 100 Hz


class ListLogger:
    def __init__(self):
        self.records = []

    def log(self, level, message):
        self.records.append((level, message))

    def messages(self, level=None):
        return [m for lv, m in self.records if level is None or lv == level]


def stream(monitor, start_ns, count, *, stamp_offset_ns=0, positions=(0.0, 0.0)):
    """``count`` samples at 100 Hz from node time ``start_ns``: the accepted ones' stamps."""
    out = []
    for k in range(count):
        now = start_ns + k * PERIOD
        sample = monitor.update(js(now + stamp_offset_ns, list(positions)), now)
        out.append(None if sample is None else sample.stamp_ns)
    return out


def test_one_stamp_far_in_the_future_costs_one_sample_and_is_logged():
    log = ListLogger()
    monitor = joint_state_input(JOINTS, timeout_s=0.05, logger=log)
    assert None not in stream(monitor, 1 * S, 10)
    assert monitor.update(js(1 * S + 10 * PERIOD + 100 * S, [0.0, 0.0]), 1 * S + 10 * PERIOD) is None
    accepted = stream(monitor, 1 * S + 11 * PERIOD, 10)
    assert None not in accepted  # not locked out: the next sample is accepted again
    c = monitor.counters
    assert (c.dropped_time_jump, c.dropped_out_of_order, c.time_jumps, monitor.epoch) == (1, 0, 0, 0)
    assert log.messages("warning") == [
        "joint_states: dropped a sample stamped +100 s away from the stream's time base (more than 1 s)"]


def test_node_clock_jumping_back_resets_the_order_check_at_once():
    """/clock jumping back 5 s (bag loop, simulator reset): stamps and node time both jump."""
    log = ListLogger()
    monitor = joint_state_input(JOINTS, timeout_s=0.05, logger=log)
    before = stream(monitor, 10 * S, 50)
    assert monitor.is_fresh(10 * S + 49 * PERIOD)
    assert not monitor.is_fresh(5 * S)  # time ran backwards: stale until the next sample
    after = stream(monitor, 5 * S, 50)
    assert None not in before + after and monitor.is_fresh(5 * S + 49 * PERIOD)
    assert np.all(np.diff(before + after) > 0)  # the continuous time base never runs backwards
    assert after[0] - before[-1] == PERIOD  # continued by one sample period
    assert monitor.counters.time_jumps == 1 and monitor.epoch == 1 and monitor.counters.dropped == 0
    assert log.messages() == ["joint_states: node clock jumped back 5.49 s; order check reset"]


@pytest.mark.parametrize("jump_s", [-5.0, 100.0])
def test_sender_clock_jumps_are_adopted_after_three_agreeing_samples(jump_s):
    """The robot's clock is set back 5 s or forward 100 s while the node's clock runs on."""
    log = ListLogger()
    monitor = joint_state_input(JOINTS, timeout_s=0.05, logger=log)
    before = stream(monitor, 10 * S, 50)
    after = stream(monitor, 10 * S + 50 * PERIOD, 50, stamp_offset_ns=int(jump_s * S))
    assert after[:2] == [None, None] and None not in after[2:]  # resynchronized on the third sample
    kept = before + after[2:]
    assert np.all(np.diff(kept) > 0) and after[2] - before[-1] == 3 * PERIOD  # the receive gap
    c = monitor.counters
    assert (c.dropped_time_jump, c.time_jumps, monitor.epoch) == (2, 1, 1)
    assert log.messages()[-1] == (f"joint_states: stamps jumped {jump_s:+g} s against the receive time and 3 "
                                  "consecutive samples agree: the sender's clock changed, adopted (2 dropped before)")


def test_a_first_sample_from_the_future_does_not_lock_the_stream_out():
    monitor = joint_state_input(JOINTS, timeout_s=0.05)
    assert monitor.update(js(200 * S, [0.0, 0.0]), 1 * S) is not None
    accepted = stream(monitor, 1 * S + PERIOD, 10)
    assert accepted[:2] == [None, None] and None not in accepted[2:]


def test_reordering_within_the_threshold_is_still_out_of_order_not_a_jump():
    monitor = joint_state_input(JOINTS, timeout_s=0.05)
    stream(monitor, 1 * S, 5)
    assert monitor.update(js(1 * S + 2 * PERIOD, [0.0, 0.0]), 1 * S + 5 * PERIOD) is None
    assert monitor.counters.dropped_out_of_order == 1 and monitor.counters.dropped_time_jump == 0


def test_drops_are_logged_with_their_reason_first_at_once_then_summarized():
    log = ListLogger()
    monitor = joint_state_input(JOINTS, timeout_s=0.05, logger=log)
    for k in range(700):  # 7 s of NaN at 100 Hz
        monitor.update(js(S + k * PERIOD, [np.nan, 0.0]), S + k * PERIOD)
    monitor.update(js(S + 701 * PERIOD, [0.0], names=["j0"]), S + 701 * PERIOD)
    assert log.messages("warning") == [
        "joint_states: dropped a sample with NaN/inf values",
        "joint_states: dropped a sample with NaN/inf values (and 499 more since the last report)",
    ]
    assert log.messages("error") == [
        "joint_states: missing joint(s) ['j1'] of the model; the message has ['j0']; message dropped"]


class _Bounds:
    """A stand-in JointStateBounds: |q| <= 3."""

    def violation(self, q, qd=None):
        return None if np.all(np.abs(q) <= 3.0) else f"position {q.tolist()} outside"


def test_implausible_joint_states_are_dropped_as_invalid():
    from diffsim_ros.control import JointStateBounds
    from diffsim_ros.model import load_robot_config
    from oracles import BAXTER_LEFT

    model = load_robot_config(BAXTER_LEFT).build_model()
    names = list(model.joint_names)
    log = ListLogger()
    monitor = joint_state_input(names, timeout_s=0.05, bounds=JointStateBounds(model), logger=log)
    q = np.zeros(7)
    assert monitor.update(joint_state_msg(FACTORY, S, names, q), S) is not None
    q[0] = 1e300
    assert monitor.update(joint_state_msg(FACTORY, S + PERIOD, names, q), S + PERIOD) is None
    assert monitor.counters.dropped_invalid == 1
    assert "implausible joint state: left_s0 position 1e+300 rad is more than 0.25 rad outside its limits" in log.messages("error")[0]


def test_pose_workspace():
    from diffsim_ros.runtime.inputs import PoseWorkspace

    log = ListLogger()
    monitor = pose_input(timeout_s=0.1, logger=log)  # default: the plausibility bound, 50 m
    assert monitor.update(pose_stamped_msg(FACTORY, 5, "camera", [1e300, 0, 0], [1, 0, 0, 0]), 5) is None
    assert monitor.update(pose_stamped_msg(FACTORY, 6, "camera", [0, 0, -60.0], [1, 0, 0, 0]), 6) is None
    assert monitor.counters.dropped_invalid == 2 and "is outside the workspace" in monitor.last_error
    assert monitor.update(pose_stamped_msg(FACTORY, 7, "camera", [0.5, 0.2, 1.0], [1, 0, 0, 0]), 7) is not None
    tight = PoseWorkspace.from_config({"min": [-1, -1, 0], "max": [1, 1, 2]})
    assert tight.violation(np.array([0.0, 0.0, 1.0])) is None and "outside" in tight.violation(np.array([0.0, 0.0, 3.0]))
    for bad, match in (({"min": [0, 0, 0]}, "expected a mapping with 'min' and 'max'"),
                       ({"min": [0, 0, 0], "max": [1, 1]}, "finite 3-vectors"),
                       ({"min": [1, 0, 0], "max": [0, 1, 1]}, "min < max"),
                       ({"min": ["a", 0, 0], "max": [1, 1, 1]}, "could not convert")):
        with pytest.raises(ValueError, match=match):
            PoseWorkspace.from_config(bad)
