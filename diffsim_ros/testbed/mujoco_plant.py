"""MuJoCo as the "real robot": a URDF arm with hidden true parameters and noisy sensors.

The plant is an independent simulator of the same URDF: MuJoCo computes the kinematics,
dynamics, joint limits, damping and Coulomb friction (``frictionloss``) itself; the payload
is a welded MuJoCo body. Spring elements (:mod:`diffsim_ros.model.springs`) are MuJoCo's own
where MuJoCo has them:

* ``torsion``: joint ``stiffness`` and ``springref``, its damping added to the joint's;
* ``point``: a spatial tendon between two sites (``stiffness``, ``springlength``,
  ``damping``); a tension-only cable has the dead band ``springlength = [0, L0]`` (no force
  while slack). MuJoCo's tendon damping acts even on a slack tendon, so a cable's damping is
  applied as a generalized force, ``-c dL/dt J_L`` while taut, from MuJoCo's own site
  positions and Jacobians at the start of every time step;
* ``lever`` (Baxter's series-elastic law), which MuJoCo has no element for: a generalized
  force from its defining formula at the start of every time step.

Estimators are validated on this plant, never only on data produced by diffsim_ros's own
simulators.

Joints of the URDF that are not in the model are welded at their lock position, so a Baxter
arm is simulated with the rest of the robot rigid, as the model assumes.
"""

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from diffsim_ros.dynamics.spatial_np import so3_exp
from diffsim_ros.model.springs import SPRING_LAWS

__all__ = ["SensorNoise", "PlantTruth", "MujocoPlant", "random_camera_pose"]


@dataclass(frozen=True)
class SensorNoise:
    """Standard deviations of the simulated sensors (issue #4 defaults)."""

    joint_position: float = 1e-4
    """[rad]"""
    joint_velocity: float = 1e-3
    """[rad/s]"""
    effort: float = 0.05
    """[N·m]"""
    camera_position: float = 1e-3
    """[m] per axis"""
    camera_rotation: float = math.radians(0.2)
    """[rad] rotation-vector norm scale"""


@dataclass(frozen=True)
class PlantTruth:
    """Hidden parameters of the simulated robot.

    Attributes:
        payload_mass: Point-mass payload [kg] on the model's payload frame.
        payload_com: Payload position in the payload frame [m], (3,).
        springs: Mapping spring element name (a joint spring's name is its joint) -> dict of
            its law's values (lever: stiffness, offset, alpha1, l1, l2, rest_length; torsion:
            stiffness, offset, damping; point: stiffness, rest_length, damping, point_a,
            point_b); missing entries take the model's nominal values.
        damping: Joint viscous damping [N·m·s/rad], (n,), or None for the URDF values.
        friction: Joint Coulomb friction [N·m], (n,), or None for zero.
        armature: Reflected rotor inertia [kg·m²] (MuJoCo's ``dof_armature``), (n,), or None for zero.
        camera_pose: Camera frame in the base frame, (4, 4), or None (no camera).
    """

    payload_mass: float = 0.0
    payload_com: tuple = (0.0, 0.0, 0.0)
    springs: dict = field(default_factory=dict)
    damping: tuple | None = None
    friction: tuple | None = None
    camera_pose: np.ndarray | None = None
    armature: tuple | None = None


def random_camera_pose(rng, distance=(1.0, 2.0), look_at=(0.6, 0.3, 0.2)):
    """A camera 1-2 m from the workspace, looking at ``look_at`` (base frame), (4, 4)."""
    direction = rng.normal(size=3)
    direction[2] = abs(direction[2]) * 0.5 + 0.2
    direction /= np.linalg.norm(direction)
    target = np.asarray(look_at, dtype=float)
    position = target + direction * rng.uniform(*distance)
    z_axis = (target - position) / np.linalg.norm(target - position)  # optical axis
    x_axis = np.cross(np.array([0.0, 0.0, 1.0]), z_axis)
    x_axis /= np.linalg.norm(x_axis)
    y_axis = np.cross(z_axis, x_axis)
    pose = np.eye(4)
    pose[:3, :3] = np.stack([x_axis, y_axis, z_axis], axis=1)
    pose[:3, 3] = position
    return pose


