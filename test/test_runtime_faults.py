"""Fault-handling building blocks: watchdog states, validated inputs with counters, joint-name checks."""

import numpy as np
import pytest

from diffsim_ros.io.ros_messages import JointMappingError, joint_state_msg, pose_stamped_msg
from diffsim_ros.io.ros_types import POSE_STAMPED, TypestoreMessages
from diffsim_ros.runtime.faults import (
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
    assert monitor.update(js(0, [3.0, 4.0]), 40 * MS).stamp_ns == 0  # unset stamp: ordered by receive time
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
