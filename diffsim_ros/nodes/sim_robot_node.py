"""sim_robot_node: MuJoCo as the hardware, with hidden "true" parameters.

Stands in for a real arm: publishes joint states (model joints plus extra joints, in sorted
name order like Baxter's ``/robot/joint_states``) and noisy camera poses of the tracked link,
and applies incoming torque commands through an emulation of the real command interface
(:mod:`diffsim_ros.testbed.hardware`): Baxter ``JointCommand`` in TORQUE_MODE with the robot's
own gravity compensation and its fall-back to position mode when commands stop, or a
ros2_control ``JointGroupEffortController`` that drops commands of the wrong length.

Topics (names from the robot config unless overridden):

* publishes ``joint_states_topic`` (sensor_msgs/msg/JointState, SENSOR_QOS) at
  ``joint_state_rate_hz``: noisy positions, velocities and the applied motor efforts;
* publishes ``camera_topic`` (geometry_msgs/msg/PoseStamped, SENSOR_QOS) at
  ``camera_rate_hz`` (0: none): the tracked link in the camera frame;
* Baxter: subscribes ``/robot/limb/<side>/joint_command`` (baxter_core_msgs/msg/JointCommand,
  COMMAND_QOS) and ``/robot/limb/<side>/suppress_gravity_compensation`` (std_msgs/msg/Empty);
* ros2_control: subscribes ``/<controller_name>/commands`` (std_msgs/msg/Float64MultiArray,
  COMMAND_QOS), ``controller_joints`` in order;
* publishes ``/diagnostics`` (diagnostic_msgs/msg/DiagnosticArray) every second: joint states
  published and the longest silence between them (measured here, at the source), the physics
  real-time factor, rejected commands, garbage-collector pauses and the scheduling;
* with ``publish_clock``: publishes ``/clock`` (rosgraph_msgs/msg/Clock, CLOCK_QOS) after every
  physics update. Simulation time then advances by the simulated step (it falls behind the
  wall clock when the machine cannot keep up, as a simulator's clock should), stamps and the
  command interface use it, and the other nodes follow it with ``use_sim_time: true``.
"""

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from diffsim_ros.io.ros_messages import (
    NS_PER_S,
    TORQUE_MODE,
    clock_msg,
    JointNameMap,
    MessageConversionError,
    joint_command_to_array,
    joint_state_msg,
    pose_stamped_msg,
    seconds_to_ns,
)
from diffsim_ros.io.ros_types import CLOCK, EMPTY, FLOAT64_MULTI_ARRAY, JOINT_COMMAND, JOINT_STATE, POSE_STAMPED
from diffsim_ros.testbed.hardware import BaxterLimbEmulator, EffortControllerEmulator
from diffsim_ros.nodes.outputs import BAXTER, baxter_topics, controller_joint_order, effort_controller_topic, safety_output
from diffsim_ros.nodes.robot import DEFAULT_ROBOT_CONFIG, check_realtime_priority, joint_states_topic_param, load_robot, \
    realtime_priority_param, realtime_scheduling, robot_topic, set_threads, threads_param
from diffsim_ros.runtime import CLOCK_QOS, COMMAND_QOS, SENSOR_QOS, declare_config, param
from diffsim_ros.runtime.diagnostics import DIAGNOSTIC_ARRAY, OK, WARN, Gaps, diagnostic_array_msg, node_label, status
from diffsim_ros.runtime.heap import GcPauses, frozen_objects
from diffsim_ros.runtime.params import ParameterError, check_ranges, refuse_run_time_changes
from diffsim_ros.runtime.rclpy_backend import exit_process, run_node
from diffsim_ros.runtime.warmup import KernelWarmup
from diffsim_ros.testbed.mujoco_plant import MujocoPlant, PlantTruth, SensorNoise, random_camera_pose

__all__ = ["SimRobotConfig", "SimRobotNode", "main", "plant_truth"]

_DIAGNOSTICS_PERIOD = 1.0  # [s]
_STATE_GAP_LIMIT_MS = 50.0  # a controller's state_timeout is of this order (Baxter configs: 50 ms)


