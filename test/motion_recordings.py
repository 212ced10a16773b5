"""Independent motion recordings: a MuJoCo Baxter arm under a computed-torque controller, as bags.

This generator shares nothing with diffsim_ros but the URDF file and the bag format: MuJoCo
integrates the plant (RK4 at 1 ms) with hidden true parameters; the controller is computed
torque on a *nominal* MuJoCo model (``mj_inverse``) plus PD tracking at 1 kHz, following a
5-harmonic multi-sine (0.1-0.5 Hz) that never rests; the recording is written with rosbags
directly:

* joint states (``sensor_msgs/msg/JointState``) at ``joint_rate``: all 14 arm joints plus the
  head in a shuffled order, effort = applied motor torque + noise;
* commanded torques (``std_msgs/msg/Float64MultiArray``, model joint order) at
  ``command_rate``, received when the controller computed them;
* camera poses (``geometry_msgs/msg/PoseStamped``) of the hand at ``camera_rate``.

The payload is a welded MuJoCo body, damping and Coulomb friction are MuJoCo's own
(``dof_damping``, ``frictionloss``); only Baxter's shoulder spring, which MuJoCo has no element
for, is applied as a generalized force from its formula (written again here on purpose).
"""

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from oracles import BAXTER_URDF

__all__ = ["ARM", "play_streams", "MotionSpec", "MotionTruth", "MotionStreams", "random_truth", "simulate", "decimate", "write_motion_bag",
           "record_motion_bag", "write_robot_config", "NOMINAL_SPRING", "TOPICS"]

ARM = ("left_s0", "left_s1", "left_e0", "left_e1", "left_w0", "left_w1", "left_w2")
NOMINAL_SPRING = {"stiffness": 8000.0, "offset": 0.10, "alpha1": 0.20, "l1": 0.30, "l2": 0.07, "rest_length": 0.20}
_EXTRA_JOINTS = ("head_pan", "right_s0", "right_s1", "right_e0", "right_e1", "right_w0", "right_w1", "right_w2")
# A locked joint's brake (MotionSpec.frozen_joint): a torque on that joint alone, as a real
# brake's. Resetting its position and velocity after each step instead would push every joint
# coupled to it through the mass matrix. Held over each 1 ms RK4 step (explicit), so no
# stiffer: 2e4 / 300 diverges. It holds the joint within 0.5 mrad, below the speed noise.
BRAKE_STIFFNESS = 5000.0  # [N·m/rad]
BRAKE_DAMPING = 40.0  # [N·m·s/rad]
_CENTER = np.array([0.1, -0.45, -0.2, 1.3, 0.2, 0.7, 0.1])
_AMPLITUDE = np.array([0.45, 0.30, 0.55, 0.45, 0.9, 0.55, 1.0])  # peak excursion [rad] per joint


@dataclass(frozen=True)
class MotionTruth:
    """Hidden parameters of the plant (SI units)."""

    payload_mass: float
    payload_com: tuple
    stiffness: float
    offset: float
    damping: tuple
    friction: tuple
    camera_pose: np.ndarray = field(repr=False)
    armature: tuple = ()
    """Reflected rotor inertia per arm joint [kg·m²] (MuJoCo's ``dof_armature``); empty: none."""
    links: tuple = ()
    """A wrong URDF: per arm link, ``(mass factor, COM shift [m] (3,), inertia factor)`` of the
    plant's link against the URDF's; empty: the URDF's inertials."""


@dataclass(frozen=True)
class MotionSpec:
    """Controller, excitation and recording settings."""

    duration: float = 20.0
    timestep: float = 1e-3
    control_rate: float = 1000.0
    joint_rate: float = 100.0
    command_rate: float = 100.0
    camera_rate: float = 30.0
    bandwidth: float = 12.0
    """[rad/s] natural frequency of the computed-torque error dynamics."""
    q_noise: float = 2e-4
    qd_noise: float = 4e-3
    effort_noise: float = 0.08
    camera_position_noise: float = 1.5e-3
    camera_rotation_noise: float = math.radians(0.3)
    frozen_joint: int | None = None
    """Index of an arm joint locked still (a brake: it never moves), or None."""
    payload_step: tuple | None = None
    """``(time [s], mass [kg])``: the payload's mass changes then (same COM), or a tuple of such
    pairs for several changes, or None."""
    excitation_seed: int = 0
    noise_seed: int = 1
    hold: tuple | None = None
    """``(start [s], end [s])``: the reference stands still at its ``start`` value meanwhile (a held
    arm), and goes on from there afterwards; or None."""
    kick: tuple | None = None
    """``(time [s], duration [s], torques [N·m] (7,))``: an external generalized force on the arm
    joints meanwhile (a collision), in no effort or command; or None."""


