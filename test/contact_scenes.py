"""Independent MuJoCo scenes for object estimation, recorded as a camera would (issue 19).

Written from scratch for this purpose (it shares no code with
``diffsim_ros.testbed.contact_reference`` or the older test generator): the MJCF, the
settling, the camera and its noise, the restitution measurement and the bag are all here.

Scenes:

* **slides**: a rectangular box on the ground, yawed at random and pushed along a direction
  at least ``MIN_OFF_AXIS`` from any of its face normals, friction drawn in
  ``SLIDE_MU_RANGE``;
* **collisions**: such a box slides into a known box at rest (``TARGET_MASS``) whose face
  faces it (within ``TARGET_YAW_JITTER``); unknown mass, ground friction and the box-box
  restitution (MuJoCo's contact damping; the truth is measured from its velocities at the
  contact point, see :func:`_measured_restitution`).

MuJoCo: elliptic cones, ``MUJOCO_STEP``, stiff contacts (solref time constants of a few ms).
The camera sees every object at ``CAMERA_RATE`` with ``POSITION_NOISE`` and
``ORIENTATION_NOISE`` (per axis, in the camera frame) and publishes
geometry_msgs/msg/PoseStamped in its own frame; :func:`write_scene_files` writes the mcap
bag, the scene file and a camera-only calibration for ``diffsim-ros estimate-objects``.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from scipy.spatial.transform import Rotation

MUJOCO_STEP = 1e-4  # [s]
SETTLE_TIME = 0.05  # at rest on the ground before the push [s]
CAMERA_RATE = 30.0  # [Hz]
POSITION_NOISE = 1e-3  # [m], per axis
ORIENTATION_NOISE = math.radians(0.2)  # [rad], per axis
GROUND_SOLREF = (0.004, 1.0)  # critically damped ground contact, 4 ms time constant
BOX_SOLREF_TIME = 0.001  # box-box contact time constant [s]; at 0.5 ms the hit lifts the target 0.8 mm off the ground (MuJoCo's convex contact), at 1 ms 0.1 mm
SOLIMP = (0.99, 0.999, 0.001)
GRAVITY = 9.81
SLIDE_MU_RANGE = (0.15, 0.8)
MIN_OFF_AXIS = math.radians(15.0)  # push direction vs the nearest face normal
SLIDE_TIME = (0.35, 0.6)  # [s] until the slide stops
TARGET_MASS = 0.6  # [kg]
TARGET_HALF = (0.05, 0.05, 0.03)  # [m]: as tall as the boxes, so that hits pass near both centres
TARGET_MU = 0.3  # target-ground friction (known)
BOX_BOX_MU = 0.2  # box-box friction (known)
TARGET_YAW_JITTER = math.radians(10.0)
IMPACT_SPEED = (0.8, 1.4)  # [m/s]
COLLISION_DAMPING = (0.15, 0.45)  # MuJoCo damping ratio of the box-box contact
COLLISION_RECORD = 0.8  # [s] recorded after the push
CAMERA_POSE = ((1.1, -0.7, 0.8), (0.83, -0.25, 0.15, 0.48))  # base <- camera: position, quaternion (w, x, y, z)
TOPICS = {"box": "/camera/box_pose", "target": "/camera/target_pose"}
START_STAMP_NS = 1_763_000_000_000_000_000


@dataclass(frozen=True)
class Box:
    """One box of a scene (truth)."""

    name: str
    half: tuple  # half extents [m]
    mass: float  # [kg]
    position: tuple  # initial COM [m]
    yaw: float  # [rad]
    velocity: tuple = (0.0, 0.0, 0.0)  # pushed to this [m/s] at t = 0


@dataclass(frozen=True)
class Scene:
    """A scene's truth: boxes, per-pair friction and damping, recording length.

    Attributes:
        kind: "slide" or "collision".
        boxes: The boxes (the first one is pushed).
        ground_mu: Box name -> friction with the ground.
        box_box_mu: Friction between the boxes.
        damping: MuJoCo damping ratio of the box-box contact.
        duration: Recorded time after the push [s].
        seed: The draw that made it.
    """

    kind: str
    boxes: tuple
    ground_mu: dict
    box_box_mu: float = BOX_BOX_MU
    damping: float = 1.0
    duration: float = 0.5
    seed: int = 0
    truth: dict = field(default_factory=dict)


def _off_axis_direction(rng, yaw):
    """A unit direction in the plane at least MIN_OFF_AXIS from the box's face normals."""
    offset = rng.uniform(MIN_OFF_AXIS, math.pi / 2 - MIN_OFF_AXIS) * rng.choice([-1, 1])
    angle = yaw + rng.integers(4) * math.pi / 2 + offset
    return np.array([math.cos(angle), math.sin(angle), 0.0])


