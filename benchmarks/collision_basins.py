"""Where issue 19's collision fits end: the estimator's basin against the one around the truth.

Experiment script (not part of the library). For each collision scene of ``test/contact_scenes.py``
and camera-noise seed, on poses our own model made (no model error) and on MuJoCo's:

* **the estimator**: ``fit_objects`` from the grid's worst start (mass 2x, mu 1.0, e 0.5);
* **from the truth**: one joint fit of the same unknowns and initial states on the same poses,
  started from the true mass and friction, the model's restitution and the initial states the
  model fits to noise-free poses (``collision_limits._model_truth``: an oracle start no user
  has), judged as ``fit_objects`` judges its own fits.

A start-independent least-squares estimator ends at the same point from both; where the truth's
fit ends at a lower cost, the estimator stopped in another basin of the same cost function.

Run: ``.venv/bin/python -m benchmarks.collision_basins [--scenes 0,1,2] [--seeds 21,...,28]
[--log F.jsonl] [--write]`` (about 4 min CPU per scene with 8 seeds; ``--write-from A,B`` fills
the ``contact-collision-basins`` section of RESULTS.md from the logs of runs made in parallel).
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.collision_limits import E_TOL, MASS_TOL, MU_TOL, UNKNOWNS, WORST_START, _inputs, _model_truth, self_consistent_sim
from benchmarks.common import markdown_table, measured_line, write_section

__all__ = ["main"]


def _errors(values, reference):
    return {"mass": values["box.mass"] / reference["box.mass"] - 1,
            "mu": values["box/ground.friction"] / reference["box/ground.friction"] - 1,
            "e": values["box/target.restitution"] - reference["box/target.restitution"]}


def _from_truth(world, observations, fit, values, state, settings):
    """The joint fit started at the truth, judged as ``fit_objects`` judges: ``(estimate, status)``."""
    from diffsim_ros.estimation import object_fit as of
    from diffsim_ros.estimation.objects import estimate_object_parameters, fitted_poses

    split = of._split_time(observations, fit.events)
    estimate = estimate_object_parameters(world.with_parameters(values), observations, list(UNKNOWNS), at_rest=fit.at_rest,
                                          max_evaluations=settings.max_evaluations, initial_state=state,
                                          cost_tolerance=settings.cost_tolerance, split_time=split)
    fitted = fitted_poses(world.with_parameters(estimate.values), estimate, observations)
    drift = of.residual_drift(observations, fitted, fit.noise)
    status, _ = of._judge(estimate, {n: bool(estimate.identifiable[n]) for n in UNKNOWNS}, drift, settings)
    return estimate, status


def _scene(index, seeds, settings, log):
    import contact_scenes as cs

    from diffsim_ros.estimation.object_fit import fit_objects
    from diffsim_ros.estimation.objects import as_pose_series

    scene = cs.random_collision(index)
    sim = cs.simulate(scene)
    truth = cs.truth_values(scene, sim)
    world, observations, _, values, state = _model_truth(scene, sim, truth, settings)
    start = min(float(series.times[0]) for series in observations.values())
    ours = self_consistent_sim(sim, world, values, state, start)
    records = []
    for source, data, reference in (("our model", ours, values), ("MuJoCo", sim, truth)):
        for seed in seeds:
            parsed, obs = _inputs(scene, data, seed)
            guess = {"box.mass": WORST_START["mass"] * reference["box.mass"], "box/ground.friction": WORST_START["mu"],
                     "box/target.restitution": WORST_START["e"]}
            cpu = time.process_time()
            fit = fit_objects(parsed.world(), obs, parsed.unknowns, initial=guess, settings=settings)
            cpu = time.process_time() - cpu
            series = {name: as_pose_series(name, value) for name, value in obs.items()}
            oracle, status = _from_truth(world, series, fit, values, state, settings)
            record = {"scene": index, "seed": seed, "source": source, "cpu": cpu,
                      "estimator": {**_errors(fit.values, reference), "cost": fit.estimate.cost, "status": fit.status},
                      "truth_start": {**_errors(oracle.values, reference), "cost": oracle.cost, "status": status}}
            records.append(record)
            with open(log, "a") as handle:
                handle.write(json.dumps(record) + "\n")
            a, b = record["estimator"], record["truth_start"]
            print(f"scene {index} {source} seed {seed}: estimator mass {100 * a['mass']:+.1f} % mu {100 * a['mu']:+.1f} % "
                  f"cost {a['cost']:.3e} {a['status']} | from the truth mass {100 * b['mass']:+.1f} % mu {100 * b['mu']:+.1f} % "
                  f"cost {b['cost']:.3e} {b['status']}", flush=True)
    return records


def _within(r):
    return abs(r["mass"]) <= MASS_TOL and abs(r["mu"]) <= MU_TOL and abs(r["e"]) <= E_TOL


def _rows(records):
    rows = []
    for index in sorted({r["scene"] for r in records}):
        for source in ("our model", "MuJoCo"):
            rs = [r for r in records if r["scene"] == index and r["source"] == source]
            if not rs:
                continue
            lower = sum(r["truth_start"]["cost"] < r["estimator"]["cost"] * (1 - 1e-3) for r in rs)
            ratio = np.array([r["estimator"]["cost"] / r["truth_start"]["cost"] for r in rs])
            for start in ("estimator", "truth_start"):
                m, u, e = (np.array([r[start][k] for r in rs]) for k in ("mass", "mu", "e"))
                ok = sum(r[start]["status"] == "ok" for r in rs)
                rows.append([index, source, "`fit_objects`, worst start" if start == "estimator" else "joint fit from the truth",
                             f"{100 * m.mean():+.1f} %, sd {100 * m.std(ddof=1):.1f} %", f"{100 * u.mean():+.1f} %, sd {100 * u.std(ddof=1):.1f} %",
                             f"{e.mean():+.3f}, sd {e.std(ddof=1):.3f}", f"{sum(_within(r[start]) for r in rs)}/{len(rs)}", f"{ok}/{len(rs)}",
                             f"{lower}/{len(rs)} (estimator's cost / truth's: median {np.median(ratio):.2f}, max {ratio.max():.2f})"
                             if start == "truth_start" else "-"])
    return rows


def section(records, command, seconds):
    header = ["scene", "poses", "fit", "mass error: mean, sd", "mu error: mean, sd", "restitution error: mean, sd",
              "within the targets", "ok", "truth's fit ends lower"]
    return "\n\n".join([
        "## Where issue 19's collision fits end: the estimator's basin against the truth's (`python -m benchmarks.collision_basins`)",
        measured_line(command, seconds),
        "Per scene and camera-noise seed: `fit_objects` from the grid's worst start (mass 2x, mu 1.0, e 0.5) and one joint fit of "
        "the same unknowns and initial states on the same poses started at the truth (true mass and friction, the model's "
        "restitution and the initial states the model fits to noise-free poses: an oracle start), judged as `fit_objects` judges "
        "(status ok: residuals within the noise, no drift, position and orientation data agreeing). On poses our own model made "
        "and on MuJoCo's; errors against the parameters the poses were made with (MuJoCo's restitution for MuJoCo's poses). 'Truth's fit ends lower': "
        "the fits from the truth ending at a lower cost than the estimator's, i.e. the estimator stopped in another basin.",
        markdown_table(header, _rows(records)),
    ])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", default="0,1,2")
    parser.add_argument("--seeds", default="21,22,23,24,25,26,27,28")
    parser.add_argument("--log", default="collision_basins.jsonl")
    parser.add_argument("--write", action="store_true", help="write the contact-collision-basins section of RESULTS.md")
    parser.add_argument("--write-from", default=None, metavar="LOG,...", help="write the section from the --log files of earlier runs")
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    from diffsim_ros.estimation.object_fit import FitSettings

    command = " ".join(["python -m benchmarks.collision_basins", *sys.argv[1:]])
    if args.write_from:
        records = [json.loads(line) for path in args.write_from.split(",") for line in Path(path).read_text().splitlines() if line.strip()]
        body = section(records, command, math.nan)
        write_section("contact-collision-basins", body)
        print(body)
        return
    torch.set_num_threads(1)
    settings = FitSettings(restarts=0)
    start = time.perf_counter()
    records = []
    for index in (int(v) for v in args.scenes.split(",")):
        records += _scene(index, [int(v) for v in args.seeds.split(",")], settings, args.log)
    body = section(records, command, time.perf_counter() - start)
    print(body)
    if args.write:
        write_section("contact-collision-basins", body)


if __name__ == "__main__":
    main()
