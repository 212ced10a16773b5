"""Sliding, spinning boxes: MuJoCo (issue 19's scene settings) and our step against exact Coulomb friction.

Experiment script (not part of the library). The reference is
:mod:`diffsim_ros.testbed.coulomb_box`: a flat box on four corners, Coulomb's law at every corner
and instant, integrated without a time step. Three parts:

* ``slides``: a box alone on the ground with the MJCF of ``test/contact_scenes.py`` (elliptic
  cones, impratio 10, ground solref (4 ms, 1), 0.1 ms), pushed and spun at once after settling;
* ``hits``: issue 19's collision scenes from MuJoCo's state of each box 20 ms after the target
  starts to move (the hit is over), the rest of the slide;
* ``settings``: one spinning slide under other MuJoCo settings (step, impratio, solref, cone, noslip).

Ours is ``ContactWorld`` with the cone solver at the fits' 5 ms step and 1e-3 compliance.
Run: ``.venv/bin/python -m benchmarks.coulomb_slides [--write]``.
"""

import argparse
import math
import sys
import time

import numpy as np
import torch

from benchmarks.common import markdown_table, measured_line, write_section
import contact_scenes as cs  # noqa: E402  (test/ is on the path through benchmarks.common)
from diffsim_ros.dynamics.spatial_np import quat_to_matrix

__all__ = ["main"]

MODEL_DT = 0.005  # [s]: the scene files' default step of the fits
HIT_CLEAR = 0.02  # [s] after the target starts to move: the box-box contact is over
TARGET_MOVING = 0.01  # [m/s]
SHAPES = {"10 x 10 x 6 cm": (0.05, 0.05, 0.03), "13 x 8 x 6 cm": (0.065, 0.04, 0.03)}
FRICTIONS = (0.15, 0.3, 0.5, 0.8)
MASS = 0.7  # [kg]
SPEED, SPIN, OFF_AXIS = 1.0, 6.0, math.radians(25.0)  # push [m/s], spin [rad/s], push direction from the box's x axis


def _yaw(quaternions):
    """Yaw [rad] of the box's first axis in the plane, quaternions (..., 4) (w, x, y, z)."""
    rot = quat_to_matrix(quaternions)
    return np.arctan2(rot[..., 1, 0], rot[..., 0, 0])