def _random_half(rng):
    return (float(rng.uniform(0.05, 0.08)), float(rng.uniform(0.03, 0.045)), float(rng.uniform(0.025, 0.035)))


def random_slide(seed):
    """A rectangular box pushed off-axis on the ground, mu in SLIDE_MU_RANGE."""
    rng = np.random.default_rng(seed)
    half = _random_half(rng)
    mu = float(rng.uniform(*SLIDE_MU_RANGE))
    yaw = float(rng.uniform(-math.pi, math.pi))
    speed = mu * GRAVITY * float(rng.uniform(*SLIDE_TIME))
    direction = _off_axis_direction(rng, yaw)
    box = Box("box", half, float(rng.uniform(0.2, 1.5)), (0.0, 0.0, half[2]), yaw, tuple(speed * direction))
    return Scene("slide", (box,), {"box": mu}, duration=speed / (mu * GRAVITY) + 0.15, seed=seed)


def random_collision(seed):
    """The pushed box slides into a known box at rest that faces it."""
    rng = np.random.default_rng(10_000 + seed)
    half = _random_half(rng)
    mu = float(rng.uniform(*SLIDE_MU_RANGE))
    yaw = float(rng.uniform(-math.pi, math.pi))
    direction = _off_axis_direction(rng, yaw)
    gap = float(rng.uniform(0.25, 0.4))  # travel before the hit [m]
    impact = float(rng.uniform(*IMPACT_SPEED))
    speed = math.sqrt(impact**2 + 2 * mu * GRAVITY * gap)
    # Target centre on the path (a small lateral offset), its face normal along the path.
    heading = math.atan2(direction[1], direction[0])
    lateral = np.array([-direction[1], direction[0], 0.0]) * float(rng.uniform(-0.02, 0.02))
    reach = gap + TARGET_HALF[0] + _extent_along(half, yaw, direction)
    centre = reach * direction + lateral
    target = Box("target", TARGET_HALF, TARGET_MASS, (float(centre[0]), float(centre[1]), TARGET_HALF[2]),
                 heading + float(rng.uniform(-TARGET_YAW_JITTER, TARGET_YAW_JITTER)))
    box = Box("box", half, float(rng.uniform(0.3, 1.2)), (0.0, 0.0, half[2]), yaw, tuple(speed * direction))
    return Scene("collision", (box, target), {"box": mu, "target": TARGET_MU},
                 damping=float(rng.uniform(*COLLISION_DAMPING)), duration=COLLISION_RECORD, seed=seed)


def _extent_along(half, yaw, direction):
    """Support distance of a yawed box's footprint along a planar direction [m]."""
    c, s = math.cos(yaw), math.sin(yaw)
    axes = np.array([[c, s, 0.0], [-s, c, 0.0]])
    return float(sum(h * abs(a @ direction) for h, a in zip(half[:2], axes)))


def _quat_yaw(yaw):
    return (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))


