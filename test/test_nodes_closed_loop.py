"""Closed loop of the real nodes on the embedded runtime: sim_robot (MuJoCo Baxter with a hidden
payload and spring) + estimator + controller, in simulated time.

Checks that the online estimates converge to the hidden truth, that the controller picks them
up and tracks better, that the calibration file is written on request and on shutdown, and that
the recorded bag replayed with ``use_sim_time`` gives the same estimates.
"""

import numpy as np
import pytest

from diffsim_ros.pipelines.demo import rest_poses
from diffsim_ros.io.bags import bag_info
from diffsim_ros.io.calibration import load_calibration
from diffsim_ros.io.ros_types import EMPTY, FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE
from diffsim_ros.nodes.controller_node import ControllerNode
from diffsim_ros.nodes.estimator_node import EstimatorNode
from diffsim_ros.nodes.messages import estimates_from_msg
from diffsim_ros.nodes.sim_robot_node import SimRobotNode
from diffsim_ros.runtime import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from diffsim_ros.runtime.inputs import joint_state_input
from oracles import REPO

PARAMS = REPO / "config" / "baxter_sim.params.yaml"
TRUE_MASS, TRUE_COM, TRUE_STIFFNESS, TRUE_OFFSET = 1.3, [0.02, -0.01, 0.06], 9600.0, 0.14  # params file truth
PAYLOAD_TOL = 0.02  # [kg]
COM_TOL = 0.005  # [m]
STIFFNESS_REL = 0.01
OFFSET_TOL = 0.005  # [rad]
CAMERA_TOL = 0.005  # [m] camera position
REST_ERROR_IMPROVEMENT = 3.0  # rest error at the same poses must shrink at least this much
SEGMENT = 4.5  # [s] move 2.5 + hold 2.0 (params file)
REPEATS = 3  # rest poses visited again at the end
MPC_SECONDS = 0.5  # [s] MPC costs ~50 ms a cycle
MPC_HOLD_TOL = 0.02  # [rad] largest motion of an MPC hold on the calibrated model


class Probe:
    """Joint states (model order) and published estimates, as a user's node would see them."""

    def __init__(self, handle, joint_names):
        self.handle = handle
        self.joints = joint_state_input(joint_names, 1.0)
        self.samples, self.estimates = [], []
        handle.create_subscription(JOINT_STATE, "/robot/joint_states", self.on_joint_state, SENSOR_QOS)
        handle.create_subscription(FLOAT64_MULTI_ARRAY, "/estimator/estimates", self.on_estimates, LATCHED_QOS)
        self.save = handle.create_publisher(EMPTY, "/estimator/save", COMMAND_QOS)

    def on_joint_state(self, msg):
        sample = self.joints.update(msg, self.handle.now_ns())
        if sample is not None:
            self.samples.append((self.handle.now(), sample.positions))

    def on_estimates(self, msg):
        self.estimates.append((self.handle.now(), estimates_from_msg(msg)[0]))

    def position_at(self, t):
        return min(self.samples, key=lambda s: abs(s[0] - t))[1]


