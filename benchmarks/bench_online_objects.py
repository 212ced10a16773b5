"""Online object estimation (object_estimator_node) against the offline fit of the same data.

``python -m benchmarks.bench_online_objects [--seeds 0 4 10]``

For every seed: a slide of test/contact_scenes.py (MuJoCo, rectangular box pushed off-axis,
elliptic cone, 30 Hz PoseStamped in the camera frame, 1 mm / 0.2 deg noise) recorded as a live
camera sees it (``pose_stream``: 0.3 s still, the slide, 0.25 s still) into an mcap bag, played
into object_estimator_node on the embedded runtime. Compared:

* **online**: the friction the node published, its std, the fit's wall time, and the
  executor-side cost of looking for an event (``next_event``, every ``update_check_period``);
* **offline, same poses**: ``estimate-objects``' loading of the bag with the scene window cut
  to the node's event, then ``fit_objects``: must be the same number;
* **offline, whole recording**: ``estimate-objects``' data from the push to the end (what a
  user would cut by hand);
* the truth.

``--collision SEED`` instead runs one collision scene (1.4 s after the push) through the
estimator and prints what became of each event (not written to RESULTS.md).

Then two events in one stream (the last seed's slide, then the same slide pushed again from
where the box stopped, rotated about the vertical with it): both accepted, the second fit
warm-started, and their inverse-variance combination. Writes the ``online-objects`` section of
RESULTS.md.
"""

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from scipy.spatial.transform import Rotation

from benchmarks.common import markdown_table, measured_line, write_section

import contact_scenes as scenes  # noqa: E402  (test/ is on the path through benchmarks.common)
from diffsim_ros.pipelines.objects import load_inputs
from diffsim_ros.estimation.object_fit import fit_objects
from diffsim_ros.estimation.online_objects import OnlineObjectEstimator
from diffsim_ros.io.object_poses import camera_to_base
from diffsim_ros.io.scene import load_scene, parse_scene
from diffsim_ros.nodes.messages import estimates_from_msg
from diffsim_ros.nodes.object_estimator_node import ObjectEstimatorNode
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY
from diffsim_ros.runtime import LATCHED_QOS
from diffsim_ros.runtime.embedded import EmbeddedRuntime

FRICTION = "box/ground.friction"
REST_BEFORE, REST_AFTER = 0.3, 0.25  # [s]


def _recording(seed, directory):
    scene = scenes.random_slide(seed)
    scene = dataclasses.replace(scene, duration=scene.duration + REST_AFTER - 0.15)
    sim = scenes.simulate(scene)
    samples = scenes.pose_stream(scene, sim, seed=seed, rest_before=REST_BEFORE)
    files = scenes.write_scene_files(scene, sim, directory, seed=seed, samples=samples, unknown=("box.mass", FRICTION))
    return scene, samples, files


def _online(files, out):
    """Play the bag into the node: (node, published (values, std), next_event seconds per call)."""
    bag, scene_path, calibration = files
    received = []
    with EmbeddedRuntime() as runtime:
        node = runtime.add_node(ObjectEstimatorNode, "object_estimator", parameter_overrides={
            "scene_file": str(scene_path), "calibration_file": str(calibration), "save_on_shutdown": False,
            "objects_output": str(out / "objects.yaml")})
        detect = []
        original = node.estimator.next_event

        def timed():
            start = time.perf_counter()
            try:
                return original()
            finally:
                detect.append(time.perf_counter() - start)

        node.estimator.next_event = timed
        runtime.create_node("listener").create_subscription(
            FLOAT64_MULTI_ARRAY, "/object_estimator/estimates", lambda msg: received.append(estimates_from_msg(msg)), LATCHED_QOS)
        player = runtime.play_bag(bag, publish_clock=False)
        runtime.spin_until_condition(lambda: player.done, timeout_s=60.0)
        runtime.spin_for(1.0)
    return node, received, detect


def _offline(files, window, out):
    bag, scene_path, calibration = files
    document = yaml.safe_load(scene_path.read_text())
    document["window"] = {"start": window[0], "end": window[1]}
    path = out / f"scene_{window[0]:.4f}.yaml"
    path.write_text(yaml.safe_dump(document))
    parsed, observations, _ = load_inputs(path, bag, calibration)
    start = time.perf_counter()
    fit = fit_objects(parsed.world(), observations, parsed.unknowns, initial=parsed.initial_guess)
    return fit, time.perf_counter() - start


def _slide_row(seed, work):
    scene, _, files = _recording(seed, work / f"slide{seed}")
    node, received, detect = _online(files, work / f"slide{seed}")
    start, end, _ = node.estimator.last_event
    outcome = node.estimator.outcomes[-1]
    same, _ = _offline(files, (start - 1e-4, end + 1e-4), work / f"slide{seed}")
    whole, whole_seconds = _offline(files, (REST_BEFORE - 1e-4, 1e9), work / f"slide{seed}")
    truth = scene.ground_mu["box"]
    mu, std = (received[-1][0][FRICTION], received[-1][1][FRICTION]) if received else (float("nan"),) * 2
    return [seed, f"{truth:.4f}", outcome.status, f"{mu:.5f} ± {std:.5f}", f"{100 * (mu / truth - 1):+.2f}",
            f"{abs(mu - same.values[FRICTION]):.1e}", f"{whole.values[FRICTION]:.5f} ± {whole.std[FRICTION]:.5f}",
            f"{outcome.seconds:.1f}", f"{whole_seconds:.1f}", f"{1e3 * np.median(detect):.1f} / {1e3 * max(detect):.1f}",
            sum(outcome.poses.values())]


