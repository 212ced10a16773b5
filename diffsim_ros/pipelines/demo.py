"""The demo pipeline: the simulated Baxter graph calibrates itself online, in simulated time.

Runs the nodes of ``launch/baxter_sim.launch.py`` — sim_robot (MuJoCo Baxter left arm with a
hidden 1.3 kg payload and a stiffer, offset shoulder spring), estimator and controller — on
the embedded runtime with ``config/baxter_sim.params.yaml``, plus a probe node of its own:

1. **before**: impedance tracking (home -> A -> home) and a pure gravity-compensation hold
   (the arm held by hand while the torque ramps in, then released), on the nominal model;
2. **calibration while the arm works**: the arm moves continuously through random poses under
   impedance control (``seconds`` simulated seconds, no rest phase); the estimator learns
   payload, spring, damping, friction and camera from the motion, explained by the commanded
   torques (the 100 Hz efforts would miss every other 200 Hz command), and the controller
   follows every accepted estimate;
3. **payload change**: the hidden payload becomes ``payload[0]`` kg while the arm keeps moving
   (``payload[1]`` seconds); the estimator detects the change and tracks it, the controller
   follows; then the estimator saves ``calibration.yaml`` on request;
4. **after**: the same tests on the calibrated model (loaded from that file).

Between phases the controller stops and Baxter falls back to position mode, as on the robot.
Writes ``bag/`` (every topic), ``calibration.yaml``, ``<robot>_calibrated.urdf`` and
``report.png`` (:mod:`diffsim_ros.viz.demo`) atomically and returns a :class:`DemoResult`
with its metrics; ``diffsim-ros demo`` (:mod:`diffsim_ros.cli.demo`) prints it.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from diffsim_ros.dynamics.crba import mass_matrix
from diffsim_ros.io.calibration import atomic_directory
from diffsim_ros.io.ros_messages import NS_PER_S, seconds_to_ns
from diffsim_ros.io.ros_types import EMPTY, FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE
from diffsim_ros.io.urdf_export import export_calibrated_urdf
from diffsim_ros.model.poses import random_poses
from diffsim_ros.nodes.controller_node import ControllerNode
from diffsim_ros.nodes.estimator_node import EstimatorNode
from diffsim_ros.nodes.messages import estimates_from_msg
from diffsim_ros.nodes.outputs import baxter_topics
from diffsim_ros.nodes.robot import robot_topic
from diffsim_ros.nodes.sim_robot_node import SimRobotNode
from diffsim_ros.resources import share_directory
from diffsim_ros.runtime import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from diffsim_ros.runtime.inputs import joint_state_input
from diffsim_ros.testbed.scenarios import nearest_neighbour_order
from diffsim_ros.viz.demo import demo_report

__all__ = ["CALIBRATION_SEGMENT", "PAYLOAD_TRACKED", "DemoResult", "camera_error", "motion_poses", "payload_tracking",
           "rest_poses", "run_demo"]

PARAMS_FILE = "config/baxter_sim.params.yaml"
HOME = np.array([0.0, -0.55, 0.0, 1.3, 0.0, 0.8, 0.0])  # [rad] the sim robot's start pose
TEST_POSE = np.array([0.45, -0.25, -0.35, 0.95, 0.4, 1.1, 0.4])  # [rad] impedance test target
TEST_MOVE, TEST_HOLD = 2.0, 1.0  # [s] per impedance test segment (home, A, home)
TEST_SETTLE = TEST_MOVE + TEST_HOLD  # [s] the first segment (to home) is not scored
GRAVITY_SECONDS, GRAVITY_SETTLE = 3.0, 0.5  # [s] test, and the start held by hand while torque ramps in
CALIBRATION_SEGMENT = 4.0  # [s] per calibration move: continuous motion, no rests
PAYLOAD_TRACKED = 0.02  # relative payload mass error the summary calls "tracked"
SWITCH_PAUSE = 0.5  # [s] between controllers: Baxter falls back to position mode after 0.2 s
# [kg·m²] Smallest effective inertia 1 / (M^-1)_jj of s0, s1, e0, e1 along the moves: near the
# shoulder singularity the controller must limit the impedance damping (30, 30, 8, 10 N·m·s/rad)
# far below its set value to stay stable on 100 Hz joint states (control.impedance.stable_damping),
# and the arm would track the moves loosely there.
MIN_EFFECTIVE_INERTIA = np.array([0.2, 0.2, 0.05, 0.1])


@dataclass
class DemoResult:
    """What the demo measured.

    Attributes:
        paths: Output kind -> path (bag, calibration, urdf, report).
        nominal, truth, estimates, stddev: Parameter name -> value (floats or arrays).
        tracking: Metric name -> (before, after) [rad].
        traces: Test name -> {"before"/"after": (t [s] since the test start, error [rad])}.
        history: (time [s] since the start, values, stddev) of every published estimate.
        update_log: (time [s] since the start, held-back RMS before, after [N·m], accepted) per update.
        updates: Accepted estimator updates.
        sim_seconds, wall_seconds: Simulated and elapsed time [s].
        payload_change: (time [s] since the start, mass before, mass after [kg]) or None.
    """

    paths: dict[str, Path]
    nominal: dict[str, float | np.ndarray]
    truth: dict[str, float | np.ndarray]
    estimates: dict[str, float | np.ndarray]
    stddev: dict[str, float | np.ndarray]
    tracking: dict[str, tuple[float, float]]
    traces: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    history: list[tuple[float, dict, dict]] = field(default_factory=list)
    update_log: list[tuple[float, float, float, bool]] = field(default_factory=list)
    updates: int = 0
    sim_seconds: float = 0.0
    wall_seconds: float = 0.0
    payload_change: tuple[float, float, float] | None = None


# --- the graph -------------------------------------------------------------------------------


class _Probe:
    """The demo's own node: records joint states and estimates, and asks the estimator to save."""

    def __init__(self, handle, joint_names, joint_topic):
        self.handle = handle
        self.joints = joint_state_input(joint_names, 1.0, joint_topic)
        self.times, self.positions, self.history = [], [], []
        self.start_ns = handle.now_ns()
        handle.create_subscription(JOINT_STATE, joint_topic, self._on_joint_state, SENSOR_QOS)
        handle.create_subscription(FLOAT64_MULTI_ARRAY, "/estimator/estimates", self._on_estimates, LATCHED_QOS)
        self.save_request = handle.create_publisher(EMPTY, "/estimator/save", COMMAND_QOS)

    def _on_joint_state(self, msg):
        sample = self.joints.update(msg, self.handle.now_ns())
        if sample is not None:
            self.times.append(self.handle.now_ns())
            self.positions.append(sample.positions)

    def _on_estimates(self, msg):
        self.history.append((self.elapsed(self.handle.now_ns()), *estimates_from_msg(msg)))

    def window(self, start, end):
        """Joint samples received in [start, end] [s since the start]: times (T,) [ns], positions (T, n) [rad]."""
        times = np.asarray(self.times)
        start_ns, end_ns = (self.start_ns + seconds_to_ns(x) for x in (start, end))
        keep = (times >= start_ns) & (times <= end_ns)
        return times[keep], np.asarray(self.positions)[keep]

    def elapsed(self, now_ns):
        """Seconds since the start of the run."""
        return (now_ns - self.start_ns) / NS_PER_S