@pytest.fixture(scope="module")
def closed_loop(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("closed_loop")
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        runtime.record(tmp / "bag", storage="mcap", topics=["/robot/joint_states", "/robot/limb/left/joint_command",
                                                            "/estimator/estimates"])
        sim = runtime.add_node(SimRobotNode, "sim_robot")
        estimator = runtime.add_node(EstimatorNode, "estimator",
                                     parameter_overrides={"calibration_output": str(tmp / "calibration.yaml")})
        probe = Probe(runtime.create_node("probe"), sim.joint_names)
        poses = rest_poses(sim.robot.nominal, 6, seed=5)
        # The first poses again at the end: the same rests before and after calibration.
        waypoints = np.vstack([poses, poses[:REPEATS]])
        controller = runtime.add_node(ControllerNode, "controller",
                                      parameter_overrides={"reference.waypoints": waypoints.reshape(-1).tolist()})
        start = runtime.now()
        runtime.spin_for(SEGMENT * len(waypoints))
        probe.save.publish(probe.handle.new_message(EMPTY))
        runtime.spin_for(0.01)
        saved_on_request = list(estimator.saved)
        rest_errors = [np.abs(probe.position_at(start + SEGMENT * (k + 1) - 0.05) - target).max()
                       for k, target in enumerate(waypoints)]
        first_estimate = (probe.estimates[0][0] - start) if probe.estimates else np.inf
    return {"tmp": tmp, "sim": sim, "estimator": estimator, "controller": controller, "probe": probe,
            "rest_errors": rest_errors, "first_estimate": first_estimate, "saved_on_request": saved_on_request, "log": runtime.log_records}


def test_estimates_converge_to_the_hidden_truth(closed_loop):
    values = closed_loop["estimator"].estimator.values
    assert abs(values["payload.mass"] - TRUE_MASS) < PAYLOAD_TOL
    assert np.abs(values["payload.com"] - TRUE_COM).max() < COM_TOL
    assert abs(values["left_s1.spring.stiffness"] - TRUE_STIFFNESS) < STIFFNESS_REL * TRUE_STIFFNESS
    assert abs(values["left_s1.spring.offset"] - TRUE_OFFSET) < OFFSET_TOL
    camera = closed_loop["sim"].plant.truth.camera_pose  # random, from the sim's seed
    assert np.abs(values["camera.pose"][:3] - camera[:3, 3]).max() < CAMERA_TOL
    # Published with the documented layout, and taken up by the controller.
    _, last = closed_loop["probe"].estimates[-1]
    assert last["payload.mass"] == pytest.approx(float(values["payload.mass"]))
    controller = closed_loop["controller"]
    assert controller.model_updates == len(closed_loop["probe"].estimates) >= 1
    assert float(controller.model.get_parameter("payload.mass")) == pytest.approx(float(values["payload.mass"]))


def test_tracking_improves_once_the_controller_follows_the_estimates(closed_loop):
    errors, poses = closed_loop["rest_errors"], len(closed_loop["rest_errors"]) - REPEATS
    # Repeated poses whose move started on the estimated model, against a first visit that was
    # over before the first estimate (the estimator learns from the motion within seconds).
    first = closed_loop["first_estimate"]
    pairs = [(errors[k - poses], errors[k]) for k in range(poses, len(errors))
             if k * SEGMENT > first and (k - poses + 1) * SEGMENT <= first]
    assert pairs
    for before, after in pairs:
        assert after * REST_ERROR_IMPROVEMENT < before
    sim = closed_loop["sim"]
    assert sim.hardware.mode == "torque" and sim.hardware.fallbacks == 0 and sim.rejected_commands == 0


def test_calibration_saved_on_request_and_on_shutdown(closed_loop):
    path = closed_loop["tmp"] / "calibration.yaml"
    assert closed_loop["saved_on_request"] == [path]
    assert closed_loop["estimator"].saved == [path, path]  # and again at shutdown
    calibration = load_calibration(path)
    assert calibration.robot == "baxter_left" and set(calibration.groups) == {"payload", "spring", "damping", "friction", "camera"}
    assert len(calibration.parameters["camera.pose"]) == 7
    assert abs(calibration.parameters["payload.mass"] - TRUE_MASS) < PAYLOAD_TOL
    assert calibration.stddev["payload.mass"] > 0


def test_mpc_mode_holds_the_arm_on_the_calibrated_model(closed_loop):
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        sim = runtime.add_node(SimRobotNode, "sim_robot")
        start = sim.plant.true_state()[0]
        controller = runtime.add_node(ControllerNode, "controller", parameter_overrides={
            "mode": "mpc", "rate_hz": 100.0, "follow_estimates": False,
            "calibration_file": str(closed_loop["tmp"] / "calibration.yaml")})
        runtime.spin_for(MPC_SECONDS)
    # Every cycle but the first (before the first joint state) commands.
    assert controller.status.active and controller.output.published == int(MPC_SECONDS * 100) - 1
    assert np.abs(sim.plant.true_state()[0] - start).max() < MPC_HOLD_TOL
    assert sim.rejected_commands == 0


def test_bag_replay_with_sim_time_reproduces_the_estimates(closed_loop):
    bag = closed_loop["tmp"] / "bag"
    info = bag_info(bag)
    assert info.topics["/robot/limb/left/joint_command"][0] == JOINT_COMMAND
    with EmbeddedRuntime(parameter_files=[PARAMS]) as runtime:
        estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
            "use_sim_time": True, "save_on_shutdown": False, "groups": ["payload", "spring"]})
        player = runtime.play_bag(bag, topics=["/robot/joint_states"])
        runtime.spin_until_condition(lambda: player.done, timeout_s=SEGMENT * 10)
        runtime.spin_for(1.0)  # the last update check
    replayed, live = estimator.estimator.values, closed_loop["estimator"].estimator.values
    assert estimator.handle.now_ns() > 0 and player.published == estimator.joints.counters.received
    assert abs(replayed["payload.mass"] - live["payload.mass"]) < PAYLOAD_TOL / 4
    assert abs(replayed["left_s1.spring.stiffness"] - live["left_s1.spring.stiffness"]) < STIFFNESS_REL * TRUE_STIFFNESS / 4