def mjcf(scene):
    """The scene's MJCF (elliptic cones, explicit contact pairs with their coefficients)."""
    gr = " ".join(map(str, GROUND_SOLREF))
    si = " ".join(map(str, SOLIMP))
    lines = [
        f'<mujoco><option timestep="{MUJOCO_STEP}" cone="elliptic" impratio="10" gravity="0 0 {-GRAVITY}"/>',
        '<worldbody><geom name="ground" type="plane" size="0 0 1" contype="0" conaffinity="0"/>',
    ]
    for box in scene.boxes:
        pos = " ".join(map(str, box.position))
        quat = " ".join(map(str, _quat_yaw(box.yaw)))
        lines.append(f'<body name="{box.name}" pos="{pos}" quat="{quat}"><freejoint/>')
        lines.append(f'<geom name="{box.name}" type="box" size="{" ".join(map(str, box.half))}" mass="{box.mass}" '
                     'contype="0" conaffinity="0"/></body>')
    lines.append("</worldbody><contact>")
    for box in scene.boxes:
        mu = scene.ground_mu[box.name]
        lines.append(f'<pair geom1="{box.name}" geom2="ground" condim="3" friction="{mu} {mu} 0 0 0" solref="{gr}" solimp="{si}"/>')
    if len(scene.boxes) == 2:
        a, b = (box.name for box in scene.boxes)
        mu = scene.box_box_mu
        lines.append(f'<pair geom1="{a}" geom2="{b}" condim="3" friction="{mu} {mu} 0 0 0" '
                     f'solref="{BOX_SOLREF_TIME} {scene.damping}" solimp="{si}"/>')
    lines.append("</contact></mujoco>")
    return "\n".join(lines)


def simulate(scene):
    """Run MuJoCo: settle at rest, push, record.

    Returns:
        dict with ``times`` (S,) [s] from the push, per box ``position`` (S, 3),
        ``quaternion`` (S, 4) (w, x, y, z), ``velocity`` (S, 6) (world linear, world angular),
        and ``restitution`` (collisions: measured, see :func:`_measured_restitution`).
    """
    import mujoco

    model = mujoco.MjModel.from_xml_string(mjcf(scene))
    data = mujoco.MjData(model)
    for _ in range(int(round(SETTLE_TIME / MUJOCO_STEP))):
        mujoco.mj_step(model, data)
    first = scene.boxes[0]
    data.qvel[:] = 0.0
    data.qvel[:3] = first.velocity  # the push (free joint: world linear velocity first)
    start = data.time
    steps = int(round(scene.duration / MUJOCO_STEP))
    record = {"times": [], "contact": []}
    for box in scene.boxes:
        record[box.name] = {"position": [], "quaternion": [], "velocity": []}
    pair = None
    if len(scene.boxes) == 2:
        pair = {mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, b.name) for b in scene.boxes}
    for _ in range(steps + 1):
        record["times"].append(data.time - start)
        for j, box in enumerate(scene.boxes):
            rot = Rotation.from_quat(data.qpos[7 * j + 3 : 7 * j + 7][[1, 2, 3, 0]])
            record[box.name]["position"].append(data.qpos[7 * j : 7 * j + 3].copy())
            record[box.name]["quaternion"].append(data.qpos[7 * j + 3 : 7 * j + 7].copy())
            # Free joint: linear velocity in the world, angular in the body frame.
            record[box.name]["velocity"].append(np.concatenate([data.qvel[6 * j : 6 * j + 3], rot.apply(data.qvel[6 * j + 3 : 6 * j + 6])]))
        record["contact"].append(_box_box_contact(data, pair))
        mujoco.mj_step(model, data)
    out = {"times": np.array(record["times"])}
    for box in scene.boxes:
        out[box.name] = {k: np.array(v) for k, v in record[box.name].items()}
    if pair is not None:
        out["restitution"] = _measured_restitution(scene, out, record["contact"])
    return out


def _box_box_contact(data, pair):
    """(point (3,), normal (3,) from geom1 to geom2) of the deepest box-box contact, or None."""
    if pair is None:
        return None
    best = None
    for i in range(data.ncon):
        contact = data.contact[i]
        if {contact.geom1, contact.geom2} == pair and (best is None or contact.dist < best.dist):
            best = contact
    if best is None or best.dist > 0:
        return None
    normal = best.frame[:3].copy()
    # Normal from the first box (geom 1 in the pair order) toward the second.
    if best.geom1 != min(pair):
        normal = -normal
    return best.pos.copy(), normal