@dataclass(frozen=True)
class SimRobotConfig:
    """Parameters of sim_robot_node."""

    robot_config: str = param(DEFAULT_ROBOT_CONFIG, "robot config YAML (path or package:// URI)")
    output: str = param(BAXTER, "command interface: baxter (JointCommand) or ros2_control (Float64MultiArray)")
    side: str = param("left", "Baxter limb: topics /robot/limb/<side>/...")
    controller_name: str = param("effort_controller", "ros2_control: commands on /<controller_name>/commands")
    controller_joints: list[str] = param([], "ros2_control: the controller's joints in its order (default: the robot "
                                             "config's robot.controller_joints, else model order)")
    joint_states_topic: str = joint_states_topic_param()
    camera_topic: str = param("", "camera pose topic (default: the robot config's topics.camera_pose)")
    camera_frame_id: str = param("camera", "header frame of the camera poses")
    timestep: float = param(1e-3, "MuJoCo time step [s]")
    step_rate_hz: float = param(1000.0, "physics update rate [Hz]; each update runs 1/(rate*timestep) steps")
    joint_state_rate_hz: float = param(100.0, "joint state rate [Hz] (Baxter: 100)")
    camera_rate_hz: float = param(30.0, "camera pose rate [Hz] (0: no camera)")
    extra_joints: list[str] = param([], "joints published besides the model's (held at 0), e.g. head_pan")
    sort_joint_names: bool = param(True, "publish joint names sorted (Baxter's order) instead of model order")
    initial_positions: list[float] = param([], "start configuration [rad], model order (default: zeros within limits)")
    seed: int = param(0, "seed of the sensor noise and the random camera pose")
    publish_clock: bool = param(False, "publish /clock with the simulation time (other nodes: use_sim_time)")
    command_timeout: float = param(0.2, "Baxter: torque mode ends this long after the last command [s]")
    suppress_timeout: float = param(0.2, "Baxter: own gravity compensation returns this long after a suppress [s]")
    hold_bandwidth: float = param(20.0, "position-mode hold bandwidth [rad/s]")
    payload_mass: float = param(0.0, "hidden true payload mass [kg]", name="truth.payload_mass")
    payload_com: list[float] = param([0.0, 0.0, 0.0], "hidden true payload COM in the payload frame [m]", name="truth.payload_com")
    spring_joints: list[str] = param([], "joints whose true spring differs from nominal", name="truth.spring_joints")
    spring_stiffness: list[float] = param([], "true spring stiffness [N/m] per spring joint", name="truth.spring_stiffness")
    spring_offset: list[float] = param([], "true spring offset [rad] per spring joint (empty: nominal)", name="truth.spring_offset")
    camera_pose: list[float] = param([], "true camera pose [x, y, z, qx, qy, qz, qw] in the base frame (empty: random)",
                                     name="truth.camera_pose")
    noise_position: float = param(1e-4, "joint position noise [rad]", name="noise.joint_position")
    noise_velocity: float = param(1e-3, "joint velocity noise [rad/s]", name="noise.joint_velocity")
    noise_effort: float = param(0.05, "effort noise [N·m]", name="noise.effort")
    noise_camera_position: float = param(1e-3, "camera position noise [m]", name="noise.camera_position")
    noise_camera_rotation: float = param(0.0035, "camera rotation noise [rad]", name="noise.camera_rotation")
    threads: int = threads_param()
    realtime_priority: int = realtime_priority_param("it stands in for hardware with a real-time computer of its own")

    def validate(self):
        check_realtime_priority(self.realtime_priority)
        safety_output(self.output)
        check_ranges(self, positive=("timestep", "step_rate_hz", "joint_state_rate_hz", "command_timeout", "suppress_timeout",
                                     "hold_bandwidth", "threads"),
                     non_negative=("camera_rate_hz", "seed", "payload_mass", "spring_stiffness", "noise_position",
                                   "noise_velocity", "noise_effort", "noise_camera_position", "noise_camera_rotation"))
        if len(self.payload_com) != 3:
            raise ValueError("truth.payload_com needs 3 values")
        if len(self.spring_stiffness) != len(self.spring_joints) or len(self.spring_offset) not in (0, len(self.spring_joints)):
            raise ValueError("truth.spring_stiffness (and spring_offset, if given) need one value per truth.spring_joints")
        if len(self.camera_pose) not in (0, 7):
            raise ValueError("truth.camera_pose needs 7 values [x, y, z, qx, qy, qz, qw]")


def _pose_matrix(values):
    """(4, 4) pose of ``[x, y, z, qx, qy, qz, qw]``."""
    pose = np.eye(4)
    pose[:3, :3] = Rotation.from_quat(values[3:]).as_matrix()
    pose[:3, 3] = values[:3]
    return pose