def _camera_pose(rng):
    target = np.array([0.7, 0.35, 0.25])
    direction = rng.normal(size=3)
    direction[2] = abs(direction[2]) * 0.4 + 0.3
    direction /= np.linalg.norm(direction)
    position = target + rng.uniform(1.0, 2.0) * direction
    z = (target - position) / np.linalg.norm(target - position)
    x = np.cross([0.0, 0.0, 1.0], z)
    x /= np.linalg.norm(x)
    pose = np.eye(4)
    pose[:3, :3] = np.stack([x, np.cross(z, x), z], axis=1)
    pose[:3, 3] = position
    return pose


def random_truth(seed, friction=False):
    """Truth in the issue's ranges; Coulomb friction on every joint when ``friction``."""
    rng = np.random.default_rng(1000 + seed)
    direction = rng.normal(size=3)
    com = direction / np.linalg.norm(direction) * rng.uniform(0.03, 0.10)
    sign = rng.choice([-1.0, 1.0], size=2)
    damping = np.concatenate([rng.uniform(1.0, 3.0, 4), rng.uniform(0.2, 0.55, 3)])
    mu = np.concatenate([rng.uniform(0.5, 1.5, 4), rng.uniform(0.1, 0.3, 3)]) if friction else np.zeros(7)
    return MotionTruth(
        payload_mass=float(rng.uniform(0.5, 2.0)),
        payload_com=tuple(float(c) for c in com),
        stiffness=float(8000.0 * (1.0 + sign[0] * rng.uniform(0.05, 0.30))),
        offset=float(0.10 + sign[1] * rng.uniform(0.015, 0.05)),
        damping=tuple(float(d) for d in damping),
        friction=tuple(float(m) for m in mu),
        camera_pose=_camera_pose(rng),
    )


def _mjcf(payload_mass=0.0, payload_com=(0.0, 0.0, 0.0)):
    """The URDF as MuJoCo XML: no geometry, joints other than the arm welded, payload body."""
    xml = BAXTER_URDF.read_text()
    xml = re.sub(r"<(visual|collision)\b.*?</\1>", "", xml, flags=re.S)
    xml = re.sub(r"<(gazebo|transmission)\b.*?</\1>", "", xml, flags=re.S)
    xml = re.sub(r'<joint\s+name="([^"]+)"\s+type="(revolute|continuous|prismatic)"',
                 lambda m: m.group(0) if m.group(1) in ARM else m.group(0).replace(m.group(2), "fixed"), xml)
    if payload_mass > 0:
        x, y, z = (float(c) for c in payload_com)
        xml = xml.replace("</robot>", (
            f'<link name="payload"><inertial><origin xyz="0 0 0"/><mass value="{float(payload_mass)!r}"/>'
            '<inertia ixx="1e-8" ixy="0" ixz="0" iyy="1e-8" iyz="0" izz="1e-8"/></inertial></link>'
            '<joint name="payload_weld" type="fixed"><parent link="left_hand"/><child link="payload"/>'
            f'<origin xyz="{x!r} {y!r} {z!r}"/></joint></robot>'))
    compiler = '<mujoco><compiler discardvisual="true" fusestatic="false" balanceinertia="false"/></mujoco>'
    return re.sub(r"(<robot[^>]*>)", r"\1" + compiler, xml, count=1)


def _spring_torque(theta, stiffness, offset):
    s = NOMINAL_SPRING
    phi = math.pi - s["alpha1"] - offset + theta
    length = math.sqrt(s["l1"] ** 2 + s["l2"] ** 2 - 2 * s["l1"] * s["l2"] * math.cos(phi))
    return -stiffness * (length - s["rest_length"]) * s["l1"] * s["l2"] * math.sin(phi) / length