def _mujoco_urdf(urdf_text, keep_joints, payload_frame, payload_mass, payload_com):
    """URDF text MuJoCo can compile: no geometry, other joints welded, payload as a link."""
    xml = re.sub(r"<(visual|collision)\b.*?</\1>", "", urdf_text, flags=re.S)
    xml = re.sub(r"<(gazebo|transmission)\b.*?</\1>", "", xml, flags=re.S)

    def weld(match):
        name, kind = match.group(1), match.group(2)
        if kind in ("revolute", "continuous", "prismatic") and name not in keep_joints:
            return match.group(0).replace(f'type="{kind}"', 'type="fixed"')
        return match.group(0)

    xml = re.sub(r'<joint\s+name="([^"]+)"\s+type="([^"]+)"', weld, xml)
    if payload_mass > 0.0:
        # float(): numpy 2 scalars repr as "np.float64(...)", which is not XML.
        x, y, z = (float(v) for v in payload_com)
        payload_mass = float(payload_mass)
        payload = (
            f'<link name="diffsim_payload"><inertial><origin xyz="0 0 0"/><mass value="{payload_mass!r}"/>'
            '<inertia ixx="1e-9" ixy="0" ixz="0" iyy="1e-9" iyz="0" izz="1e-9"/></inertial></link>'
            f'<joint name="diffsim_payload_joint" type="fixed"><parent link="{payload_frame}"/>'
            f'<child link="diffsim_payload"/><origin xyz="{x!r} {y!r} {z!r}" rpy="0 0 0"/></joint>'
        )
        xml = xml.replace("</robot>", payload + "</robot>")
    compiler = '<mujoco><compiler discardvisual="true" fusestatic="false" balanceinertia="false"/></mujoco>'
    return re.sub(r"(<robot[^>]*>)", r"\1" + compiler, xml, count=1)


