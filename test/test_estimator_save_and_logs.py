"""The estimator node's save service answers while an update runs, and its log says what a user
needs: a rejected fit once per kind of reason at WARN, routine outcomes at DEBUG.

In process on the embedded runtime; the update runs on a thread of the test so that it can be
held in the middle (an Event) while the service is called.
"""

import threading

import numpy as np
import pytest
import yaml

from diffsim_ros.estimation.online import OnlineUpdate
from diffsim_ros.io.ros_messages import joint_state_msg
from diffsim_ros.io.ros_types import JOINT_STATE
from diffsim_ros.nodes.estimator_node import EstimatorNode, rejection_kind
from diffsim_ros.runtime import SENSOR_QOS
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from oracles import REPO
from ros_graph import rclpy_context, spin_until

PARAMS = REPO / "config" / "baxter_sim.params.yaml"
RELEASE_TIMEOUT = 60.0  # [s] generous: the update is released by the test itself


def _estimator(tmp_path):
    runtime = EmbeddedRuntime(parameter_files=[PARAMS])
    estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
        "torque_estimate": "off", "save_on_shutdown": False, "calibration_output": str(tmp_path / "calibration.yaml")})
    robot = runtime.create_node("robot")
    publisher = robot.create_publisher(JOINT_STATE, "/robot/joint_states", SENSOR_QOS)
    names, q = list(estimator.robot.joint_names), np.zeros(len(estimator.robot.joint_names))

    def publish_joint_state():
        publisher.publish(joint_state_msg(robot.messages, robot.now_ns(), names, q, q, q))

    robot.create_timer(0.01, publish_joint_state)
    return runtime, estimator


def test_save_calibration_answers_with_the_last_accepted_estimate_while_an_update_runs(tmp_path):
    runtime, estimator = _estimator(tmp_path)
    output = tmp_path / "calibration.yaml"
    started, release = threading.Event(), threading.Event()

    def held_update(now):
        estimator.estimator.values["payload.mass"] = np.array(9.0)  # a candidate the update is still judging
        started.set()
        assert release.wait(RELEASE_TIMEOUT)
        return None

    runtime.spin_for(0.1)
    response = runtime.call_service("/estimator/save_calibration")
    assert response == {"success": False, "message": "no accepted estimates yet: nothing to save"}
    estimator.estimator.values.update({"payload.mass": np.array(1.25)})  # as an accepted update leaves it
    estimator.estimator.update = held_update
    spinner = threading.Thread(target=runtime.spin_for, args=(0.3,))  # the update timer fires at 0.25 s
    spinner.start()
    try:
        assert started.wait(RELEASE_TIMEOUT) and estimator.busy
        response = runtime.call_service("/estimator/save_calibration")
        assert not release.is_set() and estimator.busy  # answered while the update is held
    finally:
        release.set()
        spinner.join()
    assert response == {"success": True, "message": str(output)}
    assert yaml.safe_load(output.read_text())["parameters"]["payload.mass"] == pytest.approx(1.25)
    assert not estimator.busy
    runtime.shutdown()


def test_save_calibration_over_rclpy_answers_while_an_update_runs_on_its_thread(tmp_path):
    """The real backend: the update on its worker thread, the service on the executor, over DDS
    (and a parameter set refused through rclpy's SetParametersResult)."""
    with rclpy_context() as context:
        _save_while_held_over_rclpy(context, tmp_path)


