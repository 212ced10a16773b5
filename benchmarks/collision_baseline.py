"""A plain baseline for issue 19's collisions: the box's mass from linear momentum exchange.

Experiment script (not part of the library), the side-by-side baseline the full-model fit
(``bench_contact --collision-grid``) is compared with. The pushed box's mass follows from the
known target's momentum: ``m_box = -m_target (dv_target . dv_box) / |dv_box|^2``, the velocity
changes in the ground plane across the hit. Two versions:

* **exact velocities**: MuJoCo's own velocities one 0.1 ms step before the first and after the
  last box-box contact (no camera; what is left is the ground's friction impulse during the
  hit and MuJoCo's soft contact);
* **camera**: the same camera poses the fit gets (``contact_scenes.camera_samples``, 30 Hz,
  1 mm / 0.2 deg noise, same noise seeds), mapped to the world through the true camera pose;
  each velocity at the hit from a quadratic in time fitted to the positions within ``window``
  before or after it (constant Coulomb deceleration makes a slide's path a quadratic). The hit
  time is MuJoCo's true first contact: favourable to the baseline, which gets it for free.

Run: ``.venv/bin/python -m benchmarks.collision_baseline [--scenes 0,1,2] [--noise-seeds 11,12,13]
[--windows 0.1,0.2,0.3] [--fit-log F.jsonl ...] [--write]``; ``--fit-log`` adds the fit's mass
error from ``--collision-grid`` logs of the same scenes and noise seeds.
"""

import argparse
import json
import math

import numpy as np
from scipy.spatial.transform import Rotation

from benchmarks.common import machine_line, markdown_table, write_section

SECTION = "collision-baseline"
GAP = 0.004  # [s] frames this close to the hit are left out (the hit lasts ~1-3 ms)


def exact_mass(cs, scene, sim):
    """Mass [kg] from MuJoCo's velocities just before and after the hit, and the hit time [s]."""
    hit = sim["restitution"]
    times = sim["times"]
    before = int(np.searchsorted(times, hit["time"])) - 1
    after = int(np.searchsorted(times, hit["time"] + hit["contact_time"])) + 1
    dv_box = sim["box"]["velocity"][after, :2] - sim["box"]["velocity"][before, :2]
    dv_target = sim["target"]["velocity"][after, :2] - sim["target"]["velocity"][before, :2]
    return -cs.TARGET_MASS * float(dv_target @ dv_box) / float(dv_box @ dv_box), hit["time"]


def _world(cs, samples, name):
    position, orientation = cs.CAMERA_POSE
    camera = Rotation.from_quat([*orientation[1:], orientation[0]])
    times, in_camera, _ = samples[name]
    return times, camera.apply(in_camera) + np.asarray(position)


def _velocity_at(times, positions, hit, window, side):
    """Planar velocity [m/s] at ``hit`` from a quadratic fitted on one side of it."""
    offset = times - hit
    keep = (offset < -GAP) & (offset > -window) if side == "before" else (offset > GAP) & (offset < window)
    if keep.sum() < 3:  # a quadratic needs three
        raise ValueError(f"only {int(keep.sum())} frames within {window} s {side} the hit")
    return np.polyfit(offset[keep], positions[keep, :2], 2)[1]


def camera_mass(cs, scene, sim, seed, hit, window):
    """Mass [kg] from the camera's poses (noise ``seed``), velocities from ``window`` [s] each side."""
    samples = cs.camera_samples(scene, sim, seed)
    box_t, box_p = _world(cs, samples, "box")
    target_t, target_p = _world(cs, samples, "target")
    dv_box = _velocity_at(box_t, box_p, hit, window, "after") - _velocity_at(box_t, box_p, hit, window, "before")
    dv_target = _velocity_at(target_t, target_p, hit, window, "after")  # at rest before the hit
    return -cs.TARGET_MASS * float(dv_target @ dv_box) / float(dv_box @ dv_box)


def fit_errors(paths):
    """(scene, noise seed) -> the fit's relative mass error, from ``--collision-grid`` logs."""
    errors = {}
    for path in paths:
        with open(path) as handle:
            for line in handle:
                row = json.loads(line)
                errors.setdefault((row["scene"], row["noise_seed"]), row["mass_error"])
    return errors


def _rms(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else math.nan


def run(scenes, noise_seeds, windows, fits):
    """Table rows and per-column rms of the relative mass errors [%]."""
    import contact_scenes as cs

    rows, columns = [], {"exact": [], "fit": [], **{w: [] for w in windows}}
    for index in scenes:
        scene = cs.random_collision(index)
        sim = cs.simulate(scene)
        truth = scene.boxes[0].mass
        exact, hit = exact_mass(cs, scene, sim)
        columns["exact"].append(100 * (exact / truth - 1))
        for seed in (index, *noise_seeds):
            cells = [str(index), str(seed), f"{100 * (exact / truth - 1):+.1f} %"]
            for window in windows:
                error = 100 * (camera_mass(cs, scene, sim, seed, hit, window) / truth - 1)
                columns[window].append(error)
                cells.append(f"{error:+.1f} %")
            fit = fits.get((index, seed))
            if fit is not None:
                columns["fit"].append(100 * fit)
            cells.append("-" if fit is None else f"{100 * fit:+.1f} %")
            rows.append(cells)
            print(" | ".join(cells), flush=True)
    return rows, {key: _rms(values) for key, values in columns.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenes", default="0,1,2")
    parser.add_argument("--noise-seeds", default="11,12,13", help="besides the scene's own (noise seed = scene)")
    parser.add_argument("--windows", default="0.1,0.2,0.3", help="camera frames used each side of the hit [s]")
    parser.add_argument("--fit-log", nargs="*", default=[], help="--collision-grid logs (JSON lines) of the same scenes")
    parser.add_argument("--write", action="store_true", help=f"write RESULTS.md section '{SECTION}'")
    args = parser.parse_args(argv)
    scenes = [int(s) for s in args.scenes.split(",")]
    seeds = [int(s) for s in args.noise_seeds.split(",") if s]
    windows = [float(w) for w in args.windows.split(",")]
    rows, rms = run(scenes, seeds, windows, fit_errors(args.fit_log))
    header = ["scene", "noise seed", "exact velocities", *(f"camera, {w:g} s each side" for w in windows), "full-model fit"]
    summary = ["rms", "", f"{rms['exact']:.1f} %", *(f"{rms[w]:.1f} %" for w in windows), f"{rms['fit']:.1f} %"]
    body = (f"### Collisions: the full-model fit against a plain momentum baseline (`python -m benchmarks.collision_baseline`)\n\n"
            f"{machine_line()}. Mass error of the pushed box, relative to the truth. Command: `python -m benchmarks.collision_baseline "
            f"--scenes {args.scenes} --noise-seeds {args.noise_seeds} --windows {args.windows}"
            f"{' --fit-log ' + ' '.join(args.fit_log) if args.fit_log else ''} --write`.\n\n"
            + markdown_table(header, rows + [summary]))
    print(body)
    if args.write:
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