def plant_truth(config, camera=True):
    """PlantTruth of a SimRobotConfig (a random camera pose from ``seed`` when none is given)."""
    springs = {}
    for i, joint in enumerate(config.spring_joints):
        springs[joint] = {"stiffness": config.spring_stiffness[i]}
        if config.spring_offset:
            springs[joint]["offset"] = config.spring_offset[i]
    camera_pose = None
    if camera:
        camera_pose = (_pose_matrix(np.asarray(config.camera_pose)) if config.camera_pose
                       else random_camera_pose(np.random.default_rng(config.seed)))
    return PlantTruth(config.payload_mass, tuple(config.payload_com), springs, camera_pose=camera_pose)


class SimRobotNode:
    """MuJoCo arm behind Baxter or ros2_control command topics (module docstring).

    Attributes:
        plant: MujocoPlant.
        hardware: BaxterLimbEmulator or EffortControllerEmulator (None while its kernels warm up,
            :mod:`diffsim_ros.runtime.warmup`: the arm is held still and commands are rejected).
        rejected_commands: Commands dropped (wrong mode, joints, length, or non-finite).
    """

    def __init__(self, handle):
        self.handle = handle
        self.config = cfg = declare_config(handle, SimRobotConfig)
        refuse_run_time_changes(handle, cfg)
        set_threads(cfg.threads)
        self.scheduling = realtime_scheduling(handle, cfg.realtime_priority)
        self.robot = load_robot(cfg.robot_config)
        model = self.robot.nominal
        self.joint_names = self.robot.joint_names
        self.tracked_frame = (self.robot.config.raw.get("camera") or {}).get("tracked_frame")
        camera = cfg.camera_rate_hz > 0 and self.tracked_frame is not None
        noise = SensorNoise(cfg.noise_position, cfg.noise_velocity, cfg.noise_effort, cfg.noise_camera_position,
                            cfg.noise_camera_rotation)
        self.plant = MujocoPlant(model, self.robot.config.urdf, plant_truth(cfg, camera), cfg.timestep, noise, cfg.seed)
        self.plant.reset(self._initial_positions(model))
        start = self.plant.true_state()[0]
        self.rejected_commands = 0
        self._held = None  # (until [ns], configuration [rad]) while held by hand
        self._substeps = max(1, int(round(1.0 / (cfg.step_rate_hz * cfg.timestep))))
        self._published_names, self._order = self._names(cfg)
        self._extra = np.zeros(len(cfg.extra_joints))
        self._sim_ns = handle.now_ns() if cfg.publish_clock else None  # simulation time [ns]
        self._step_ns = int(round(self._substeps * cfg.timestep * NS_PER_S))
        self.clock = handle.create_publisher(CLOCK, "/clock", CLOCK_QOS) if cfg.publish_clock else None
        self._setup_commands(cfg, model, start)
        # The emulated hardware's own hold is compiled (gravity, springs, M(q) for its gains): it is
        # built once its kernels are in the cache, on the warm-up's worker thread, never on the executor.
        self.hardware = None
        self.warmup = KernelWarmup(["control"], self._build_hardware, handle.get_logger(), enabled=handle.owns_process)
        if self.warmup.state == "ready":  # a node sharing its process: compiled on first use, as before
            self._build_hardware()
        handle.add_on_shutdown(self.warmup.close)
        joint_topic = robot_topic(self.robot.config, "joint_states", cfg.joint_states_topic) or "/joint_states"
        self.joint_states = handle.create_publisher(JOINT_STATE, joint_topic, SENSOR_QOS)
        self.state_gaps = Gaps(_STATE_GAP_LIMIT_MS)
        self.gc_pauses = GcPauses()
        handle.add_on_shutdown(self.gc_pauses.close)
        self.physics_updates = 0
        self._real_time = None  # (node time [s], physics updates) at the previous diagnostics
        self.diagnostics = handle.create_publisher(DIAGNOSTIC_ARRAY, "/diagnostics", 10)
        handle.create_timer(_DIAGNOSTICS_PERIOD, self._publish_diagnostics)
        handle.create_timer(self._substeps * cfg.timestep, self._step)
        self.joint_state_timer = handle.create_timer(1.0 / cfg.joint_state_rate_hz, self._publish_joint_state)
        if camera:
            camera_topic = robot_topic(self.robot.config, "camera_pose", cfg.camera_topic) or "/camera/pose"
            self.camera = handle.create_publisher(POSE_STAMPED, camera_topic, SENSOR_QOS)
            handle.create_timer(1.0 / cfg.camera_rate_hz, self._publish_camera)

    # ------------------------------------------------------------------ set-up
    def _initial_positions(self, model):
        if self.config.initial_positions:
            q = np.asarray(self.config.initial_positions, dtype=np.float64)
            if q.shape != (model.nq,):
                raise ParameterError(f"node '{self.handle.name}': initial_positions needs {model.nq} values, got {len(q)}")
            return q
        return np.clip(np.zeros(model.nq), model.lower.numpy(), model.upper.numpy())

    def _names(self, cfg):
        """Published joint names and the permutation from (model joints + extra joints) to them."""
        clash = sorted(set(cfg.extra_joints) & set(self.joint_names))
        if clash:
            raise ParameterError(f"node '{self.handle.name}': extra_joints {clash} are model joints")
        names = list(self.joint_names) + list(cfg.extra_joints)
        order = np.argsort(names, kind="stable") if cfg.sort_joint_names else np.arange(len(names))
        return [names[i] for i in order], order

    def _setup_commands(self, cfg, model, start):
        handle = self.handle
        if cfg.output == BAXTER:
            self._new_hardware = lambda: BaxterLimbEmulator(model, start, cfg.command_timeout, cfg.suppress_timeout,
                                                            cfg.hold_bandwidth)
            self._command_map = JointNameMap(self.joint_names)
            command_topic, suppress_topic = baxter_topics(cfg.side)
            handle.create_subscription(JOINT_COMMAND, command_topic, self._on_joint_command, COMMAND_QOS)
            handle.create_subscription(EMPTY, suppress_topic, self._on_suppress, COMMAND_QOS)
        else:
            self._new_hardware = lambda: EffortControllerEmulator(model, start, cfg.hold_bandwidth)
            self._controller_order = controller_joint_order(
                self.joint_names, cfg.controller_joints or self.robot.config.controller_joints)
            topic = effort_controller_topic(cfg.controller_name)
            handle.create_subscription(FLOAT64_MULTI_ARRAY, topic, self._on_effort_command, COMMAND_QOS)

    # ------------------------------------------------------------------ time
    def now_ns(self):
        """The robot's time [ns]: simulation time with ``publish_clock``, else node time."""
        return self._sim_ns if self._sim_ns is not None else self.handle.now_ns()

    def now(self):
        """The robot's time [s]."""
        return self.now_ns() / NS_PER_S

    # ------------------------------------------------------------------ commands
    def _reject(self, reason):
        self.rejected_commands += 1
        self.handle.get_logger().warning(f"command rejected: {reason}", throttle_duration_sec=1.0)

    def _on_joint_command(self, msg):
        if not self.warmup.ready:
            return self._reject("the hardware is still starting (kernels warming up)")
        try:
            tau = joint_command_to_array(msg, self._command_map, require_mode=TORQUE_MODE)
        except MessageConversionError as err:
            return self._reject(str(err))
        if not np.all(np.isfinite(tau)):
            return self._reject("non-finite torques")  # a real drive faults; nothing applied
        self.hardware.command(self.now(), tau)

    def _on_suppress(self, msg):
        if not self.warmup.ready:
            return
        self.hardware.suppress_gravity_compensation(self.now())

    def _on_effort_command(self, msg):
        if not self.warmup.ready:
            return self._reject("the hardware is still starting (kernels warming up)")
        data = np.asarray(msg.data, dtype=np.float64)
        if data.shape != (len(self._controller_order),) or not np.all(np.isfinite(data)):
            # JointGroupEffortController refuses commands of the wrong size; drives refuse NaN.
            return self._reject(f"{data.size} values for {len(self._controller_order)} joints or non-finite")
        tau = np.empty(len(self.joint_names))
        tau[self._controller_order] = data
        self.hardware.command(self.now(), tau)

    # ------------------------------------------------------------------ physics and sensors
    def _build_hardware(self):
        """The emulated hardware, its hold computed once (loads its kernels)."""
        hardware = self._new_hardware()
        q, qd = self.plant.true_state()
        hardware.torques(0.0, q, qd)
        self.hardware = hardware

    def _step(self):
        q, qd = self.plant.true_state()
        warm = self.warmup.ready  # until then the arm is held still, as by its brakes while the robot boots
        self.plant.step(self.hardware.torques(self.now(), q, qd) if warm else np.zeros_like(q), steps=self._substeps)
        if not warm:
            self.plant.reset(q)
        self.physics_updates += 1
        if self.clock is not None:
            self._sim_ns += self._step_ns
            self.clock.publish(clock_msg(self.handle.messages, self._sim_ns))
        if self._held is not None:
            until, q_held = self._held
            if self.now_ns() < until:
                self.plant.reset(q_held)  # the hand keeps the arm where it was, at rest
            else:
                self._held = None

    def hold_by_hand(self, seconds):
        """Keep the arm still for ``seconds`` of node time, as a hand or a brake would (in-process use).

        Lets a test engage a torque controller without the ramp-in transient: once released,
        the arm moves only as the controller's model error makes it.
        """
        self._held = (self.now_ns() + seconds_to_ns(seconds), self.plant.true_state()[0])

    def set_payload_mass(self, mass):
        """Change the hidden true payload mass [kg] now (in-process use: demos and tests)."""
        self.plant.set_payload_mass(mass)
        self.handle.get_logger().info(f"true payload mass changed to {mass:g} kg")

    def _publish_joint_state(self):
        values = [np.concatenate([v, self._extra])[self._order] for v in self.plant.read_joint_state()]
        self.joint_states.publish(joint_state_msg(self.handle.messages, self.now_ns(), self._published_names, *values))
        self.state_gaps.tick(self.handle.now_ns() / NS_PER_S)  # node time: the wall clock on a real graph

    def _publish_diagnostics(self):
        now_ns = self.handle.now_ns()
        statuses = [self.warmup.status(node_label(self.handle)), self._hardware_status()]
        self.diagnostics.publish(diagnostic_array_msg(self.handle.messages, now_ns, statuses))

    def _real_time_factor(self):
        """Simulated seconds per second of node time (the wall clock on a real graph) since the previous call."""
        now, previous = self.handle.now_ns() / NS_PER_S, self._real_time
        self._real_time = (now, self.physics_updates)
        if previous is None or now <= previous[0]:
            return float("nan")
        return (self.physics_updates - previous[1]) * self._step_ns / NS_PER_S / (now - previous[0])

    def _hardware_status(self):
        factor = self._real_time_factor()
        behind = factor < 0.95  # the hardware it stands in for never falls behind
        level = WARN if behind or self.state_gaps.over_limit else OK
        message = ("falling behind real time" if behind else
                   "joint states paused" if self.state_gaps.over_limit else "running")
        values = {"joint states published": self.state_gaps.events, **self.state_gaps.values("joint state"),
                  "physics updates": self.physics_updates, "real-time factor": f"{factor:.3f}",
                  "rejected commands": self.rejected_commands,
                  "largest GC pause [ms]": f"{self.gc_pauses.largest_ms:.1f}",
                  "full GC collections": self.gc_pauses.full_collections,
                  "GC frozen objects": frozen_objects(), "scheduling": self.scheduling}
        return status(level, f"{node_label(self.handle)}: hardware", message, values)

    def _publish_camera(self):
        position, quaternion = self.plant.read_camera_pose(self.tracked_frame)
        self.camera.publish(pose_stamped_msg(self.handle.messages, self.now_ns(), self.config.camera_frame_id,
                                             position, quaternion))

    def true_parameters(self):
        """The hidden truth by calibration parameter name (payload, springs, camera.pose [x, y, z, qx, qy, qz, qw])."""
        truth = self.plant.truth
        values = {"payload.mass": truth.payload_mass, "payload.com": np.asarray(truth.payload_com, dtype=float)}
        nominal = self.robot.nominal
        for joint in (nominal.joint_names[j] for j in nominal.spring_joints):
            for key in ("stiffness", "offset"):
                name = f"{joint}.spring.{key}"
                values[name] = float(truth.springs.get(joint, {}).get(key, nominal.get_parameter(name)))
        if truth.camera_pose is not None:
            pose = np.asarray(truth.camera_pose, dtype=float)
            quaternion = Rotation.from_matrix(pose[:3, :3]).as_quat()
            values["camera.pose"] = np.concatenate([pose[:3, 3], quaternion if quaternion[3] >= 0 else -quaternion])
        return values


def main(args=None):
    """Entry point of ``ros2 run diffsim_ros sim_robot_node`` (ends the process: exit code 0, or 1 after a start-up error)."""
    exit_process(run_node(SimRobotNode, "sim_robot", args))


if __name__ == "__main__":
    main()