def _mujoco_slide(mjcf, velocity, spin, duration):
    """MuJoCo from rest: settle, then set the push. Returns times (S,), planar velocity (S, 2),
    spin (S,), yaw (S,) and whether the box touches the ground (S,)."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(mjcf)
    data = mujoco.MjData(model)
    for _ in range(int(round(cs.SETTLE_TIME / model.opt.timestep))):
        mujoco.mj_step(model, data)
    data.qvel[:] = 0.0
    data.qvel[:2] = velocity
    data.qvel[5] = spin  # body z = world z while flat
    out = {k: [] for k in ("velocity", "spin", "yaw", "touch")}
    for _ in range(int(round(duration / model.opt.timestep)) + 1):
        out["velocity"].append(data.qvel[:2].copy())
        out["spin"].append(data.qvel[5])
        out["yaw"].append(float(_yaw(data.qpos[3:7])))
        out["touch"].append(data.ncon > 0)
        mujoco.mj_step(model, data)
    out = {k: np.array(v) for k, v in out.items()}
    out["times"] = np.arange(len(out["spin"])) * model.opt.timestep
    return out


def _ours(half, mass, mu, velocity, spin, yaw, duration):
    """Our cone step (the fits' step and compliance) from the same flat state."""
    from diffsim_ros.estimation.object_fit import FIT_REGULARIZATION
    from diffsim_ros.sim.contact import Box, ContactWorld, RigidObject

    world = ContactWorld.create([RigidObject("box", Box(tuple(half)), mass=mass, friction=mu)], solver="cone", dt=MODEL_DT,
                                dtype=torch.float64).with_regularization(FIT_REGULARIZATION)
    quat = [[math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]]
    state = world.initial_state(position=[[0.0, 0.0, half[2]]], orientation=quat,
                                linear_velocity=[[velocity[0], velocity[1], 0.0]], angular_velocity=[[0.0, 0.0, spin]])
    steps = int(round(duration / MODEL_DT))
    with torch.no_grad():
        states, _ = world.rollout(state, steps)
    times = MODEL_DT * np.arange(steps + 1)
    vel = np.concatenate([[velocity], states.linear_velocity[:, 0, :2].numpy()])
    spins = np.concatenate([[spin], states.angular_velocity[:, 0, 2].numpy()])
    return times, vel, spins


def _at(times, values, t):
    """Linear interpolation of samples (S,) or (S, 2) at time t."""
    values = np.asarray(values)
    if values.ndim == 1:
        return np.interp(t, times, values)
    return np.array([np.interp(t, times, column) for column in values.T])


def _compare(half, mass, mu, velocity, spin, yaw, mj, duration):
    """Spin and speed at a quarter and half of the Coulomb stop, and the yaw turned: MuJoCo, ours, exact."""
    from diffsim_ros.testbed.coulomb_box import CoulombBox, slide

    box = CoulombBox(tuple(half), mass, mu)
    exact = slide(box, velocity, spin, mj["times"], yaw=yaw)
    stop = min(exact["stop_time"], duration)
    times, vel, spins = _ours(half, mass, mu, velocity, spin, yaw, duration)
    cells = []
    for fraction in (0.25, 0.5):
        t = fraction * stop
        cells.append(f"{_at(mj['times'], mj['spin'], t):+.2f} / {_at(times, spins, t):+.2f} / {_at(mj['times'], exact['spin'], t):+.2f}")
    t = 0.5 * stop
    cells.append(" / ".join(f"{np.linalg.norm(v):.3f}" for v in (_at(mj["times"], mj["velocity"], t), _at(times, vel, t),
                                                                   _at(mj["times"], exact["velocity"], t))))
    turned = [math.degrees(np.unwrap(mj["yaw"])[-1] - yaw), math.degrees(np.unwrap(exact["yaw"])[-1] - yaw)]
    cells.append(f"{turned[0]:+.1f} / {turned[1]:+.1f}")
    sliding = mj["times"] <= stop
    cells.append(f"{100 * (1 - mj['touch'][sliding].mean()):.0f} %")
    return [f"{stop:.3f}", *cells]


HEADER = ["stop (Coulomb) [s]", "spin at 1/4 stop: MuJoCo / ours / Coulomb [rad/s]", "spin at 1/2 stop", "speed at 1/2 stop [m/s]",
          "yaw turned: MuJoCo / Coulomb [deg]", "MuJoCo steps off the ground while sliding"]


def _slide_mjcf(half, mu, yaw):
    box = cs.Box("box", tuple(half), MASS, (0.0, 0.0, half[2]), yaw)
    return cs.mjcf(cs.Scene("slide", (box,), {"box": mu}))


def _push(yaw, spin):
    angle = yaw + OFF_AXIS
    return np.array([SPEED * math.cos(angle), SPEED * math.sin(angle)]), spin


def slides(yaw=0.4, duration=0.8):
    """Part ``slides``: rows (shape, mu, motion, *cells)."""
    rows = []
    for shape, half in SHAPES.items():
        for mu in FRICTIONS:
            mjcf = _slide_mjcf(half, mu, yaw)
            for motion, spin in (("slide + spin", SPIN), ("slide", 0.0)):
                velocity, spin = _push(yaw, spin)
                mj = _mujoco_slide(mjcf, velocity, spin, duration)
                rows.append([shape, f"{mu:g}", motion, *_compare(half, MASS, mu, velocity, spin, yaw, mj, duration)])
                print(" | ".join(rows[-1]), flush=True)
    return rows


def _after_hit(sim, name, start):
    """MuJoCo's record of one box from index ``start``: the dict of :func:`_mujoco_slide` (no contact flags)."""
    quat = sim[name]["quaternion"][start:]
    return {"times": sim["times"][start:] - sim["times"][start], "velocity": sim[name]["velocity"][start:, :2],
            "spin": sim[name]["velocity"][start:, 5], "yaw": _yaw(quat), "touch": np.ones(len(quat), dtype=bool)}


def hits(indices=(0, 1, 2)):
    """Part ``hits``: rows (scene, box, *cells) from MuJoCo's state after each collision scene's hit."""
    rows = []
    for index in indices:
        scene = cs.random_collision(index)
        sim = cs.simulate(scene)
        moving = np.linalg.norm(sim["target"]["velocity"][:, :2], axis=1) > TARGET_MOVING
        start = int(np.argmax(moving)) + int(round(HIT_CLEAR / cs.MUJOCO_STEP))
        for box in scene.boxes:
            mj = _after_hit(sim, box.name, start)
            mu = scene.ground_mu[box.name]
            cells = _compare(box.half, box.mass, mu, mj["velocity"][0], mj["spin"][0], mj["yaw"][0], mj, float(mj["times"][-1]))
            rows.append([str(index), f"{box.name} ({mu:.2f})", *cells[:-1]])
            print(" | ".join(rows[-1]), flush=True)
    return rows


SETTINGS = {  # MJCF edits of the scenes' settings
    "the scenes' (0.1 ms, impratio 10, solref 4 ms)": (),
    "step 20 us": (('timestep="0.0001"', 'timestep="2e-05"'),),
    "step 10 us": (('timestep="0.0001"', 'timestep="1e-05"'),),
    "impratio 1": (('impratio="10"', 'impratio="1"'),),
    "impratio 100": (('impratio="10"', 'impratio="100"'),),
    "ground solref 1 ms": (("0.004 1.0", "0.001 1.0"),),
    "ground solref 10 ms": (("0.004 1.0", "0.01 1.0"),),
    "solimp (0.9, 0.95)": (("0.99 0.999 0.001", "0.9 0.95 0.001"),),
    "pyramidal cone": (('cone="elliptic"', 'cone="pyramidal"'),),
    # MuJoCo's post-solve that suppresses the soft model's slip in friction dimensions
    "noslip_iterations 100": (('impratio="10"', 'impratio="10" noslip_iterations="100"'),),
}


def settings(shape="13 x 8 x 6 cm", mu=0.5, yaw=0.4, duration=0.3):
    """Part ``settings``: one spinning slide under other MuJoCo settings."""
    half = SHAPES[shape]
    base = _slide_mjcf(half, mu, yaw)
    velocity, spin = _push(yaw, SPIN)
    rows = []
    for name, edits in SETTINGS.items():
        mjcf = base
        for old, new in edits:
            if old not in mjcf:
                raise ValueError(f"setting {name!r}: {old!r} is not in the scenes' MJCF")
            mjcf = mjcf.replace(old, new)
        mj = _mujoco_slide(mjcf, velocity, spin, duration)
        rows.append([name, *_compare(half, MASS, mu, velocity, spin, yaw, mj, duration)])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def section(parts, command, seconds):
    body = [
        "## Sliding, spinning boxes: MuJoCo and our step against exact Coulomb friction (`python -m benchmarks.coulomb_slides`)",
        "",
        "Exact: `diffsim_ros.testbed.coulomb_box` (a flat box on four corners, Coulomb's law at every corner and instant, the "
        "loads split in a plane to balance the friction's tipping moment; scipy DOP853, no time step). MuJoCo: the MJCF of "
        "`test/contact_scenes.py` (issue 19's scenes). Ours: `ContactWorld`, cone solver, the fits' 5 ms step and 1e-3 compliance, "
        f"from the same state. Boxes of {MASS:g} kg pushed at {SPEED:g} m/s {math.degrees(OFF_AXIS):.0f} deg off their long axis, "
        f"with {SPIN:g} rad/s of spin or none. 'Off the ground': MuJoCo steps with no box-ground contact while the exact box slides.",
        "",
        measured_line(command, seconds),
    ]
    if "slides" in parts:
        body += ["", "### A box alone on the ground", "", markdown_table(["box", "mu", "push", *HEADER], parts["slides"])]
    if "hits" in parts:
        body += ["", f"### After issue 19's hits (from MuJoCo's state {HIT_CLEAR * 1e3:.0f} ms after the target starts to move)", "",
                 markdown_table(["scene", "box (mu)", *HEADER[:-1]], parts["hits"])]
    if "settings" in parts:
        body += ["", "### One spinning slide (13 x 8 x 6 cm, mu 0.5) under other MuJoCo settings", "",
                 markdown_table(["MuJoCo", *HEADER], parts["settings"])]
    return "\n".join(body)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="slides,hits,settings")
    parser.add_argument("--write", action="store_true", help="write the contact-coulomb-slides section of RESULTS.md")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    torch.set_num_threads(1)
    command = " ".join(["python -m benchmarks.coulomb_slides", *sys.argv[1:]])
    start = time.perf_counter()
    runs = {"slides": slides, "hits": hits, "settings": settings}
    parts = {name: runs[name]() for name in args.parts.split(",")}
    body = section(parts, command, time.perf_counter() - start)
    print(body)
    if args.write:
        write_section("contact-coulomb-slides", body)


if __name__ == "__main__":
    main()