class MujocoPlant:
    """MuJoCo simulation of a robot model's URDF with hidden true parameters.

    Args:
        model: The nominal RobotModel (its URDF, chain, spring elements and payload frame are
            used; its parameter values are not).
        urdf_path: The URDF file the model was loaded from.
        truth: Hidden true parameters.
        timestep: MuJoCo time step [s] (implicit-fast integrator).
        noise: Sensor noise; ``SensorNoise(0, 0, 0, 0, 0)`` gives perfect sensors.
        seed: Seed of the sensor-noise generator.
    """

    def __init__(self, model, urdf_path, truth=PlantTruth(), timestep=1e-3, noise=SensorNoise(), seed=0):
        import mujoco

        self._mj = mujoco
        self.joint_names = tuple(model.joint_names)
        self.truth = truth
        self.noise = noise
        self._rng = np.random.default_rng(seed)
        springs = _true_springs(model, truth)
        text = Path(urdf_path).read_text()
        xml = _mujoco_urdf(text, set(self.joint_names), model.payload_frame, truth.payload_mass, truth.payload_com)
        spec = mujoco.MjSpec.from_string(xml)
        _add_tendons(spec, [s for s in springs if s.law == "point"])
        self.mj_model = spec.compile()
        self.mj_model.opt.timestep = timestep
        self.mj_model.opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
        self.mj_model.opt.gravity[:] = model.gravity.detach().cpu().numpy()
        self.data = mujoco.MjData(self.mj_model)
        self._scratch = mujoco.MjData(self.mj_model)
        self._dof = np.array([self._joint_dof(name) for name in self.joint_names])
        self._qpos = np.array([self.mj_model.jnt_qposadr[self._joint_id(name)] for name in self.joint_names])
        self._configure_joints(model, [s for s in springs if s.law == "torsion"])
        self._levers = [(self.joint_names.index(s.joint), s) for s in springs if s.law == "lever"]
        self._cables = [self._cable(s) for s in springs if s.law == "point" and s.tension_only and s.damping != 0.0]
        self._native_springs = any(s.law != "lever" for s in springs)
        self.effort_limit = model.effort_limit.detach().cpu().numpy().copy()
        self._tracked_bodies = {}
        self._applied = np.zeros(len(self.joint_names))
        self._external = np.zeros(len(self.joint_names))
        mujoco.mj_forward(self.mj_model, self.data)

    def set_payload_mass(self, mass):
        """Change the payload's mass [kg] from now on (same COM), as when more load is picked up.

        Raises:
            ValueError: A plant built without a payload (``truth.payload_mass`` 0), or mass <= 0.
        """
        body = self._mj.mj_name2id(self.mj_model, self._mj.mjtObj.mjOBJ_BODY, "diffsim_payload")
        if body < 0:
            raise ValueError("this plant has no payload body (built with truth.payload_mass 0)")
        if not mass > 0:
            raise ValueError(f"payload mass must be positive, got {mass}")
        self.mj_model.body_mass[body] = float(mass)
        self.truth = dataclasses.replace(self.truth, payload_mass=float(mass))

    # ------------------------------------------------------------------ construction helpers
    def _joint_id(self, name):
        jid = self._mj.mj_name2id(self.mj_model, self._mj.mjtObj.mjOBJ_JOINT, name)
        if jid < 0:
            raise ValueError(f"joint '{name}' not found in the MuJoCo model")
        return jid

    def _joint_dof(self, name):
        return self.mj_model.jnt_dofadr[self._joint_id(name)]

    def _configure_joints(self, model, torsion):
        n = len(self.joint_names)
        damping = model.params.damping.detach().cpu().numpy() if self.truth.damping is None else np.asarray(self.truth.damping, float)
        friction = np.zeros(n) if self.truth.friction is None else np.asarray(self.truth.friction, float)
        armature = np.zeros(n) if self.truth.armature is None else np.asarray(self.truth.armature, float)
        if damping.shape != (n,) or friction.shape != (n,) or armature.shape != (n,):
            raise ValueError(f"truth damping/friction/armature must have shape ({n},)")
        damping = damping.copy()
        self.mj_model.dof_damping[:] = 0.0
        self.mj_model.dof_frictionloss[:] = 0.0
        self.mj_model.dof_armature[:] = 0.0
        self.mj_model.jnt_stiffness[:] = 0.0
        for spring in torsion:  # MuJoCo's joint spring: -stiffness (q - springref)
            jid = self._joint_id(spring.joint)
            self.mj_model.jnt_stiffness[jid] = spring.stiffness
            self.mj_model.qpos_spring[self.mj_model.jnt_qposadr[jid]] = spring.offset
            damping[self.joint_names.index(spring.joint)] += spring.damping
        self.mj_model.dof_damping[self._dof] = damping
        self.mj_model.dof_frictionloss[self._dof] = friction
        self.mj_model.dof_armature[self._dof] = armature

    def _cable(self, spring):
        site = lambda end: self._mj.mj_name2id(self.mj_model, self._mj.mjtObj.mjOBJ_SITE, _site_name(spring, end))  # noqa: E731
        return site("a"), site("b"), spring.rest_length, spring.damping

    # ------------------------------------------------------------------ state
    @property
    def time(self):
        """Simulation time [s]."""
        return float(self.data.time)

    def reset(self, q, qd=None):
        """Set joint positions [rad] and velocities [rad/s] (others welded), time kept."""
        self.data.qpos[self._qpos] = np.asarray(q, float)
        self.data.qvel[:] = 0.0
        if qd is not None:
            self.data.qvel[self._dof] = np.asarray(qd, float)
        self._mj.mj_forward(self.mj_model, self.data)

    def true_state(self):
        """Noise-free ``(q, qd)`` in model joint order."""
        return self.data.qpos[self._qpos].copy(), self.data.qvel[self._dof].copy()

    def true_acceleration(self):
        """Joint accelerations [rad/s²] of the last time step: MuJoCo's forward dynamics at the
        state before it, with the torques applied then (noise free), in model joint order."""
        return self.data.qacc[self._dof].copy()

    def spring_torques(self, q):
        """True elastic torques of every spring element [N·m] at ``q`` (MuJoCo's own for
        torsion springs and tendons, the formula for lever springs), shape (n,)."""
        q = np.asarray(q, float)
        tau = self._lever_torques(q)
        if self._native_springs:
            tau += self._evaluate(q, np.zeros(len(q))).qfrc_spring[self._dof]
        return tau

    def passive_torques(self, q, qd):
        """True passive torques [N·m] at ``(q, qd)``: every spring element with its damping plus
        the joints' viscous damping (not the Coulomb friction, a constraint in MuJoCo), (n,)."""
        q = np.asarray(q, float)
        scratch = self._evaluate(q, np.asarray(qd, float))
        total = scratch.qfrc_spring + scratch.qfrc_damper + (self._cable_damping(scratch) if self._cables else 0.0)
        return total[self._dof] + self._lever_torques(q)

    def _evaluate(self, q, qd):
        """The scratch MjData at ``(q, qd)`` after MuJoCo's position and velocity stages."""
        scratch = self._scratch
        scratch.qpos[:] = self.mj_model.qpos0
        scratch.qpos[self._qpos] = q
        scratch.qvel[:] = 0.0
        scratch.qvel[self._dof] = qd
        self._mj.mj_fwdPosition(self.mj_model, scratch)
        self._mj.mj_fwdVelocity(self.mj_model, scratch)
        return scratch

    def point_spring_lengths(self, q):
        """MuJoCo's tendon length [m] of every point spring at ``q``, in model order, shape (c,)."""
        return self._evaluate(np.asarray(q, float), np.zeros(len(self.joint_names))).ten_length.copy()

    def _lever_torques(self, q):
        tau = np.zeros(len(self.joint_names))
        for index, s in self._levers:
            phi = math.pi - s.alpha1 - s.offset + q[index]
            length = math.sqrt(s.l1**2 + s.l2**2 - 2 * s.l1 * s.l2 * math.cos(phi))
            tau[index] += -s.stiffness * (length - s.rest_length) * s.l1 * s.l2 * math.sin(phi) / length
        return tau

    def _cable_damping(self, data):
        """Generalized forces (nv,) of the tension-only cables' damping at the state of ``data``."""
        mj, model = self._mj, self.mj_model
        mj.mj_kinematics(model, data)
        mj.mj_comPos(model, data)
        force = np.zeros(model.nv)
        jac_a, jac_b = np.zeros((3, model.nv)), np.zeros((3, model.nv))
        for site_a, site_b, rest_length, damping in self._cables:
            delta = data.site_xpos[site_b] - data.site_xpos[site_a]
            length = float(np.linalg.norm(delta))
            if length <= rest_length:
                continue  # slack
            mj.mj_jacSite(model, data, jac_a, None, site_a)
            mj.mj_jacSite(model, data, jac_b, None, site_b)
            gradient = (delta / length) @ (jac_b - jac_a)
            force -= damping * float(gradient @ data.qvel) * gradient
        return force

    # ------------------------------------------------------------------ actuation
    def set_external_torque(self, tau_ext):
        """Joint torques [N·m] from the environment (e.g. a person pushing), kept until changed."""
        self._external = np.asarray(tau_ext, float).copy()

    def step(self, tau, steps=1):
        """Apply motor torques [N·m] (clipped to the effort limits) for ``steps`` time steps.

        Non-finite torques are refused (a real drive would fault); nothing is applied then.
        """
        tau = np.asarray(tau, float)
        if tau.shape != (len(self.joint_names),) or not np.all(np.isfinite(tau)):
            raise ValueError(f"motor torques must be finite with shape ({len(self.joint_names)},), got {tau}")
        self._applied = np.clip(tau, -self.effort_limit, self.effort_limit)
        for _ in range(int(steps)):
            q = self.data.qpos[self._qpos]
            self.data.qfrc_applied[:] = self._cable_damping(self.data) if self._cables else 0.0
            self.data.qfrc_applied[self._dof] += self._applied + self._external + self._lever_torques(q)
            self._mj.mj_step(self.mj_model, self.data)

    # ------------------------------------------------------------------ sensors
    def read_joint_state(self):
        """Noisy joint state ``(q [rad], qd [rad/s], effort [N·m])``; effort is the motor torque."""
        q, qd = self.true_state()
        n = len(q)
        return (
            q + self.noise.joint_position * self._rng.standard_normal(n),
            qd + self.noise.joint_velocity * self._rng.standard_normal(n),
            self._applied + self.noise.effort * self._rng.standard_normal(n),
        )

    def link_pose(self, link):
        """True pose (4, 4) of a URDF link frame in the base frame, from MuJoCo's kinematics."""
        body = self._tracked_bodies.get(link)
        if body is None:
            body = self._mj.mj_name2id(self.mj_model, self._mj.mjtObj.mjOBJ_BODY, link)
            if body < 0:
                raise ValueError(f"link '{link}' not found in the MuJoCo model")
            self._tracked_bodies[link] = body
        pose = np.eye(4)
        pose[:3, :3] = self.data.xmat[body].reshape(3, 3)
        pose[:3, 3] = self.data.xpos[body]
        return pose

    def read_camera_pose(self, link):
        """Noisy pose of ``link`` in the camera frame: ``(position (3,), quaternion wxyz (4,))``."""
        if self.truth.camera_pose is None:
            raise ValueError("this plant has no camera (truth.camera_pose is None)")
        camera = np.asarray(self.truth.camera_pose, float)
        in_camera = np.linalg.inv(camera) @ self.link_pose(link)
        position = in_camera[:3, 3] + self.noise.camera_position * self._rng.standard_normal(3)
        rotvec = self.noise.camera_rotation * self._rng.standard_normal(3)
        rotation = so3_exp(rotvec) @ in_camera[:3, :3]
        return position, _matrix_to_quat(rotation)