def _point_velocity(record, index, point):
    state = record["velocity"][index]
    return state[:3] + np.cross(state[3:], point - record["position"][index])


def _measured_restitution(scene, sim, contacts):
    """Effective restitution of the box-box collision: normal relative velocity at the contact
    point just after / just before it (MuJoCo has no coefficient; its contact damping sets it).

    Before: the step before the first box-box contact; after: the step after the last one of
    the first contact episode; both at the point and normal of the deepest first contact.
    """
    touching = [c is not None for c in contacts]
    if not any(touching):
        raise RuntimeError(f"collision scene {scene.seed}: the boxes never touched")
    first = touching.index(True)
    last = first + touching[first:].index(False) - 1 if False in touching[first:] else len(touching) - 1
    point, normal = contacts[first]
    a, b = (sim[box.name] for box in scene.boxes)

    def normal_speed(index):
        return float((_point_velocity(b, index, point) - _point_velocity(a, index, point)) @ normal)

    before, after = normal_speed(first - 1), normal_speed(last + 1)
    return {"value": -after / before, "time": float(sim["times"][first]), "contact_time": float(sim["times"][last + 1] - sim["times"][first])}


def camera_samples(scene, sim, seed, rate=CAMERA_RATE, position_noise=POSITION_NOISE, orientation_noise=ORIENTATION_NOISE):
    """Noisy poses of every box in the camera frame at ``rate``.

    Returns:
        ``{name: (times (T,) [s], position (T, 3) camera frame, quaternion (T, 4) (w, x, y, z))}``;
        times are the MuJoCo times of the sampled steps (within half a step of k / rate).
    """
    rng = np.random.default_rng(seed)
    cam_p, cam_q = CAMERA_POSE
    cam = Rotation.from_quat([*cam_q[1:], cam_q[0]])
    index = np.unique(np.round(np.arange(0.0, sim["times"][-1] + 1e-12, 1.0 / rate) / MUJOCO_STEP).astype(int))
    index = index[index < sim["times"].size]
    out = {}
    for box in scene.boxes:
        record = sim[box.name]
        world_rot = Rotation.from_quat(record["quaternion"][index][:, [1, 2, 3, 0]])
        position = cam.inv().apply(record["position"][index] - np.array(cam_p))
        position = position + rng.normal(0.0, position_noise, position.shape)
        rotation = Rotation.from_rotvec(rng.normal(0.0, orientation_noise, (index.size, 3))) * cam.inv() * world_rot
        quat = rotation.as_quat()[:, [3, 0, 1, 2]]
        out[box.name] = (sim["times"][index], position, quat)
    return out


def pose_stream(scene, sim, seed, rest_before=0.3, rate=CAMERA_RATE):
    """:func:`camera_samples` as a live camera sees the scene: the boxes first lie still at their
    settled poses for ``rest_before`` seconds, then the push and the recording.

    Returns:
        The format of :func:`camera_samples`; times [s] from the push (negative before it).
    """
    count = int(round(rest_before / MUJOCO_STEP))
    rest = {"times": np.arange(count) * MUJOCO_STEP}
    for box in scene.boxes:
        rest[box.name] = {k: np.repeat(sim[box.name][k][:1], count, 0) for k in ("position", "quaternion")}
    before = camera_samples(scene, rest, seed + 1_000_003, rate)
    after = camera_samples(scene, sim, seed, rate)
    out = {}
    for name, (times, position, quat) in after.items():
        t0, p0, q0 = before[name]
        keep = t0 - rest_before < -0.5 / rate  # whole frame periods before the push
        out[name] = (np.concatenate([t0[keep] - rest_before, times]), np.concatenate([p0[keep], position]),
                     np.concatenate([q0[keep], quat]))
    return out