class _Models:
    """The true plant and the controller's nominal model (URDF values, no payload)."""

    def __init__(self, truth, spec):
        import mujoco

        self.mj = mujoco
        self.plant = mujoco.MjModel.from_xml_string(_mjcf(truth.payload_mass, truth.payload_com))
        self.plant.opt.timestep = spec.timestep
        self.plant.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
        self.plant.opt.gravity[:] = (0.0, 0.0, -9.81)
        self.nominal = mujoco.MjModel.from_xml_string(_mjcf())
        self.nominal.opt.gravity[:] = (0.0, 0.0, -9.81)
        self.dof = np.array([self.plant.jnt_dofadr[mujoco.mj_name2id(self.plant, mujoco.mjtObj.mjOBJ_JOINT, j)] for j in ARM])
        self.qpos = np.array([self.plant.jnt_qposadr[mujoco.mj_name2id(self.plant, mujoco.mjtObj.mjOBJ_JOINT, j)] for j in ARM])
        for model in (self.plant, self.nominal):
            model.dof_armature[:] = 0.0
            model.dof_damping[:] = 0.0
            model.dof_frictionloss[:] = 0.0
        self.plant.dof_damping[self.dof] = truth.damping
        self.plant.dof_frictionloss[self.dof] = truth.friction
        if truth.armature:
            self.plant.dof_armature[self.dof] = truth.armature
        for joint, (mass, shift, inertia) in zip(ARM, truth.links):
            body = self.plant.jnt_bodyid[mujoco.mj_name2id(self.plant, mujoco.mjtObj.mjOBJ_JOINT, joint)]
            self.plant.body_mass[body] *= mass
            self.plant.body_ipos[body] += np.asarray(shift, dtype=float)
            self.plant.body_inertia[body] *= inertia
        # MuJoCo's default friction constraint is soft: on the light wrist joints it would not
        # reach mu below ~1 rad/s. A stiff one is Coulomb friction within ~0.05 rad/s.
        self.plant.dof_solref[self.dof] = (2 * spec.timestep, 1.0)
        self.plant.dof_solimp[self.dof] = (0.9999, 0.9999, 0.001, 0.5, 2.0)
        # The controller does not compensate damping: compensating more than the true damping
        # is negative damping on the light wrist joints (unstable).
        self.hand = mujoco.mj_name2id(self.plant, mujoco.mjtObj.mjOBJ_BODY, "left_hand")
        self.payload = mujoco.mj_name2id(self.plant, mujoco.mjtObj.mjOBJ_BODY, "payload")
        self.effort_limit = np.array([50.0, 100.0, 50.0, 50.0, 15.0, 15.0, 15.0])


def _reference(spec):
    """Multi-sine reference q(t), qd(t), qdd(t): 5 harmonics of 0.1 Hz with random phases."""
    rng = np.random.default_rng(spec.excitation_seed)
    freqs = 0.1 * np.arange(1, 6)
    weights = rng.uniform(0.3, 1.0, size=(5, 7)) / np.arange(1, 6)[:, None]
    phases = rng.uniform(0, 2 * np.pi, size=(5, 7))
    scale = _AMPLITUDE / weights.sum(0)
    if spec.frozen_joint is not None:
        scale = scale.copy()
        scale[spec.frozen_joint] = 0.0
    w = 2 * np.pi * freqs[:, None]
    hold = spec.hold

    def at(t):
        moving = 1.0
        if hold is not None and t > hold[0]:
            moving = 0.0 if t < hold[1] else 1.0
            t = hold[0] if t < hold[1] else t - (hold[1] - hold[0])
        arg = w * t + phases
        return (_CENTER + (scale * weights * np.sin(arg)).sum(0),
                moving * (scale * weights * w * np.cos(arg)).sum(0),
                -moving * (scale * weights * w**2 * np.sin(arg)).sum(0))

    return at


@dataclass
class MotionStreams:
    """Recorded streams (stamps in integer nanoseconds) and the truth behind them."""

    truth: MotionTruth
    spec: MotionSpec
    joint_ns: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    effort: np.ndarray
    command_ns: np.ndarray
    command: np.ndarray
    camera_ns: np.ndarray
    camera_position: np.ndarray
    camera_quaternion: np.ndarray
    """(w, x, y, z)"""
    q_true: np.ndarray = field(repr=False, default=None)


def _payload_steps(spec):
    """The payload changes of ``spec`` as ``((time [s], mass [kg]), ...)``."""
    steps = spec.payload_step
    if steps is None:
        return ()
    return (tuple(steps),) if np.ndim(steps[0]) == 0 else tuple(tuple(s) for s in steps)


def _due(step, rate, spec):
    period = int(round(1.0 / (rate * spec.timestep)))
    return step % period == 0


