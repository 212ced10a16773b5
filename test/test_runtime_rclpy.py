"""The rclpy backend: what can be checked without ROS here, and a real node round trip where rclpy exists."""

import array
import importlib.util
import os
import re
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest

import diffsim_ros
from diffsim_ros.io.ros_messages import JointNameMap, joint_command_msg, joint_state_msg, joint_state_to_sample
from diffsim_ros.io.ros_types import JOINT_COMMAND, JOINT_STATE, MessageTypeError
from diffsim_ros.runtime import LOG_LEVELS, SENSOR_QOS, QosProfile
from diffsim_ros.runtime.rclpy_backend import (
    MessagePackageMissingError,
    RclpyMessages,
    RosNotAvailableError,
    _RclpyLogger,
    install_hint,
    message_class,
    qos_policy_names,
    run_node,
)

from ros_graph import rclpy_context, spin_until

HAVE_RCLPY = importlib.util.find_spec("rclpy") is not None


def test_only_the_rclpy_backend_imports_rclpy():
    package = Path(diffsim_ros.__file__).parent
    pattern = re.compile(r"^\s*(import rclpy|from rclpy\b)", re.MULTILINE)
    offenders = [str(p.relative_to(package)) for p in package.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == ["runtime/rclpy_backend.py"]
    if not HAVE_RCLPY:
        assert "rclpy" not in sys.modules  # importing the backend does not import rclpy


def test_missing_message_package_names_the_package():
    def importer(name):
        raise ModuleNotFoundError(f"No module named '{name}'", name=name.split(".")[0])

    with pytest.raises(MessagePackageMissingError, match=r"'baxter_core_msgs' is not installed \(needed for "
                                                         r"baxter_core_msgs/msg/JointCommand\); build it with `python -m diffsim_ros.runtime.interfaces"):
        message_class(JOINT_COMMAND, importer=importer)
    with pytest.raises(MessagePackageMissingError, match="sudo apt install ros-\\$ROS_DISTRO-diffsim-nonexistent-msgs"):
        message_class("diffsim_nonexistent_msgs/msg/Thing")
    assert "baxter_common_ros2" in install_hint("baxter_core_msgs")
    with pytest.raises(MessageTypeError, match="package 'sensor_msgs' has no message 'JointStat'"):
        message_class("sensor_msgs/msg/JointStat", importer=lambda name: types.SimpleNamespace())


def test_qos_policy_names():
    assert qos_policy_names(SENSOR_QOS) == {
        "history": "KEEP_LAST", "depth": 5, "reliability": "BEST_EFFORT", "durability": "VOLATILE"}
    assert qos_policy_names(QosProfile(depth=1, durability="transient_local", history="keep_all")) == {
        "history": "KEEP_ALL", "depth": 1, "reliability": "RELIABLE", "durability": "TRANSIENT_LOCAL"}
    assert qos_policy_names(7)["depth"] == 7
    with pytest.raises(ValueError, match="reliability must be one of"):
        QosProfile(reliability="sometimes")


def fake_rclpy_class(type_name, field_types):
    """A stand-in for an rosidl-generated rclpy class: field types as rclpy reports them."""

    def __init__(self, **kwargs):
        assert set(kwargs) <= set(field_types), "Invalid arguments passed to constructor"
        for name, field_type in field_types.items():
            default = array.array("d") if field_type == "sequence<double>" else [] if "sequence" in field_type else None
            setattr(self, name, kwargs.get(name, default))

    return type(type_name.split("/")[-1], (), {
        "__init__": __init__,
        "get_fields_and_field_types": classmethod(lambda cls: dict(field_types)),
    })


FAKE_TYPES = {
    "builtin_interfaces/msg/Time": {"sec": "int32", "nanosec": "uint32"},
    "std_msgs/msg/Header": {"stamp": "builtin_interfaces/Time", "frame_id": "string"},
    JOINT_STATE: {"header": "std_msgs/Header", "name": "sequence<string>", "position": "sequence<double>",
                  "velocity": "sequence<double>", "effort": "sequence<double>"},
    JOINT_COMMAND: {"mode": "int32", "command": "sequence<double>", "names": "sequence<string>"},
    "geometry_msgs/msg/PoseWithCovariance": {"covariance": "double[36]"},
}


@pytest.fixture
def rclpy_style_messages():
    classes = {name: fake_rclpy_class(name, fields) for name, fields in FAKE_TYPES.items()}
    return RclpyMessages(resolver=lambda type_name: classes[type_name])


def test_rclpy_factory_converts_to_what_rclpy_setters_accept(rclpy_style_messages):
    joints = ["a", "b", "c"]
    msg = joint_state_msg(rclpy_style_messages, 1_500_000_000, joints[::-1], np.array([3.0, 2.0, 1.0]), frame_id="base")
    assert isinstance(msg.position, array.array) and msg.position.typecode == "d"  # rclpy rejects numpy arrays here
    assert msg.name == ["c", "b", "a"] and msg.header.stamp.sec == 1 and msg.header.stamp.nanosec == 500_000_000
    assert type(msg.header.stamp.sec) is int and msg.header.frame_id == "base"
    sample = joint_state_to_sample(msg, JointNameMap(joints))  # readers accept rclpy containers
    assert sample.positions.tolist() == [1.0, 2.0, 3.0] and sample.stamp_ns == 1_500_000_000
    command = joint_command_msg(rclpy_style_messages, joints, np.zeros(3))
    assert command.mode == 3 and type(command.mode) is int and isinstance(command.command, array.array)
    covariance = rclpy_style_messages.new("geometry_msgs/msg/PoseWithCovariance", covariance=np.eye(6).ravel())
    assert isinstance(covariance.covariance, np.ndarray) and covariance.covariance.dtype == np.float64
    with pytest.raises(MessageTypeError, match=r"no field\(s\) \['nmae'\]"):
        rclpy_style_messages.new(JOINT_STATE, nmae=[])
    with pytest.raises(MessageTypeError, match="frame_id: expected a str"):
        rclpy_style_messages.new("std_msgs/msg/Header", frame_id=3)


def test_rclpy_logger_throttles_per_call_site_on_node_time():
    lines, now = [], [0]
    rclpy_logger = types.SimpleNamespace(**{level: (lambda m, level=level: lines.append((level, m)))
                                            for level in ("debug", "info", "warning", "error", "fatal")})
    logger = _RclpyLogger(rclpy_logger, lambda: now[0])
    for step in range(10):
        now[0] = step * 100_000_000  # 0.1 s steps
        logger.warning(f"stale for {step}", throttle_duration_sec=0.25)
        logger.info("started", once=True)
    assert [m for level, m in lines if level == "warning"] == ["stale for 0", "stale for 3", "stale for 6", "stale for 9"]
    assert [m for level, m in lines if level == "info"] == ["started"]
    logger.fatal("bye")
    assert lines[-1] == ("fatal", "bye")


def test_run_node_without_ros_says_what_to_do(monkeypatch):
    monkeypatch.setitem(sys.modules, "rclpy", None)  # makes `import rclpy` fail, also on a ROS workstation
    with pytest.raises(RosNotAvailableError, match=r"source /opt/ros/<distro>/setup.bash"):
        run_node(object, "n")


@pytest.fixture
def rclpy_handle():
    """An RclpyNodeHandle on a real rclpy node (loopback-only DDS, own domain), spun by ``spin(predicate)``."""
    with rclpy_context() as context:
        import rclpy

        from diffsim_ros.runtime.rclpy_backend import RclpyNodeHandle, node_executor

        node = rclpy.create_node("diffsim_ros_test_node", context=context)
        executor = node_executor(context)  # the nodes' own (the EventsExecutor)
        executor.add_node(node)
        handle = RclpyNodeHandle(node)
        handle.spin = lambda predicate, timeout=10.0: spin_until(executor, predicate, timeout)
        yield handle
        executor.shutdown()
        node.destroy_node()


def test_real_rclpy_round_trip(rclpy_handle):
    handle = rclpy_handle
    received = []
    handle.create_subscription(JOINT_STATE, "/diffsim_ros_test/joint_states", received.append, 10)
    publisher = handle.create_publisher(JOINT_STATE, "/diffsim_ros_test/joint_states", 10)
    assert handle.declare_parameter("rate_hz", 100.0, "rate [Hz]") == 100.0
    assert handle.declare_parameter("rate_hz", 5.0) == 100.0  # declared again (lifecycle re-configure)

    def publish_and_check():
        publisher.publish(joint_state_msg(handle.messages, handle.now_ns(), ["a", "b"], [1.0, 2.0]))
        return bool(received)

    assert handle.spin(publish_and_check)
    assert joint_state_to_sample(received[0], JointNameMap(["b", "a"])).positions.tolist() == [2.0, 1.0]


def test_real_rclpy_logger_takes_every_severity_from_one_handle(rclpy_handle):
    # rclpy raised "Logger severity cannot be changed between calls" at the second severity
    # when every level was forwarded from one call site.
    logger = rclpy_handle.get_logger()
    for _ in range(2):
        for level in LOG_LEVELS:
            logger.log(level, f"{level} message")


def test_real_rclpy_service_parameters_background_and_diagnostics(rclpy_handle):
    from std_srvs.srv import Trigger

    from diffsim_ros.runtime.diagnostics import diagnostic_array_msg, status

    handle = rclpy_handle
    handle.create_service("std_srvs/srv/Trigger", "~/save_calibration",
                          lambda request: {"success": True, "message": "saved"})
    client = handle.node.create_client(Trigger, "/diffsim_ros_test_node/save_calibration")
    assert handle.spin(lambda: client.service_is_ready())
    future = client.call_async(Trigger.Request())
    assert handle.spin(future.done)
    assert future.result().success and future.result().message == "saved"

    handle.declare_parameter("gain", 1.0)
    handle.add_on_set_parameters_callback(lambda changes: "gain must be positive" if changes.get("gain", 1) <= 0 else None)
    from rclpy.parameter import Parameter

    assert not handle.node.set_parameters([Parameter("gain", value=-1.0)])[0].successful
    assert handle.node.get_parameter("gain").value == 1.0
    assert handle.node.set_parameters([Parameter("gain", value=2.0)])[0].successful

    done, worker = [], []
    handle.run_in_background(lambda: worker.append(threading.current_thread()) or 42,
                             lambda result, error: done.append((result, error, threading.current_thread())))
    assert handle.spin(lambda: bool(done))
    assert done[0][:2] == (42, None)
    assert worker[0] is not done[0][2] and done[0][2] is threading.main_thread()  # work off, done on the executor
    # A niced worker runs at lower priority; the node's own threads keep theirs.
    done.clear()
    handle.run_in_background(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
                             lambda result, error: done.append((result, error)), niceness=7)
    assert handle.spin(lambda: bool(done))
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert done[0] == (min(own + 7, 19), None)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own
    # The next jobs run on the same thread, niced once (a thread per job kept raising the resident
    # memory, one glibc arena after another: estimator_node +96 MiB in 10 minutes of updates).
    done.clear()
    for _ in range(2):
        handle.run_in_background(lambda: (threading.current_thread(), os.getpriority(os.PRIO_PROCESS, 0)),
                                 lambda result, error: done.append((result, error)))
        assert handle.spin(lambda: len(done) == _ + 1)
    (first, first_priority), (second, second_priority) = done[0][0], done[1][0]
    assert first is second is worker[0] and first.is_alive()
    assert first_priority == second_priority == own
    done.clear()
    handle.run_in_background(lambda: 1 / 0, lambda result, error: done.append((result, error)))
    assert handle.spin(lambda: bool(done)) and isinstance(done[0][1], ZeroDivisionError)
    done.clear()
    handle.run_in_background(lambda: threading.current_thread(), lambda result, error: done.append((result, error)))
    assert handle.spin(lambda: bool(done)) and done[0][0] is worker[0]  # an error does not end the worker

    msg = diagnostic_array_msg(handle.messages, handle.now_ns(), [status(1, "n: x", "warn", {"rate [Hz]": 99.5})])
    assert msg.status[0].level == b"\x01" and msg.status[0].values[0].value == "99.5"
