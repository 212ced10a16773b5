"""A wrong URDF, as a lab has it: a "real" MuJoCo arm whose inertials differ from its URDF (issue 46).

An independent generator, sharing nothing with ``motion_recordings.py`` or
``diffsim_ros/testbed`` but the URDF text: every link with mass has its mass off by 15-25 %
(random sign), its COM moved 1-3 cm in a random direction and its inertia about the COM
scaled by a positive factor (so each link stays physically consistent); every arm joint gets
an armature (``dof_armature``: reflected rotor inertia), viscous damping (``dof_damping``) and
Coulomb friction (``dof_frictionloss``: MuJoCo's dry friction, a constraint whose force is
``-mu sign(qd)`` while the joint slides and anything within +-mu while it sticks).

The arm is driven along a finite Fourier series (Swevers' excitation, 5 harmonics) by
joint-space PD plus the *nominal* URDF's gravity (Pinocchio), at 1 kHz, integrated by MuJoCo's
``implicitfast`` at 0.5 ms; recorded in ros2_control conventions: a joint_state_broadcaster's
``/joint_states`` at 200 Hz (every movable joint of the URDF in alphabetical order, the
Panda's fingers at 0; efforts = the applied torque + 0.05 N·m noise) and the effort
controller's ``std_msgs/Float64MultiArray`` commands at 1 kHz in the controller's joint order.
"""

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from oracles import PinocchioOracle, example_robot_urdf, mujoco_model

__all__ = ["ARMS", "ArmSpec", "Excitation", "PayloadStep", "RealArm", "Recording", "link_inertials", "make_real_arm", "mujoco_arm", "perturb_inertials",
           "record", "write_ros2_control_bag"]

MASS_ERROR = (0.15, 0.25)  # relative, random sign
COM_ERROR = (0.01, 0.03)  # [m]
INERTIA_SCALE = (0.8, 1.25)  # times the mass ratio
TIMESTEP = 5e-4  # [s]
CONTROL_RATE = 1000.0  # [Hz]
JOINT_RATE = 200.0  # [Hz]
NOISE = {"q": 5e-5, "qd": 2e-3, "effort": 0.05}  # standard deviations [rad, rad/s, N·m]
T0 = 1.75e9  # [s] first stamp
JOINT_STATES, COMMANDS = "/joint_states", "/effort_controller/commands"


@dataclass(frozen=True)
class ArmSpec:
    """One arm: its URDF, chain joints, off-chain joints, controller order, gains and hidden passive ranges."""

    urdf: str
    joints: tuple
    extra_joints: tuple
    controller_joints: tuple
    kp: tuple
    kd: tuple
    armature: tuple
    """[kg·m²] (low, high) per joint."""
    damping: tuple
    """[N·m·s/rad] (low, high) per joint."""
    friction: tuple
    """[N·m] (low, high) per joint."""
    amplitude: float = 0.9
    """[rad] largest excursion from the middle of each joint's range (and at most 60 % of its half range)."""
    speed: float = 1.3
    """[rad/s] largest reference speed."""

    @property
    def urdf_path(self):
        return example_robot_urdf(self.urdf)


_PANDA = tuple(f"panda_joint{i}" for i in range(1, 8))
_UR5 = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint")
ARMS = {
    "panda": ArmSpec("panda_description/urdf/panda.urdf", _PANDA, ("panda_finger_joint1", "panda_finger_joint2"),
                     tuple(_PANDA[i] for i in (6, 0, 2, 1, 5, 4, 3)),  # the controller's order differs from the chain's
                     kp=(600, 600, 600, 600, 250, 150, 50), kd=(50, 50, 50, 40, 25, 20, 10),
                     armature=((0.15, 0.35),) * 4 + ((0.05, 0.12),) * 3, damping=((0.3, 0.8),) * 4 + ((0.1, 0.3),) * 3,
                     friction=((0.4, 1.0),) * 4 + ((0.15, 0.4),) * 3),
    "ur5": ArmSpec("ur_description/urdf/ur5_robot.urdf", _UR5, (), _UR5,
                   kp=(2500, 2500, 1500, 300, 300, 100), kd=(120, 120, 80, 20, 20, 8),
                   armature=((0.3, 0.6),) * 3 + ((0.05, 0.12),) * 3, damping=((1.0, 2.5),) * 3 + ((0.2, 0.5),) * 3,
                   friction=((1.5, 3.0),) * 3 + ((0.3, 0.8),) * 3),
}