def _world_rows(samples):
    (x, y, z), (w, qx, qy, qz) = scenes.CAMERA_POSE
    camera = np.eye(4)
    camera[:3, :3], camera[:3, 3] = Rotation.from_quat([qx, qy, qz, w]).as_matrix(), (x, y, z)
    rows = []
    for name, (times, position, quat) in samples.items():
        position, quat = camera_to_base(camera, position, quat)
        rows += [(name, float(t), p, q) for t, p, q in zip(times, position, quat)]
    return sorted(rows, key=lambda row: row[1])


def _pushed_again(rows):
    """The slide again from where it stopped: rows from the push on, moved by the rigid motion
    (rotation about the vertical, translation) taking the start pose to the end pose."""
    first = next(r for r in rows if r[1] >= 0.0)
    last = rows[-1]
    yaw = lambda q: Rotation.from_quat([q[1], q[2], q[3], q[0]]).as_euler("zyx")[0]  # noqa: E731
    turn = Rotation.from_euler("z", yaw(last[3]) - yaw(first[3]))
    shift = last[1] + 1 / scenes.CAMERA_RATE - first[1]
    moved = []
    for name, t, p, q in rows:
        if t < 0.0:
            continue
        position = turn.apply(p - first[2]) + last[2]
        quat = (turn * Rotation.from_quat([q[1], q[2], q[3], q[0]])).as_quat()
        moved.append((name, t + shift, position, quat[[3, 0, 1, 2]]))
    return moved


def _two_events(seed, work):
    _, samples, files = _recording(seed, work / "two")
    scene = load_scene(files[1])
    rows = _world_rows(samples)
    estimator = OnlineObjectEstimator(scene.world(), scene.unknowns)
    results = []
    for row in rows + _pushed_again(rows):
        estimator.add_pose(*row)
        outcome = estimator.update()
        if outcome is not None:
            results.append(outcome)
    table = [[k + 1, o.status, f"{o.values.get(FRICTION, float('nan')):.5f} ± {o.std.get(FRICTION, float('nan')):.5f}",
              f"{o.seconds:.1f}", o.evaluations] for k, o in enumerate(results)]
    combined = (estimator.values.get(FRICTION), estimator.std.get(FRICTION), estimator.birge.get(FRICTION))
    return table, combined


def _collision(seed, duration=1.4):
    """A collision of contact_scenes (recorded ``duration`` s after the push) through the estimator:
    one line per event (verdict, values, fit time, evaluations)."""
    scene = dataclasses.replace(scenes.random_collision(seed), duration=duration)
    sim = scenes.simulate(scene)
    samples = scenes.pose_stream(scene, sim, seed=seed, rest_before=REST_BEFORE)
    parsed = parse_scene(scenes.scene_document(scene))
    estimator = OnlineObjectEstimator(parsed.world(), parsed.unknowns)
    lines = [f"truth {scenes.truth_values(scene, sim)}"]
    for row in _world_rows(samples):
        estimator.add_pose(*row)
        outcome = estimator.update()
        if outcome is not None:
            lines.append(f"{outcome.status} ({outcome.fit_status or 'not fitted'}): {outcome.reason[:160]}; values "
                         f"{outcome.values}; fit {outcome.seconds:.0f} s, {outcome.evaluations} evaluations, poses {outcome.poses}")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 4, 10])
    parser.add_argument("--collision", type=int, default=None,
                        help="only run this collision scene through the estimator and print its events (minutes per fit)")
    args = parser.parse_args(argv)
    if args.collision is not None:
        print("\n".join(_collision(args.collision)))
        return
    command = " ".join(["python -m benchmarks.bench_online_objects", *(sys.argv[1:] if argv is None else argv)])
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = []
        for seed in args.seeds:
            rows.append(_slide_row(seed, work))
            print(rows[-1], file=sys.stderr, flush=True)
        two, combined = _two_events(args.seeds[-1], work)
    body = "\n\n".join([
        "## Online object estimation: object_estimator_node vs the offline fit (`python -m benchmarks.bench_online_objects`)",
        measured_line(command, time.perf_counter() - start),
        "Slides of test/contact_scenes.py recorded as a live camera sees them (still, push, slide, still), played from a bag "
        "into the node on the embedded runtime. *same poses*: |online - offline| with estimate-objects' loading cut to the "
        "node's event; *whole recording*: estimate-objects' data from the push on; *detect*: executor-side cost of looking "
        "for a completed event (median / max per check).",
        markdown_table(["seed", "true mu", "online verdict", "online mu ± std", "error %", "same poses |diff|",
                        "offline, whole recording", "online fit [s]", "offline fit [s]", "detect [ms]", "poses fitted"], rows),
        f"Two events in one stream (seed {args.seeds[-1]}, then pushed again from where it stopped; the second fit "
        "warm-started from the first):",
        markdown_table(["event", "verdict", "mu ± std", "fit [s]", "evaluations"], two),
        f"Combined (inverse variance): mu = {combined[0]:.5f} ± {combined[1]:.5f}, Birge ratio {combined[2]:.2f}."
        if combined[0] is not None else "Combined: no accepted event.",
    ])
    write_section("online-objects", body)
    print(body)


if __name__ == "__main__":
    main()
