"""Recording scenarios on the MuJoCo plant: static holds, excitation, camera tracking.

These produce what a lab records on the real arm (``ros2 bag record``): joint states at
``joint_rate`` with efforts, camera poses of the tracked link at ``camera_rate``, and the
commanded torques. The controller that moves the plant only knows the *nominal* model.
"""

from dataclasses import dataclass, field

import numpy as np

from diffsim_ros.control.references import quintic_profile
from diffsim_ros.dynamics.fast import FastDynamics

__all__ = ["Recording", "RecordingScenario", "TorqueTrajectory", "hold_gains", "nearest_neighbour_order", "record", "torque_trajectory"]


@dataclass
class Recording:
    """Raw streams, like the topics of a bag (times in seconds).

    Attributes:
        joint_names: Joint order of the arrays.
        joint_time: (T,) stamps of joint states.
        q, qd, effort: (T, n) measured joint positions [rad], velocities [rad/s], efforts [N·m].
        command_time: (C,) stamps of commanded torques; command: (C, n) [N·m].
        camera_time: (K,) stamps of camera poses; camera_position (K, 3) [m]; camera_quaternion
            (K, 4) (w, x, y, z) of the tracked link in the camera frame.
        holds: List of (start, end) times [s] of the settled part of each static hold.
        camera_frame: Tracked link.
    """

    joint_names: tuple
    joint_time: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    effort: np.ndarray
    command_time: np.ndarray
    command: np.ndarray
    camera_time: np.ndarray
    camera_position: np.ndarray
    camera_quaternion: np.ndarray
    holds: list = field(default_factory=list)
    camera_frame: str | None = None


@dataclass(frozen=True)
class RecordingScenario:
    """How to drive the plant.

    Attributes:
        poses: (N, n) joint targets to hold [rad], visited in this order (see
            :func:`nearest_neighbour_order`).
        settle: Time to reach and settle on each pose [s] (not used as static data).
        hold: Settled time recorded as static data [s].
        excitation: Duration of a sinusoidal torque excitation after the holds [s] (0: none).
        excitation_amplitude: Per-joint torque amplitude [N·m], (n,) or scalar.
        joint_rate: Joint-state rate [Hz].
        camera_rate: Camera rate [Hz] (0: no camera).
        camera_frame: Tracked link.
        bandwidth: Closed-loop natural frequency of the recording controller [rad/s]; the PD
            gains are critically damped for the nominal joint-space inertia at each target.
        stiffness_floor: Minimum proportional gain [N·m/rad] (light distal joints still
            need to hold their share of an unknown payload).
        damping_floor: Minimum derivative gain [N·m·s/rad] (an unknown payload adds inertia
            the nominal-model gains do not know about).
        seed: Seed for the excitation phases.
    """

    poses: np.ndarray
    settle: float = 2.5
    hold: float = 0.5
    excitation: float = 0.0
    excitation_amplitude: float | np.ndarray = 1.0
    joint_rate: float = 100.0
    camera_rate: float = 30.0
    camera_frame: str | None = None
    bandwidth: float = 20.0
    stiffness_floor: float = 30.0
    damping_floor: float = 1.0
    seed: int = 0


class _SensorSampler:
    """Samples the plant's sensors at their rates while the controller runs."""

    def __init__(self, plant, scenario):
        self.plant = plant
        self.scenario = scenario
        self.streams = {k: [] for k in ("jt", "q", "qd", "e", "ct", "c", "kt", "kp", "kq")}
        self.next_joint = 0.0
        self.next_camera = 0.0

    def sample(self, command):
        t = self.plant.time
        s = self.streams
        if t + 1e-9 >= self.next_joint:
            q, qd, effort = self.plant.read_joint_state()
            s["jt"].append(t)
            s["q"].append(q)
            s["qd"].append(qd)
            s["e"].append(effort)
            s["ct"].append(t)
            s["c"].append(command)
            self.next_joint += 1.0 / self.scenario.joint_rate
        frame = self.scenario.camera_frame
        if frame and self.scenario.camera_rate > 0 and t + 1e-9 >= self.next_camera:
            position, quat = self.plant.read_camera_pose(frame)
            s["kt"].append(t)
            s["kp"].append(position)
            s["kq"].append(quat)
            self.next_camera += 1.0 / self.scenario.camera_rate

    def recording(self, holds):
        s = self.streams
        n = len(self.plant.joint_names)

        def arr(key, width):
            return np.asarray(s[key], dtype=float).reshape(-1, width) if s[key] else np.zeros((0, width))

        return Recording(
            joint_names=self.plant.joint_names,
            joint_time=np.asarray(s["jt"]),
            q=arr("q", n),
            qd=arr("qd", n),
            effort=arr("e", n),
            command_time=np.asarray(s["ct"]),
            command=arr("c", n),
            camera_time=np.asarray(s["kt"]),
            camera_position=arr("kp", 3),
            camera_quaternion=arr("kq", 4),
            holds=holds,
            camera_frame=self.scenario.camera_frame,
        )