def link_inertials(urdf_text):
    """Link name -> (mass [kg], COM xyz [m] in the link frame, 3x3 inertia about the COM [kg·m²]), links with an inertial."""
    out = {}
    for link in ET.fromstring(urdf_text).iter("link"):
        inertial = link.find("inertial")
        if inertial is None or inertial.find("mass") is None:
            continue
        origin = inertial.find("origin")
        xyz = np.array([float(v) for v in (origin.get("xyz", "0 0 0") if origin is not None else "0 0 0").split()])
        i = {k: float(v) for k, v in inertial.find("inertia").attrib.items()}
        tensor = np.array([[i["ixx"], i["ixy"], i["ixz"]], [i["ixy"], i["iyy"], i["iyz"]], [i["ixz"], i["iyz"], i["izz"]]])
        out[link.get("name")] = (float(inertial.find("mass").get("value")), xyz, tensor)
    return out


def _num(value):
    return f"{float(value):.17g}"


def perturb_inertials(urdf_text, rng):
    """The URDF text with every link of positive mass changed; returns ``(text, changes)``.

    ``changes``: link -> ``{"mass_ratio", "com_offset" [m] (3,), "inertia_scale"}``. The
    inertia about the COM is multiplied by ``inertia_scale`` > 0 (in the inertial's own
    orientation), so a physically consistent link stays so; the COM moves in the link frame.
    """
    root = ET.fromstring(urdf_text)
    changes = {}
    for link in root.iter("link"):
        inertial = link.find("inertial")
        mass = None if inertial is None else inertial.find("mass")
        if mass is None or float(mass.get("value")) <= 0.0:
            continue
        ratio = 1.0 + rng.choice((-1.0, 1.0)) * rng.uniform(*MASS_ERROR)
        direction = rng.standard_normal(3)
        offset = direction / np.linalg.norm(direction) * rng.uniform(*COM_ERROR)
        scale = ratio * rng.uniform(*INERTIA_SCALE)
        mass.set("value", _num(float(mass.get("value")) * ratio))
        origin = inertial.find("origin")
        if origin is None:
            origin = ET.SubElement(inertial, "origin", {"xyz": "0 0 0", "rpy": "0 0 0"})
        xyz = np.array([float(v) for v in origin.get("xyz", "0 0 0").split()]) + offset
        origin.set("xyz", " ".join(_num(v) for v in xyz))
        inertia = inertial.find("inertia")
        for key, value in list(inertia.attrib.items()):
            inertia.set(key, _num(float(value) * scale))
        changes[link.get("name")] = {"mass_ratio": ratio, "com_offset": offset, "inertia_scale": scale}
    return ET.tostring(root, encoding="unicode"), changes


@dataclass(frozen=True)
class RealArm:
    """The hidden truth of one arm: its URDF text and passive joint parameters (chain order)."""

    name: str
    spec: ArmSpec
    urdf_text: str
    changes: dict
    armature: np.ndarray
    damping: np.ndarray
    friction: np.ndarray

    def save(self, directory):
        """``real.urdf`` and ``truth.json`` (passive parameters by joint) into ``directory``; returns the JSON path."""
        directory = Path(directory)
        (directory / "real.urdf").write_text(self.urdf_text)
        path = directory / "truth.json"
        path.write_text(json.dumps({"urdf": str(directory / "real.urdf"), "joints": list(self.spec.joints),
                                    "armature": self.armature.tolist(), "damping": self.damping.tolist(),
                                    "friction": self.friction.tolist()}, indent=1))
        return path


def make_real_arm(name, seed):
    """The "real" arm ``name`` of ARMS with its hidden truth drawn from ``seed``."""
    spec = ARMS[name]
    rng = np.random.default_rng(seed)
    text, changes = perturb_inertials(spec.urdf_path.read_text(), rng)
    draw = lambda ranges: np.array([rng.uniform(lo, hi) for lo, hi in ranges])  # noqa: E731
    return RealArm(name, spec, text, changes, draw(spec.armature), draw(spec.damping), draw(spec.friction))