def _save_while_held_over_rclpy(context, tmp_path):
    import rclpy
    from rclpy.parameter import Parameter
    from std_srvs.srv import Trigger

    from diffsim_ros.runtime.rclpy_backend import RclpyNodeHandle, node_executor

    spin = lambda predicate, each=None: spin_until(executor, predicate, RELEASE_TIMEOUT, each)  # noqa: E731
    output, topic = tmp_path / "calibration.yaml", "/diffsim_ros_test/joint_states"
    node = rclpy.create_node("estimator", context=context, parameter_overrides=[
        Parameter("torque_estimate", value="off"), Parameter("save_on_shutdown", value=False),
        Parameter("calibration_output", value=str(output)), Parameter("joint_states_topic", value=topic)])
    probe = RclpyNodeHandle(rclpy.create_node("probe", context=context))
    executor = node_executor(context)
    started, release = threading.Event(), threading.Event()
    try:
        estimator = EstimatorNode(RclpyNodeHandle(node))
        executor.add_node(node)
        executor.add_node(probe.node)
        estimator.estimator.values.update({"payload.mass": np.array(1.25)})  # as an accepted update leaves it

        def held_update(now):
            started.set()
            assert release.wait(RELEASE_TIMEOUT)

        estimator.estimator.update = held_update
        publisher = probe.create_publisher(JOINT_STATE, topic, SENSOR_QOS)
        names, q = list(estimator.robot.joint_names), np.zeros(len(estimator.robot.joint_names))
        publish = lambda: publisher.publish(joint_state_msg(probe.messages, probe.now_ns(), names, q, q, q))  # noqa: E731
        assert spin(started.is_set, each=publish) and estimator.busy
        client = probe.node.create_client(Trigger, "/estimator/save_calibration")
        assert spin(client.service_is_ready)
        future = client.call_async(Trigger.Request())
        assert spin(future.done) and not release.is_set()  # answered while the update is held
        assert future.result().success and future.result().message == str(output)
        assert yaml.safe_load(output.read_text())["parameters"]["payload.mass"] == pytest.approx(1.25)
        release.set()
        assert spin(lambda: not estimator.busy)
        # ros2 param set's SetParametersResult: refused, with the reason naming the parameter.
        result = node.set_parameters([Parameter("window_seconds", value=float("nan"))])[0]
        assert not result.successful and "parameter 'window_seconds': must be a finite number" in result.reason
        assert node.get_parameter("window_seconds").value == 20.0
    finally:
        release.set()
        executor.shutdown()
        node.destroy_node()
        probe.node.destroy_node()


def _update(reason, accepted=False):
    return OnlineUpdate(time=1.0, accepted=accepted, reason=reason, holdout_rms_before=1.0,
                        holdout_rms_after=float("nan"), poses=4)


POOR_FIT = ("rejected: poor fit: the measured torques are not what the fitted model predicts: static torques: "
            "left_e1 slope {:.2f} offset {:+.3g} N·m (residual 2.1 N·m rms vs 3.0 measured)")
OUTCOMES = [
    "collecting data (1.2 s of motion, 0 rest poses)",
    "collecting data (3.4 s of motion, 1 rest poses)",
    "nothing held back to validate a candidate yet",
    POOR_FIT.format(-9.42, -3.04),
    POOR_FIT.format(-9.38, -3.1),  # the same kind, other numbers: not again at WARN
    "rejected: predicts the held-back data worse (1.31 > 1.2)",
    POOR_FIT.format(-9.5, -2.97),
    "rejected: predicts the held-back data worse (1.4 > 1.22)",
    "change detected at 12.50 s of the stream: the held-back data are predicted 5.1 times worse than the fitted "
    "and the usual ones; older data forgotten",
]


def test_a_rejected_fit_warns_once_per_kind_of_reason_and_routine_outcomes_are_debug(tmp_path):
    runtime, estimator = _estimator(tmp_path)
    outcomes = iter([_update(reason) for reason in OUTCOMES])
    estimator.estimator.update = lambda now: next(outcomes, None)
    runtime.spin_for(0.25 * len(OUTCOMES) + 0.1)  # one update every 0.25 s
    lines = [(r.level, r.message) for r in runtime.log_records if "update not accepted" in r.message]
    assert [message.split(": ", 1)[1] for _, message in lines] == OUTCOMES  # every outcome, in order
    levels = [level for level, _ in lines]
    assert levels == ["debug", "debug", "debug", "warning", "debug", "warning", "debug", "debug", "info"]
    assert all("\n" not in message for _, message in lines)
    # A reset starts the count again: the next rejection of a known kind is news.
    estimator._reset()
    estimator._update_done(_update(POOR_FIT.format(-9.1, -3.0)), None)
    assert runtime.log_records[-1].level == "warning" and "left_e1 slope -9.10" in runtime.log_records[-1].message
    runtime.shutdown()


def test_rejection_kinds_leave_out_numbers_not_joint_names():
    assert rejection_kind(POOR_FIT.format(-9.42, -3.04)) == rejection_kind(POOR_FIT.format(1.5, 2e-3))
    assert "left_e1" in rejection_kind(POOR_FIT.format(-9.42, -3.04))
    assert rejection_kind(POOR_FIT.format(-9.42, -3.04)) != rejection_kind(POOR_FIT.replace("left_e1", "left_s1").format(0, 0))
    assert rejection_kind("payload.mass = [7.5] outside the configured bounds [0.0, 5.0]") == \
        "payload.mass = [#] outside the configured bounds [#, #]"