def hold_gains(model, q, bandwidth=20.0, stiffness_floor=30.0, damping_floor=1.0):
    """Critically damped PD gains for the nominal joint inertia at ``q``: (kp, kd), (n,) each.

    Args:
        model: Nominal RobotModel.
        q: Held configuration [rad], shape (n,).
        bandwidth: Closed-loop natural frequency [rad/s].
        stiffness_floor: Minimum kp [N·m/rad]: light distal joints must still hold their share
            of an unknown payload.
        damping_floor: Minimum kd [N·m·s/rad]: an unknown payload adds inertia the nominal
            gains do not know about.
    """
    fast = FastDynamics.from_model(model)
    inertia = fast.mass_matrix_diagonal(np.asarray(q, dtype=np.float64))
    kp = np.maximum(inertia * bandwidth**2, stiffness_floor)
    return kp, np.maximum(2.0 * np.sqrt(kp * inertia), damping_floor)


def _pd_gains(nominal_model, target, scenario):
    return hold_gains(nominal_model, target, scenario.bandwidth, scenario.stiffness_floor, scenario.damping_floor)


def nearest_neighbour_order(poses):
    """Greedy ordering that keeps consecutive poses close (shorter, gentler transitions)."""
    remaining = list(range(1, len(poses)))
    order = [0]
    while remaining:
        last = poses[order[-1]]
        nearest = min(remaining, key=lambda i: np.abs(poses[i] - last).max())
        order.append(nearest)
        remaining.remove(nearest)
    return np.asarray(poses)[order]


def record(plant, nominal_model, scenario):
    """Drive the plant through a scenario and record its sensors.

    The controller is PD plus the *nominal* holding torque (gravity minus springs), so the
    settled efforts measure the true holding torque whatever the nominal model gets wrong.
    Targets move along rest-to-rest quintics over the first 60 % of the settle time, with
    the nominal inverse dynamics of the reference as feed-forward.

    Args:
        plant: :class:`~diffsim_ros.testbed.mujoco_plant.MujocoPlant`.
        nominal_model: The model the lab believes in (drives the feed-forward).
        scenario: :class:`RecordingScenario`.

    Returns:
        Recording.
    """
    nominal = FastDynamics.from_model(nominal_model)
    dt = plant.mj_model.opt.timestep
    sampler = _SensorSampler(plant, scenario)
    holds = []
    poses = np.asarray(scenario.poses, dtype=float)
    plant.reset(poses[0])
    previous = poses[0]
    for target in poses:
        kp, kd = _pd_gains(nominal_model, target, scenario)
        steps = int(round((scenario.settle + scenario.hold) / dt))
        start = plant.time
        hold_start = start + scenario.settle
        move = 0.6 * scenario.settle
        for _ in range(steps):
            pos, vel, acc = quintic_profile((plant.time - start) / move, move)
            ref = previous + pos * (target - previous)
            ref_vel, ref_acc = vel * (target - previous), acc * (target - previous)
            q, qd = plant.true_state()
            feedforward = nominal.rnea(ref, ref_vel, ref_acc) - nominal.spring_torques(ref)
            command = kp * (ref - q) + kd * (ref_vel - qd) + feedforward
            sampler.sample(command)
            plant.step(command)
        holds.append((hold_start, plant.time))
        previous = target
    if scenario.excitation > 0:
        kp, kd = _pd_gains(nominal_model, poses[-1], scenario)
        _excite(plant, nominal, scenario, poses[-1], kp, kd, sampler)
    return sampler.recording(holds)


