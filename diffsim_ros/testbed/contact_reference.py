"""MuJoCo twins of contact worlds: an independent simulator to generate reference data.

Never validate an estimator only on data from our own simulator: these helpers build the
same objects and static shapes in MuJoCo (elliptic cones, its own soft-contact solver and
time step) and sample noisy poses as a camera would. Objects only (no robot). MuJoCo has no
restitution coefficient: bounciness comes from the contact's damping ratio, so measure the
effective restitution from the returned true velocities.
"""

import numpy as np

from diffsim_ros.dynamics.spatial_np import quat_exp, quat_multiply, quat_to_matrix
from diffsim_ros.sim.contact.errors import ContactError
from diffsim_ros.sim.contact.shapes import Box, Capsule, Plane, Sphere

__all__ = ["mujoco_xml", "simulate_mujoco"]


def _geom(shape, extra):
    if isinstance(shape, Box):
        return f'<geom type="box" size="{" ".join(map(str, shape.half_extents))}" {extra}/>'
    if isinstance(shape, Sphere):
        return f'<geom type="sphere" size="{shape.radius}" {extra}/>'
    if isinstance(shape, Capsule):
        return f'<geom type="capsule" size="{shape.radius} {shape.half_length}" {extra}/>'
    if isinstance(shape, Plane):
        return f'<geom type="plane" size="0 0 1" {extra}/>'
    raise ContactError(f"no MuJoCo geom for {type(shape).__name__}")


def _join(values):
    return " ".join(repr(float(v)) for v in values)


def mujoco_xml(world, timestep=0.001, solref=(0.02, 1.0), solimp=(0.99, 0.999, 0.001), impratio=10.0,
               cone="elliptic", object_solref=None, object_friction=None):
    """MJCF text of a ContactWorld's objects and static shapes (at the world's parameter values).

    Args:
        world: ContactWorld without a robot (unbatched parameters).
        timestep: MuJoCo time step [s].
        solref, solimp: MuJoCo contact softness for every contact.
        impratio: Frictional-to-normal impedance ratio (stiffer friction for elliptic cones).
        cone: ``"elliptic"`` or ``"pyramidal"``.
        object_solref: solref of object-object contacts (e.g. ``(0.005, 0.1)`` for a bouncy
            collision), or None for ``solref``.
        object_friction: Friction of object-object contacts (0 makes them frictionless);
            default the larger of the two objects' (MuJoCo's rule, as the world's).
    """
    if world.robot is not None:
        raise ContactError("the MuJoCo reference supports objects and static shapes only")
    params = {k: v.detach().cpu().numpy() for k, v in world.params.items()}
    if any(v.ndim != 1 for v in params.values()):
        raise ContactError("the MuJoCo reference needs unbatched object parameters")
    gravity = world.gravity.detach().cpu().numpy()
    lines = [
        f'<mujoco><option timestep="{timestep}" cone="{cone}" impratio="{impratio}" gravity="{_join(gravity)}"/>',
        f'<default><geom solref="{_join(solref)}" solimp="{_join(solimp)}" condim="3"/></default>',
        "<worldbody>",
    ]
    for shape in world.static:
        extra = f'name="{shape.name}" pos="{_join(shape.position)}" quat="{_join(shape.orientation)}" friction="{shape.friction} 0 0"'
        lines.append(_geom(shape.shape, extra))
    for j, obj in enumerate(world.objects):
        inertia = world.unit_inertia[j].detach().cpu().numpy() * params["mass"][j]
        lines.append(f'<body name="{obj.name}"><freejoint/>')
        lines.append(f'<inertial pos="0 0 0" mass="{float(params["mass"][j])!r}" diaginertia="{_join(inertia)}"/>')
        lines.append(_geom(obj.shape, f'name="{obj.name}" friction="{float(params["friction"][j])!r} 0 0"'))
        lines.append("</body>")
    lines.append("</worldbody>")
    if (object_solref is not None or object_friction is not None) and len(world.objects) > 1:
        lines.append("<contact>")
        for i, a in enumerate(world.objects):
            for b in world.objects[i + 1 :]:
                mu = float(max(params["friction"][i], params["friction"][world.object_names.index(b.name)]))
                mu = mu if object_friction is None else float(object_friction)
                condim = 3 if mu > 0 else 1
                ref = solref if object_solref is None else object_solref
                lines.append(
                    f'<pair geom1="{a.name}" geom2="{b.name}" solref="{_join(ref)}" condim="{condim}" friction="{max(mu, 1e-9)} {max(mu, 1e-9)} 0 0 0"/>'
                )
        lines.append("</contact>")
    lines.append("</mujoco>")
    return "\n".join(lines)