@dataclass(frozen=True)
class PayloadStep:
    """A point-mass payload welded to ``frame`` at ``com`` [m] whose mass [kg] changes at ``time`` [s] (a load
    picked up or set down during the motion)."""

    frame: str
    com: tuple
    before: float
    after: float
    time: float

    def link(self):
        """The payload as URDF text: a link named ``payload`` and its fixed joint."""
        x, y, z = (float(v) for v in self.com)
        return (f'<link name="payload"><inertial><origin xyz="0 0 0"/><mass value="{_num(self.before)}"/>'
                '<inertia ixx="1e-9" ixy="0" ixz="0" iyy="1e-9" iyz="0" izz="1e-9"/></inertial></link>'
                f'<joint name="payload_weld" type="fixed"><parent link="{self.frame}"/><child link="payload"/>'
                f'<origin xyz="{_num(x)} {_num(y)} {_num(z)}" rpy="0 0 0"/></joint>')


def mujoco_arm(arm, directory, payload=None):
    """MuJoCo model of the real arm (with the :class:`PayloadStep`'s body ``payload`` before its step, if any), the
    off-chain joints fixed at 0, and the dof index of each chain joint."""
    text = arm.urdf_text
    for joint in arm.spec.extra_joints:
        text = re.sub(rf'(<joint\s+name="{re.escape(joint)}"\s+type=)"[a-z]+"', r'\1"fixed"', text)
    if payload is not None:
        text = text.replace("</robot>", payload.link() + "</robot>")
    path = Path(directory) / "real_mujoco.urdf"
    path.write_text(text)
    model = mujoco_model(path)
    model.opt.timestep = TIMESTEP
    model.opt.integrator = 2  # mjINT_IMPLICITFAST
    import mujoco

    dofs = np.array([model.jnt_dofadr[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, j)] for j in arm.spec.joints])
    if model.nv != len(dofs):
        raise ValueError(f"{arm.name}: MuJoCo has {model.nv} dofs, the chain {len(dofs)}")
    model.dof_armature[dofs] = arm.armature
    model.dof_damping[dofs] = arm.damping
    model.dof_frictionloss[dofs] = arm.friction
    return model, dofs


@dataclass(frozen=True)
class Excitation:
    """Finite Fourier series ``q(t) = c + sum_k a_k/(w k) sin(w k t) - b_k/(w k) cos(w k t)`` per joint."""

    base_hz: float
    harmonics: int
    seed: int
    center_shift: float = 0.0
    """[rad] moves every joint's center from the middle of its range (a different region of the workspace)."""

    def reference(self, spec, lower, upper):
        """A function ``t -> (q, qd)`` within the limits: at most ``spec.amplitude`` from the center and ``spec.speed``."""
        rng = np.random.default_rng(self.seed)
        n, w = len(spec.joints), 2 * np.pi * self.base_hz
        k = np.arange(1, self.harmonics + 1)
        a, b = rng.standard_normal((2, n, self.harmonics)) / k
        half = (upper - lower) / 2
        center = (lower + upper) / 2 + np.clip(self.center_shift, -0.3 * half, 0.3 * half)
        grid = np.linspace(0, 1 / self.base_hz, 2000)[:, None, None]
        shape = lambda t: (a / (w * k) * np.sin(w * k * t) - b / (w * k) * np.cos(w * k * t)).sum(-1)  # noqa: E731
        speed = lambda t: (a * np.cos(w * k * t) + b * np.sin(w * k * t)).sum(-1)  # noqa: E731
        reach = np.minimum(spec.amplitude, 0.6 * half - np.abs(center - (lower + upper) / 2))
        scale = np.minimum(reach / np.abs(shape(grid)).max(0), spec.speed / np.abs(speed(grid)).max(0))
        return lambda t: (center + scale * shape(t), scale * speed(t))


@dataclass
class Recording:
    """Streams of one run, chain order: joint states at JOINT_RATE, commands at CONTROL_RATE (times [s] from 0)."""

    joint_time: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    effort: np.ndarray
    command_time: np.ndarray
    command: np.ndarray
    applied_effort: np.ndarray = field(repr=False, default=None)
    """Noise-free efforts at the joint-state stamps [N·m]."""