def _excite(plant, nominal, scenario, center, kp, kd, sampler):
    """Sum-of-sines torques around a soft PD hold: rich, bounded joint motion."""
    rng = np.random.default_rng(scenario.seed)
    n = len(center)
    amplitude = np.broadcast_to(np.asarray(scenario.excitation_amplitude, float), (n,))
    freqs = rng.uniform(0.3, 2.0, size=(3, n))
    phases = rng.uniform(0, 2 * np.pi, size=(3, n))
    dt = plant.mj_model.opt.timestep
    start = plant.time
    for _ in range(int(round(scenario.excitation / dt))):
        q, qd = plant.true_state()
        t = plant.time - start
        wave = amplitude * np.sin(2 * np.pi * freqs * t + phases).sum(0) / 3.0
        command = 0.3 * kp * (center - q) - 0.3 * kd * qd + nominal.gravity_torques(q) - nominal.spring_torques(q) + wave
        sampler.sample(command)
        plant.step(command)


@dataclass
class TorqueTrajectory:
    """Torques held over each control period and the noisy states they produced.

    Attributes:
        dt: Control period [s].
        time: (T,) sample times [s].
        q, qd: (T, n) measured joint positions [rad] and velocities [rad/s] at the samples.
        tau: (T, n) torque applied during [time[t], time[t] + dt) [N·m] (clipped to limits).
        q_true, qd_true: (T, n) noise-free states.
    """

    dt: float
    time: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    tau: np.ndarray
    q_true: np.ndarray
    qd_true: np.ndarray


def torque_trajectory(plant, nominal_model, start, duration, *, rate=100.0, amplitude=(2, 4, 2, 2, 0.5, 0.5, 0.3),
                      bandwidth=8.0, seed=0):
    """Drive the plant with sum-of-sines torques around a soft hold, held constant per period.

    The torque is computed at ``rate`` (like a 100 Hz torque controller) from the measured
    state, so the applied torque of every period is known exactly: the ground truth for
    torque estimation.

    Args:
        plant: MujocoPlant (its time step must divide the control period).
        nominal_model: Model for the feed-forward holding torque.
        start: Centre configuration [rad], shape (n,).
        duration: Seconds.
        rate: Control rate [Hz].
        amplitude: Per-joint sine amplitude [N·m].
        bandwidth: Natural frequency of the soft hold [rad/s].
        seed: Excitation phases and frequencies.

    Returns:
        TorqueTrajectory.
    """
    nominal = FastDynamics.from_model(nominal_model)
    rng = np.random.default_rng(seed)
    start = np.asarray(start, float)
    n = len(start)
    amplitude = np.broadcast_to(np.asarray(amplitude, float), (n,))
    freqs, phases = rng.uniform(0.3, 1.5, (3, n)), rng.uniform(0, 2 * np.pi, (3, n))
    kp, kd = _pd_gains(nominal_model, start, RecordingScenario(poses=start[None], bandwidth=bandwidth, stiffness_floor=5.0, damping_floor=0.3))
    steps_per_period = int(round(1.0 / (rate * plant.mj_model.opt.timestep)))
    plant.reset(start)
    out = {k: [] for k in ("t", "q", "qd", "tau", "qt", "qdt")}
    for k in range(int(round(duration * rate))):
        q_meas, qd_meas, _ = plant.read_joint_state()
        q_true, qd_true = plant.true_state()
        t = k / rate
        wave = amplitude * np.sin(2 * np.pi * freqs * t + phases).sum(0) / 3.0
        tau = kp * (start - q_meas) - kd * qd_meas + nominal.gravity_torques(q_meas) - nominal.spring_torques(q_meas) + wave
        tau = np.clip(tau, -plant.effort_limit, plant.effort_limit)
        for key, value in zip(out, (t, q_meas, qd_meas, tau, q_true, qd_true)):
            out[key].append(value)
        plant.step(tau, steps=steps_per_period)
    return TorqueTrajectory(1.0 / rate, np.array(out["t"]), np.array(out["q"]), np.array(out["qd"]), np.array(out["tau"]),
                            np.array(out["qt"]), np.array(out["qdt"]))