_KP_FLOOR = np.array([60.0, 60.0, 40.0, 40.0, 12.0, 12.0, 6.0])  # [N·m/rad] joint-space PD on top
_KD_FLOOR = np.array([6.0, 6.0, 4.0, 4.0, 0.8, 0.8, 0.4])  # [N·m·s/rad]


def _control(models, data_nom, ref, q, qd, omega):
    """Computed torque on the nominal model plus a joint-space PD floor (an unknown payload
    outweighs the wrist's nominal inertia, so inertia-scaled gains alone cannot hold it)."""
    q_ref, qd_ref, qdd_ref = ref
    mj = models.mj
    data_nom.qpos[models.qpos] = q
    data_nom.qvel[:] = 0.0
    data_nom.qvel[models.dof] = qd
    data_nom.qacc[:] = 0.0
    data_nom.qacc[models.dof] = qdd_ref + omega**2 * (q_ref - q) + 2 * omega * (qd_ref - qd)
    mj.mj_inverse(models.nominal, data_nom)
    tau = data_nom.qfrc_inverse[models.dof] + _KP_FLOOR * (q_ref - q) + _KD_FLOOR * (qd_ref - qd)
    tau[1] -= _spring_torque(q[1], NOMINAL_SPRING["stiffness"], NOMINAL_SPRING["offset"])
    return np.clip(tau, -models.effort_limit, models.effort_limit)


def _camera_sample(models, data, truth, spec, rng):
    link = np.eye(4)
    link[:3, :3] = data.xmat[models.hand].reshape(3, 3)
    link[:3, 3] = data.xpos[models.hand]
    in_camera = np.linalg.inv(truth.camera_pose) @ link
    rotvec = spec.camera_rotation_noise * rng.standard_normal(3)
    noisy = np.empty(4)
    models.mj.mju_axisAngle2Quat(noisy, rotvec / max(np.linalg.norm(rotvec), 1e-300), np.linalg.norm(rotvec))
    quat = np.empty(4)
    models.mj.mju_mat2Quat(quat, np.ascontiguousarray(in_camera[:3, :3]).reshape(9))
    out = np.empty(4)
    models.mj.mju_mulQuat(out, noisy, quat)
    return in_camera[:3, 3] + spec.camera_position_noise * rng.standard_normal(3), out if out[0] >= 0 else -out


def simulate(truth, spec=MotionSpec()):
    """Run the plant under the controller and record its sensors.

    Returns:
        MotionStreams.
    """
    models = _Models(truth, spec)
    mj = models.mj
    data, data_nom = mj.MjData(models.plant), mj.MjData(models.nominal)
    rng = np.random.default_rng(spec.noise_seed)
    reference = _reference(spec)
    q0, qd0, _ = reference(0.0)
    data.qpos[models.qpos], data.qvel[models.dof] = q0, qd0
    mj.mj_forward(models.plant, data)
    out = {k: [] for k in ("jt", "q", "qd", "e", "ct", "c", "kt", "kp", "kq", "qt")}
    steps = int(round(spec.duration / spec.timestep))
    control_every = int(round(1.0 / (spec.control_rate * spec.timestep)))
    tau = np.zeros(7)
    for step in range(steps + 1):
        t_ns = step * int(round(spec.timestep * 1e9))
        q, qd = data.qpos[models.qpos].copy(), data.qvel[models.dof].copy()
        if step % control_every == 0:
            sensed_q = q + 2e-5 * rng.standard_normal(7)
            sensed_qd = qd + 1e-3 * rng.standard_normal(7)
            tau = _control(models, data_nom, reference(step * spec.timestep), sensed_q, sensed_qd, spec.bandwidth)
        if _due(step, spec.joint_rate, spec):
            out["jt"].append(t_ns)
            out["q"].append(q + spec.q_noise * rng.standard_normal(7))
            out["qd"].append(qd + spec.qd_noise * rng.standard_normal(7))
            out["e"].append(tau + spec.effort_noise * rng.standard_normal(7))
            out["qt"].append(q)
        if _due(step, spec.command_rate, spec):
            out["ct"].append(t_ns)
            out["c"].append(tau.copy())
        if spec.camera_rate > 0 and step == int(round(len(out["kt"]) / (spec.camera_rate * spec.timestep))):
            position, quat = _camera_sample(models, data, truth, spec, rng)
            out["kt"].append(t_ns)
            out["kp"].append(position)
            out["kq"].append(quat)
        if step == steps:
            break
        for when, mass in _payload_steps(spec):
            if step == int(round(when / spec.timestep)):
                models.plant.body_mass[models.payload] = mass  # picked up or set down load
        data.qfrc_applied[:] = 0.0
        data.qfrc_applied[models.dof] = tau
        data.qfrc_applied[models.dof[1]] += _spring_torque(q[1], truth.stiffness, truth.offset)
        if spec.kick is not None and spec.kick[0] <= step * spec.timestep < spec.kick[0] + spec.kick[1]:
            data.qfrc_applied[models.dof] += np.asarray(spec.kick[2], float)  # a collision: in no sensor
        if spec.frozen_joint is not None:  # a brake: a stiff torque on that joint alone
            j = spec.frozen_joint
            data.qfrc_applied[models.dof[j]] -= BRAKE_STIFFNESS * (q[j] - q0[j]) + BRAKE_DAMPING * qd[j]
        mj.mj_step(models.plant, data)
    arr = {k: np.asarray(v) for k, v in out.items()}
    return MotionStreams(truth, spec, arr["jt"].astype(np.int64), arr["q"], arr["qd"], arr["e"], arr["ct"].astype(np.int64),
                         arr["c"], arr["kt"].astype(np.int64), arr["kp"].reshape(-1, 3), arr["kq"].reshape(-1, 4), arr["qt"])