def record(arm, excitation, duration, directory, noise_seed, payload=None):
    """Simulate the real arm along ``excitation`` for ``duration`` [s]: a :class:`Recording`; with a
    :class:`PayloadStep` ``payload``, carrying it (its mass steps at its time).

    Raises:
        RuntimeError: The arm left its joint range or the simulation diverged.
    """
    import mujoco

    model, dofs = mujoco_arm(arm, directory, payload)
    data = mujoco.MjData(model)
    step_at = -1 if payload is None else int(round(payload.time / TIMESTEP))
    nominal = PinocchioOracle(type("Chain", (), {"joint_names": arm.spec.joints}), arm.spec.urdf_path)
    lower, upper = model.jnt_range[model.dof_jntid[dofs]].T
    reference = excitation.reference(arm.spec, lower, upper)
    kp, kd = np.array(arm.spec.kp, float), np.array(arm.spec.kd, float)
    q0, qd0 = reference(0.0)
    data.qpos[model.jnt_qposadr[model.dof_jntid[dofs]]] = q0
    data.qvel[dofs] = qd0
    rng = np.random.default_rng(noise_seed)
    control_every, joint_every = int(round(1 / (CONTROL_RATE * TIMESTEP))), int(round(1 / (JOINT_RATE * TIMESTEP)))
    out = {key: [] for key in ("jt", "q", "qd", "e", "ea", "ct", "c")}
    qadr = model.jnt_qposadr[model.dof_jntid[dofs]]
    tau = np.zeros(len(dofs))
    for step in range(int(round(duration / TIMESTEP))):
        t, q, qd = step * TIMESTEP, data.qpos[qadr].copy(), data.qvel[dofs].copy()
        if step % control_every == 0:  # the controller's cycle: it reads the state and commands a new torque
            q_ref, qd_ref = reference(t)
            gravity = nominal.sel(nominal.pin.computeGeneralizedGravity(nominal.model, nominal.data, nominal.q(q)))
            tau = gravity + kp * (q_ref - q) + kd * (qd_ref - qd)
            out["ct"].append(t)
            out["c"].append(tau.copy())
        if step % joint_every == 0:  # the broadcaster: the state and the torque applied from now on
            out["jt"].append(t)
            out["q"].append(q + NOISE["q"] * rng.standard_normal(len(q)))
            out["qd"].append(qd + NOISE["qd"] * rng.standard_normal(len(q)))
            out["e"].append(tau + NOISE["effort"] * rng.standard_normal(len(q)))
            out["ea"].append(tau.copy())
        if step == step_at:
            model.body_mass[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "payload")] = payload.after
        data.qfrc_applied[dofs] = tau
        mujoco.mj_step(model, data)
    q_all = np.array(out["q"])
    if not np.isfinite(q_all).all() or (q_all < lower + 1e-3).any() or (q_all > upper - 1e-3).any():
        raise RuntimeError(f"{arm.name}: the arm left its joint range or diverged")
    return Recording(np.array(out["jt"]), q_all, np.array(out["qd"]), np.array(out["e"]), np.array(out["ct"]),
                     np.array(out["c"]), np.array(out["ea"]))


def write_ros2_control_bag(path, arm, rec):
    """Write ``rec`` as a ros2_control bag (mcap): alphabetical /joint_states with the extra joints at 0,
    and Float64MultiArray commands in the controller's joint order. Returns the bag path."""
    from diffsim_ros.io.bags import write_bag
    from diffsim_ros.io.ros_messages import float64_multi_array_msg, joint_state_msg, seconds_to_ns
    from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore

    spec = arm.spec
    factory, names = TypestoreMessages(default_typestore()), sorted(spec.joints + spec.extra_joints)
    index = {name: spec.joints.index(name) for name in spec.joints}
    order = [index[name] for name in spec.controller_joints]
    messages = []
    for i, t in enumerate(rec.joint_time):
        ns = seconds_to_ns(T0 + float(t))
        columns = [[row[index[n]] if n in index else 0.0 for n in names] for row in (rec.q[i], rec.qd[i], rec.effort[i])]
        messages.append((JOINT_STATES, joint_state_msg(factory, ns, names, *columns), ns + 10**5))
    for t, command in zip(rec.command_time, rec.command):
        ns = seconds_to_ns(T0 + float(t))
        messages.append((COMMANDS, float64_multi_array_msg(factory, command[order]), ns + 2 * 10**5))
    return write_bag(path, sorted(messages, key=lambda m: m[2]), storage="mcap")