def scene_document(scene, unknown=("box.mass", "box/ground.friction", "box/target.restitution"), override=None):
    """The scene file (YAML mapping) for ``diffsim-ros estimate-objects``: geometry, known
    values, and the parameters in ``unknown`` marked ``unknown``.

    Args:
        scene: The Scene.
        unknown: Parameter names to leave unknown (names of pairs absent from the scene are ignored).
        override: Parameter name -> value written instead of the truth (a deliberately wrong
            known value, for failure paths).
    """
    override = dict(override or {})
    truth = {f"{b.name}.mass": b.mass for b in scene.boxes}
    truth.update({f"{b.name}/ground.friction": scene.ground_mu[b.name] for b in scene.boxes})
    truth.update({f"{b.name}/ground.restitution": 0.0 for b in scene.boxes})
    if len(scene.boxes) == 2:
        truth.update({"box/target.friction": scene.box_box_mu})

    def value(name):
        return "unknown" if name in unknown else override.get(name, truth.get(name))

    objects = [{"name": b.name, "box": [2 * h for h in b.half], "mass": value(f"{b.name}.mass"), "topic": TOPICS[b.name]}
               for b in scene.boxes]
    pairs = [{"between": [b.name, "ground"], "friction": value(f"{b.name}/ground.friction"),
              "restitution": value(f"{b.name}/ground.restitution")} for b in scene.boxes]
    if len(scene.boxes) == 2:
        pairs.append({"between": ["box", "target"], "friction": value("box/target.friction"),
                      "restitution": value("box/target.restitution")})
    return {"objects": objects, "static": [{"name": "ground", "plane": {}}], "pairs": pairs}


def calibration_document():
    """A camera-only calibration (no robot): the camera frame in the base frame."""
    (x, y, z), (w, qx, qy, qz) = CAMERA_POSE
    return {"parameters": {"camera.pose": [x, y, z, qx, qy, qz, w]}}


def write_scene_files(scene, sim, directory, seed, storage="mcap", samples=None, **document):
    """Write ``bag/`` (mcap, PoseStamped in the camera frame), ``scene.yaml`` and
    ``calibration.yaml`` into ``directory``; returns their paths. ``samples``: the poses to
    write (default :func:`camera_samples`, e.g. :func:`pose_stream`'s); ``document``: options
    of :func:`scene_document`."""
    from diffsim_ros.io.bags import write_bag
    from diffsim_ros.io.ros_messages import pose_stamped_msg
    from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    factory = TypestoreMessages(default_typestore())
    messages = []
    for name, (times, position, quat) in (samples or camera_samples(scene, sim, seed)).items():
        for t, p, q in zip(times, position, quat):
            stamp = START_STAMP_NS + int(round(t * 1e9))
            messages.append((stamp, TOPICS[name], pose_stamped_msg(factory, stamp, "camera", p, q)))
    messages.sort(key=lambda item: (item[0], item[1]))
    bag = write_bag(directory / "bag", ((topic, msg, ns) for ns, topic, msg in messages), storage=storage)
    document = scene_document(scene, **document)
    (directory / "scene.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (directory / "calibration.yaml").write_text(yaml.safe_dump(calibration_document(), sort_keys=False))
    return bag, directory / "scene.yaml", directory / "calibration.yaml"


def truth_values(scene, sim):
    """The true values of the scene's parameters (restitution: measured, see :func:`simulate`)."""
    truth = {"box.mass": scene.boxes[0].mass, "box/ground.friction": scene.ground_mu["box"]}
    if "restitution" in sim:
        truth["box/target.restitution"] = sim["restitution"]["value"]
    return truth


def staged_fit(scene_world, observations, truth_hit, initial, max_evaluations=30):
    """The pre-issue-19 recipe a user had: ``estimate_in_stages`` with stages cut by hand at the
    last camera frame before the (true) hit: friction, then mass + restitution, then all three."""
    from diffsim_ros.estimation.objects import estimate_in_stages

    before = [t for t in observations["box"].times if t < truth_hit]
    names = ["box.mass", "box/ground.friction", "box/target.restitution"]
    stages = [(["box/ground.friction"], before[-1]), (["box.mass", "box/target.restitution"], None), (names, None)]
    return estimate_in_stages(scene_world, observations, stages, at_rest=("target",), max_evaluations=max_evaluations,
                              initial=initial)[-1]