def simulate_mujoco(world, state, duration, timestep=0.001, sample_period=0.01, skip=0.0, position_noise=0.0,
                    orientation_noise=0.0, seed=0, **xml_options):
    """Simulate the world's objects in MuJoCo and sample (noisy) poses like a camera.

    Args:
        world: ContactWorld without a robot.
        state: Initial WorldState (unbatched).
        duration: Recorded duration [s] after ``skip``.
        timestep: MuJoCo time step [s] (use one different from the world's).
        sample_period: Camera period [s] (a multiple of ``timestep``).
        skip: Time simulated before recording starts [s] (lets contact transients settle).
        position_noise: Standard deviation of Gaussian position noise [m].
        orientation_noise: Standard deviation of the rotation-vector noise [rad].
        seed: Noise seed.
        **xml_options: Passed to :func:`mujoco_xml`.

    Returns:
        ``(observations, truth)``: per object name, a dict of camera samples ``times`` (T,),
        ``position`` (T, 3) and ``orientation`` (T, 4) (w, x, y, z) (the fields of
        :class:`~diffsim_ros.estimation.streams.PoseSeries`), and a dict of the noise-free
        ``times``, ``position``, ``orientation``, ``linear_velocity`` and
        ``angular_velocity`` at every MuJoCo step.
    """
    import mujoco

    model = mujoco.MjModel.from_xml_string(mujoco_xml(world, timestep=timestep, **xml_options))
    data = mujoco.MjData(model)
    count = len(world.objects)
    pos = state.position.detach().cpu().numpy().reshape(count, 3)
    quat = state.orientation.detach().cpu().numpy().reshape(count, 4)
    lin = state.linear_velocity.detach().cpu().numpy().reshape(count, 3)
    ang = state.angular_velocity.detach().cpu().numpy().reshape(count, 3)
    for j in range(count):
        data.qpos[7 * j : 7 * j + 7] = np.concatenate([pos[j], quat[j]])
        rot = quat_to_matrix(quat[j])
        # MuJoCo's free-joint angular velocity is in the body frame.
        data.qvel[6 * j : 6 * j + 6] = np.concatenate([lin[j], rot.T @ ang[j]])
    stride = int(round(sample_period / timestep))
    skip_steps = int(round(skip / timestep))
    total = skip_steps + int(round(duration / timestep))
    truth = {o.name: {k: [] for k in ("times", "position", "orientation", "linear_velocity", "angular_velocity")} for o in world.objects}
    samples = {o.name: ([], [], []) for o in world.objects}
    mujoco.mj_forward(model, data)
    for step in range(total + 1):
        if step >= skip_steps:
            for j, obj in enumerate(world.objects):
                p, q = data.qpos[7 * j : 7 * j + 3].copy(), data.qpos[7 * j + 3 : 7 * j + 7].copy()
                record = truth[obj.name]
                record["times"].append(data.time)
                record["position"].append(p)
                record["orientation"].append(q)
                record["linear_velocity"].append(data.qvel[6 * j : 6 * j + 3].copy())
                record["angular_velocity"].append(quat_to_matrix(q) @ data.qvel[6 * j + 3 : 6 * j + 6])
                if (step - skip_steps) % stride == 0:
                    samples[obj.name][0].append(data.time)
                    samples[obj.name][1].append(p)
                    samples[obj.name][2].append(q)
        if step < total:
            mujoco.mj_step(model, data)
    rng = np.random.default_rng(seed)
    observations = {}
    for name, (times, positions, quats) in samples.items():
        positions = np.array(positions) + rng.normal(0.0, position_noise, (len(times), 3))
        quats = np.array([quat_multiply(quat_exp(rng.normal(0.0, orientation_noise, 3)), q) for q in quats])
        observations[name] = {"times": np.array(times), "position": positions, "orientation": quats}
    truth = {name: {k: np.array(v) for k, v in record.items()} for name, record in truth.items()}
    return observations, truth