def _true_springs(model, truth):
    """The model's spring elements with the truth's values, validated (names, keys, shapes)."""
    springs, names = [], set()
    for spring in model.springs:
        names.add(spring.name)
        values = dict(truth.springs.get(spring.name, {}))
        allowed = set(SPRING_LAWS[spring.law].fields)
        unknown = set(values) - allowed
        if unknown:
            raise ValueError(f"truth spring '{spring.name}' ({spring.law}): unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")
        for key in SPRING_LAWS[spring.law].vectors:
            if key in values:
                values[key] = tuple(float(v) for v in values[key])
                if len(values[key]) != 3:
                    raise ValueError(f"truth spring '{spring.name}': {key} needs 3 numbers")
        springs.append(dataclasses.replace(spring, **{k: v if isinstance(v, tuple) else float(v) for k, v in values.items()}))
    unknown = set(truth.springs) - names
    if unknown:
        raise ValueError(f"truth springs without a spring element in the model: {sorted(unknown)}")
    return springs


def _site_name(spring, end):
    return f"diffsim_spring_{spring.name}_{end}"


def _add_tendons(spec, springs):
    """A site at both ends and a spatial tendon for every point spring (MjSpec, before compiling)."""
    for spring in springs:
        for end, link, point in (("a", spring.link_a, spring.point_a), ("b", spring.link_b, spring.point_b)):
            body = spec.body(link)
            if body is None:
                raise ValueError(f"point spring '{spring.name}': link '{link}' is not a MuJoCo body")
            body.add_site(name=_site_name(spring, end), pos=list(point))
        tendon = spec.add_tendon(
            name=f"diffsim_spring_{spring.name}",
            stiffness=spring.stiffness,
            # A cable's damping acts only while taut: applied by the plant (see the module docstring).
            damping=0.0 if spring.tension_only else spring.damping,
            springlength=[0.0, spring.rest_length] if spring.tension_only else [spring.rest_length, spring.rest_length],
        )
        tendon.wrap_site(_site_name(spring, "a"))
        tendon.wrap_site(_site_name(spring, "b"))


def _matrix_to_quat(rot):
    """Unit quaternion (w, x, y, z), w >= 0, via MuJoCo's own conversion."""
    import mujoco

    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(rot).reshape(9))
    return quat if quat[0] >= 0 else -quat