def decimate(streams, joint_rate, camera_rate=None, command_rate=None):
    """The same recording at lower rates (every k-th sample, as a slower logger would keep)."""
    def keep(stamps, rate):
        period = int(round(1e9 / rate))
        return np.flatnonzero(stamps % period == 0)

    j = keep(streams.joint_ns, joint_rate)
    c = keep(streams.command_ns, command_rate or joint_rate)
    k = keep(streams.camera_ns, camera_rate or joint_rate) if camera_rate else np.arange(len(streams.camera_ns))
    if camera_rate:
        # 30 Hz stamps are not on a 10 Hz grid: keep the nearest camera sample to each new tick.
        ticks = np.arange(0, streams.camera_ns[-1] + 1, int(round(1e9 / camera_rate)))
        k = np.unique(np.abs(streams.camera_ns[None, :] - ticks[:, None]).argmin(1))
    spec = replace(streams.spec, joint_rate=joint_rate, command_rate=command_rate or joint_rate,
                   camera_rate=camera_rate or streams.spec.camera_rate)
    return MotionStreams(streams.truth, spec, streams.joint_ns[j], streams.q[j], streams.qd[j], streams.effort[j],
                         streams.command_ns[c], streams.command[c], streams.camera_ns[k], streams.camera_position[k],
                         streams.camera_quaternion[k], streams.q_true[j])


TOPICS = {"joint_states": "/robot/joint_states", "camera_pose": "/camera/left_hand/pose",
          "commanded_torques": "/robot/limb/left/torque_command"}