class _Graph:
    """The running demo graph: runtime, sim robot, estimator, probe; controllers per phase."""

    def __init__(self, runtime, tmp, log):
        self.runtime, self.tmp, self.log = runtime, tmp, log
        self.sim = runtime.add_node(SimRobotNode, "sim_robot")
        # The motion is explained by the commanded torques (200 Hz, each held until the next): the
        # 100 Hz measured efforts sample them and miss every other command.
        self.estimator = runtime.add_node(EstimatorNode, "estimator", parameter_overrides={
            "calibration_output": str(tmp / "calibration.yaml"),
            "commanded_torques_topic": baxter_topics(self.sim.config.side)[0],
            "commanded_torques_type": JOINT_COMMAND, "groups": ["payload", "spring", "damping", "friction", "camera"]})
        config = self.sim.robot.config
        self.probe = _Probe(runtime.create_node("demo_probe"), self.sim.joint_names, robot_topic(config, "joint_states"))

    def run_controller(self, namespace, seconds, held=0.0, **overrides):
        """Run a controller node for ``seconds``, stop it and let the robot fall back; returns (node, start [s]).

        With ``held`` [s], the arm is held still by hand while the controller engages.
        """
        controller = self.runtime.add_node(ControllerNode, "controller", namespace=namespace,
                                           parameter_overrides=overrides)
        start = self.probe.elapsed(self.runtime.now_ns())
        if held:
            self.sim.hold_by_hand(held)
        self.runtime.spin_for(seconds)
        controller.stop()
        self.runtime.spin_for(SWITCH_PAUSE)
        return controller, start

    def tests(self, label, **model):
        """Impedance tracking and gravity-compensation hold; returns {metric: value}, traces."""
        self.log(f"[demo] {label}: impedance tracking home -> A -> home, then gravity compensation hold")
        waypoints = np.concatenate([HOME, TEST_POSE, HOME]).tolist()
        duration = 3 * (TEST_MOVE + TEST_HOLD)
        controller, start = self.run_controller(
            f"{label}_impedance", duration, **model, **{"reference.waypoints": waypoints,
                                                        "reference.move_duration": TEST_MOVE,
                                                        "reference.hold_duration": TEST_HOLD})
        t, q = self.probe.window(start + TEST_SETTLE, start + duration)
        error = q - np.array([controller.reference(controller.control_time(ti))[0] for ti in t])
        _, hold_start = self.run_controller(f"{label}_gravity", GRAVITY_SECONDS, held=GRAVITY_SETTLE,
                                            mode="gravity_compensation", **model)
        th, qh = self.probe.window(hold_start + GRAVITY_SETTLE, hold_start + GRAVITY_SECONDS)
        drift = qh - qh[0]
        metrics = {
            "impedance tracking RMS error [rad]": float(np.sqrt(np.mean(error**2))),
            "impedance tracking max error [rad]": float(np.abs(error).max()),
            f"gravity compensation drift in {GRAVITY_SECONDS - GRAVITY_SETTLE:g} s after release [rad]":
                float(np.abs(drift).max()),
        }
        traces = {"impedance": ((t - t[0]) / NS_PER_S, np.abs(error).max(1)),
                  "gravity": ((th - th[0]) / NS_PER_S, np.abs(drift).max(1))}
        return metrics, traces

    def move(self, label, seconds, seed):
        """Move continuously through random poses (no rests), the controller following the estimates."""
        count = max(1, int(seconds // CALIBRATION_SEGMENT))
        poses = motion_poses(self.sim.robot.nominal, count, seed)
        self.log(f"[demo] {label}: {count} moves in {count * CALIBRATION_SEGMENT:g} s without rests, "
                 "controller following the online estimates")
        self.run_controller(label.replace(" ", "_"), count * CALIBRATION_SEGMENT, mode="impedance", follow_estimates=True,
                            **{"reference.waypoints": poses.reshape(-1).tolist(), "reference.hold_duration": 0.0,
                               "reference.move_duration": CALIBRATION_SEGMENT})

    def change_payload(self, mass):
        """The hidden payload becomes ``mass`` [kg] now; returns (time [s], mass before, mass after)."""
        before = self.sim.plant.truth.payload_mass
        self.sim.set_payload_mass(mass)
        self.log(f"[demo] payload change: {before:g} kg -> {mass:g} kg while the arm keeps moving")
        return self.probe.elapsed(self.runtime.now_ns()), before, mass

    def save(self):
        """Ask the estimator to save calibration.yaml; returns its path or None."""
        self.probe.save_request.publish(self.probe.handle.new_message(EMPTY))
        self.runtime.spin_for(0.01)
        return self.estimator.saved[-1] if self.estimator.saved else None


def _well_conditioned(model, q):
    """Whether the effective inertias of s0, s1, e0, e1 at ``q`` are at least MIN_EFFECTIVE_INERTIA."""
    with torch.no_grad():
        inverse = torch.linalg.inv(mass_matrix(model, torch.as_tensor(q, dtype=model.dtype)))
    return bool(np.all(1.0 / inverse.diagonal()[: len(MIN_EFFECTIVE_INERTIA)].numpy() >= MIN_EFFECTIVE_INERTIA))


def motion_poses(model, count, seed, checks=12):
    """Random poses to move through without rests, shape (count, n) [rad].

    Unlike rest poses, the arm never stops at them, so every move's whole joint-space path
    (checked at ``checks`` points) stays away from the shoulder singularity, where the
    impedance damping must be limited far below its set value (see MIN_EFFECTIVE_INERTIA).
    """
    rng = np.random.default_rng(seed)
    poses, previous = [], HOME
    while len(poses) < count:
        for q in random_poses(model, count, rng):
            path = previous + np.linspace(0.0, 1.0, checks)[:, None] * (q - previous)
            if all(_well_conditioned(model, point) for point in path):
                poses.append(q)
                previous = q
    return np.array(poses[:count])


def rest_poses(model, count, seed):
    """Random rest poses away from the shoulder singularity, ordered from HOME, shape (count, n) [rad].

    Args:
        model: Nominal Baxter arm model.
        count: Number of poses.
        seed: Random seed.
    """
    rng = np.random.default_rng(seed)
    poses = []
    while len(poses) < count:
        poses += [q for q in random_poses(model, count, rng) if _well_conditioned(model, q)]
    return nearest_neighbour_order(np.vstack([HOME, poses[:count]]))[1:]


def run_demo(out, *, seconds=45.0, force=False, storage="sqlite3", seed=3, payload=(2.0, 40.0), log=print):
    """Run the demo graph and write its outputs (see the module docstring).

    Args:
        out: Output directory (created atomically).
        seconds: Simulated seconds of online calibration while moving.
        payload: (mass after the change [kg], simulated seconds of motion after it), or None
            for no change.
        force: Replace an existing ``out``.
        storage: Bag storage, "sqlite3" or "mcap".
        seed: Seed of the calibration poses.
        log: ``log(line)`` for progress lines.

    Returns:
        DemoResult.

    Raises:
        FileExistsError: ``out`` exists and ``force`` is False (before any work).
    """
    out = Path(out)
    wall = time.perf_counter()
    with atomic_directory(out, force=force) as tmp:
        with EmbeddedRuntime(parameter_files=[share_directory() / PARAMS_FILE]) as runtime:
            runtime.record(tmp / "bag", storage=storage)
            graph = _Graph(runtime, tmp, log)
            before, traces_before = graph.tests("before", follow_estimates=False)
            graph.move("calibration while moving", seconds, seed)
            change = None
            if payload is not None:
                change = graph.change_payload(payload[0])
                graph.move("tracking the payload change", payload[1], seed + 1)
            saved = graph.save()
            calibrated = {"follow_estimates": False, "calibration_file": str(saved) if saved else ""}
            if saved is None:
                log("[demo] no estimate was accepted (too little motion?): 'after' uses the nominal model")
            after, traces_after = graph.tests("after", **calibrated)
            sim_seconds = graph.probe.elapsed(runtime.now_ns())
        result = _result(graph, out, before, after, traces_before, traces_after, sim_seconds)
        result.payload_change = change
        _write_model_files(graph, tmp, result)
    result.wall_seconds = time.perf_counter() - wall
    return result


def _named(model, names):
    """Nominal values of ``names`` (None for what is not a model parameter: camera.pose)."""
    known = set(model.parameter_names())
    return {name: model.get_parameter(name).detach().cpu().numpy() if name in known else None for name in names}


def _result(graph, out, before, after, traces_before, traces_after, sim_seconds):
    truth = graph.sim.true_parameters()
    estimator = graph.estimator.estimator
    tracking = {metric: (before[metric], after[metric]) for metric in before}
    traces = {name: {"before": traces_before[name], "after": traces_after[name]} for name in traces_before}
    name = graph.sim.robot.config.name
    paths = {"bag": out / "bag", "calibration": out / "calibration.yaml", "urdf": out / f"{name}_calibrated.urdf",
             "report": out / "report.png"}
    t0 = graph.probe.start_ns / NS_PER_S  # update times are joint-state stamps [s]
    log = [(u.time - t0, u.holdout_rms_before, u.holdout_rms_after, u.accepted) for u in estimator.updates]
    history = graph.probe.history
    return DemoResult(paths, _named(graph.sim.robot.nominal, truth), truth, dict(estimator.values),
                      dict(estimator.stddev), tracking, traces, history, log,
                      sum(u.accepted for u in estimator.updates), sim_seconds)


def _write_model_files(graph, tmp, result):
    """Calibrated URDF and report.png next to the bag and calibration.yaml."""
    robot = graph.sim.robot
    if result.estimates:
        export_calibrated_urdf(graph.estimator.estimator.model, robot.nominal, robot.config.urdf,
                               tmp / result.paths["urdf"].name)
    else:
        del result.paths["urdf"]
    if not (tmp / "calibration.yaml").exists():
        del result.paths["calibration"]
    demo_report(tmp / "report.png", result)


# --- metrics -----------------------------------------------------------------------------------


def payload_tracking(result):
    """(seconds after the change until every later payload estimate is within PAYLOAD_TRACKED, or None;
    the last estimate [kg]) of the demo's payload change, or None without one."""
    if result.payload_change is None:
        return None
    t_change, _, mass = result.payload_change
    after = [(t, values["payload.mass"]) for t, values, _ in result.history if t > t_change and "payload.mass" in values]
    if not after:
        return None, None
    tracked = None
    for t, value in reversed(after):
        if abs(value / mass - 1.0) > PAYLOAD_TRACKED:
            break
        tracked = t - t_change
    return tracked, after[-1][1]


def camera_error(result):
    """(position error [m], rotation error [deg]) of the estimated camera pose, or None."""
    if "camera.pose" not in result.estimates or "camera.pose" not in result.truth:
        return None
    true, estimate = np.asarray(result.truth["camera.pose"]), np.asarray(result.estimates["camera.pose"])
    cosine = abs(float(np.dot(true[3:], estimate[3:]) / (np.linalg.norm(true[3:]) * np.linalg.norm(estimate[3:]))))
    return float(np.linalg.norm(true[:3] - estimate[:3])), float(np.degrees(2.0 * np.arccos(min(cosine, 1.0))))