def write_motion_bag(streams, path, storage="mcap", shuffle_seed=3, nan_rows=()):
    """Write the streams as a rosbag2 with rosbags (joint names shuffled, extra joints added).

    Args:
        streams: MotionStreams.
        path: Bag directory to create.
        storage: "mcap" or "sqlite3".
        shuffle_seed: Seed of the joint-name order in the JointState messages.
        nan_rows: Joint-state sample indices whose positions are written as NaN (a glitching driver).
    """
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    JointState = store.types["sensor_msgs/msg/JointState"]
    Header = store.types["std_msgs/msg/Header"]
    Time = store.types["builtin_interfaces/msg/Time"]
    Array = store.types["std_msgs/msg/Float64MultiArray"]
    Layout = store.types["std_msgs/msg/MultiArrayLayout"]
    PoseStamped = store.types["geometry_msgs/msg/PoseStamped"]
    Pose = store.types["geometry_msgs/msg/Pose"]
    Point = store.types["geometry_msgs/msg/Point"]
    Quaternion = store.types["geometry_msgs/msg/Quaternion"]
    names = list(ARM) + list(_EXTRA_JOINTS)
    order = np.random.default_rng(shuffle_seed).permutation(len(names))
    nan_rows = set(int(i) for i in nan_rows)

    def header(ns, frame):
        return Header(stamp=Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000)), frame_id=frame)

    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    records = []
    epoch = 1_764_000_000 * 1_000_000_000  # wall-clock stamps, as a robot's driver writes them
    with Writer(Path(path), version=8, storage_plugin=plugin) as writer:
        js = writer.add_connection(TOPICS["joint_states"], JointState.__msgtype__, typestore=store)
        cmd = writer.add_connection(TOPICS["commanded_torques"], Array.__msgtype__, typestore=store)
        cam = writer.add_connection(TOPICS["camera_pose"], PoseStamped.__msgtype__, typestore=store)
        extra = np.zeros(len(_EXTRA_JOINTS))
        for i, ns in enumerate(streams.joint_ns + epoch):
            position = np.concatenate([streams.q[i], extra])
            if i in nan_rows:
                position[:7] = np.nan
            msg = JointState(header=header(ns, ""), name=[names[k] for k in order],
                             position=position[order], velocity=np.concatenate([streams.qd[i], extra])[order],
                             effort=np.concatenate([streams.effort[i], extra])[order])
            records.append((int(ns) + 200_000, js, msg))  # received 0.2 ms after the stamp
        for ns, tau in zip(streams.command_ns + epoch, streams.command):
            records.append((int(ns), cmd, Array(layout=Layout(dim=[], data_offset=0), data=np.asarray(tau, float))))
        for ns, p, quat in zip(streams.camera_ns + epoch, streams.camera_position, streams.camera_quaternion):
            pose = Pose(position=Point(x=p[0], y=p[1], z=p[2]), orientation=Quaternion(x=quat[1], y=quat[2], z=quat[3], w=quat[0]))
            records.append((int(ns) + 15_000_000, cam, PoseStamped(header=header(ns, "camera"), pose=pose)))
        records.sort(key=lambda r: r[0])
        for receive, connection, msg in records:
            writer.write(connection, receive, store.serialize_cdr(msg, connection.msgtype))
    return Path(path)


def record_motion_bag(path, seed, *, friction=False, spec=MotionSpec(), rate=None, storage="mcap", **kwargs):
    """Simulate a random truth and write its bag; ``rate`` decimates joint states and camera.

    Returns:
        (bag path, MotionTruth, MotionStreams).
    """
    streams = simulate(random_truth(seed, friction), replace(spec, excitation_seed=seed, noise_seed=100 + seed))
    if rate is not None:
        streams = decimate(streams, rate, camera_rate=min(rate, spec.camera_rate), command_rate=rate)
    return write_motion_bag(streams, path, storage, **kwargs), streams.truth, streams


def write_robot_config(path):
    """A robot config for these bags: the shipped Baxter left-arm config with this lab's topics."""
    import yaml

    from oracles import BAXTER_LEFT

    raw = yaml.safe_load(BAXTER_LEFT.read_text())
    raw["robot"]["urdf"] = str(BAXTER_URDF)
    raw["topics"] = dict(TOPICS)
    Path(path).write_text(yaml.safe_dump(raw))
    return Path(path)


def record_payload_step_bag(path, seed, *, duration=90.0, masses=(1.0, 1.9), rate=None, storage="mcap", camera=False):
    """Continuous motion (never at rest) with the payload's mass stepping at half time.

    Returns:
        (bag path, MotionTruth before the step, MotionStreams).
    """
    truth = replace(random_truth(seed), payload_mass=float(masses[0]))
    spec = MotionSpec(duration=duration, excitation_seed=seed, noise_seed=100 + seed,
                      payload_step=(duration / 2, float(masses[1])), camera_rate=30.0 if camera else 0.0)
    streams = simulate(truth, spec)
    if rate is not None:
        streams = decimate(streams, rate, camera_rate=min(rate, spec.camera_rate) if camera else None, command_rate=rate)
    return write_motion_bag(streams, path, storage), truth, streams


def play_streams(estimator, streams):
    """Feed an online estimator every sample of ``streams`` in time order: the commands up to each joint
    state, the joint state (with its effort), then an update at its time. Returns the estimator."""
    c = 0
    for ns, q, effort in zip(streams.joint_ns, streams.q, streams.effort):
        while c < len(streams.command_ns) and streams.command_ns[c] <= ns:
            estimator.add_commanded_torque(streams.command_ns[c] * 1e-9, streams.command[c])
            c += 1
        estimator.add_joint_state(ns * 1e-9, q, effort=effort)
        estimator.update(ns * 1e-9)
    return estimator
