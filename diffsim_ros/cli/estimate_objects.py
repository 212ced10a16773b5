"""``diffsim-ros estimate-objects``: camera poses of objects in a bag -> their mass, friction, restitution.

    diffsim-ros estimate-objects --bag BAG --scene SCENE.yaml [--calibration CAL.yaml] --out DIR
                                 [--force] [--allow-partial] [--bootstrap N]

The scene file (:mod:`diffsim_ros.io.scene`) names the objects, their sizes and PoseStamped
topics, the known masses and every pair's coefficients, with ``unknown`` for what to
estimate; the calibration gives the camera pose (``camera.pose``; omit it when the poses are
already in the base frame). Each std is the larger of the fit's linear std and the spread of
``--bootstrap N`` refits of the fitted poses under fresh camera noise (default BOOTSTRAP_REFITS;
collision fits spread about twice their linear std; see
:func:`~diffsim_ros.estimation.object_fit.bootstrap_std`).
Exit codes (:mod:`diffsim_ros.cli.exits`): 0 every unknown the
data involve was determined by a good fit; 2 bad input; 3 a fit far above the camera noise
or an unknown the data do not determine (nothing written unless ``--allow-partial``);
130 Ctrl-C.
"""

import sys
from pathlib import Path

from diffsim_ros.cli import exits, summary
from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.object_fit import FitSettings, fit_objects
from diffsim_ros.io.bags import BagError
from diffsim_ros.io.calibration import CalibrationError, atomic_directory
from diffsim_ros.io.object_report import summary_table
from diffsim_ros.io.scene import SceneError
from diffsim_ros.pipelines.objects import load_inputs, write_object_outputs
from diffsim_ros.sim.contact import ContactError
from diffsim_ros.threads import set_threads

__all__ = ["add_parser", "estimate_objects_command"]

PROG = "diffsim-ros estimate-objects"
# Refits behind each reported std by default: eight estimate a std within ~25 % (1 sd); a collision
# fit's linear std alone is about half its spread over noise draws (benchmarks/RESULTS.md,
# contact-collision-limits), so the default is error bars that hold, at ~8 more fits of CPU.
BOOTSTRAP_REFITS = 8


def add_parser(subparsers):
    """Register the ``estimate-objects`` subcommand."""
    parser = subparsers.add_parser("estimate-objects", help=summary("estimate-objects"))
    parser.add_argument("--bag", required=True, type=Path, help="rosbag2 directory or .db3/.mcap file with PoseStamped topics")
    parser.add_argument("--scene", required=True, type=Path, help="scene YAML: objects, sizes, topics, known values, pairs")
    parser.add_argument("--calibration", type=Path, default=None,
                        help="calibration YAML with camera.pose (omit if the poses are in the base frame)")
    parser.add_argument("--out", required=True, type=Path, help="output directory (objects.yaml, summary.txt, trajectories.png)")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.add_argument("--allow-partial", action="store_true",
                        help="write the outputs even when the fit fails its quality check or leaves unknowns undetermined "
                             "(those are listed as unidentifiable, never as values); exit code 3 still")
    parser.add_argument("--max-evaluations", type=int, default=FitSettings.max_evaluations,
                        help="residual evaluations of the joint fit")
    parser.add_argument("--bootstrap", type=int, default=BOOTSTRAP_REFITS, metavar="N",
                        help="refit the fitted poses under N fresh camera-noise draws and widen each std to their spread "
                             f"(default {BOOTSTRAP_REFITS}; 0: the fit's linear std only, which understates a collision's; "
                             "N >= 2; each refit costs about one fit)")
    parser.add_argument("--order-policy", choices=("raise", "sort"), default="raise",
                        help="poses whose header stamps go backwards or repeat: refuse the bag (raise) or sort them and "
                             "drop repeated stamps (sort)")
    parser.add_argument("--threads", type=int, default=1, help="torch and numba threads (1 avoids stalls on busy machines)")
    parser.set_defaults(handler=estimate_objects_command)


def _progress(stage):
    print(f"{PROG}: {stage} ...", file=sys.stderr, flush=True)


def estimate_objects_command(args):
    """Handler: returns the exit code."""
    try:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        set_threads(args.threads)
        if args.max_evaluations < 1:
            raise ValueError(f"--max-evaluations must be >= 1, got {args.max_evaluations}")
        if args.bootstrap < 0 or args.bootstrap == 1:
            raise ValueError(f"--bootstrap must be 0 (none) or at least 2 refits, got {args.bootstrap}")
        atomic_directory(args.out, force=args.force)  # refuse early, before any work
        scene, observations, data = load_inputs(args.scene, args.bag, args.calibration, {"order_policy": args.order_policy})
        for name, summary in data.items():
            for line in summary["notes"]:
                print(f"{PROG}: note: poses of '{name}': {line}", file=sys.stderr)
        settings = FitSettings(max_evaluations=args.max_evaluations, bootstrap=args.bootstrap)
        fit = fit_objects(scene.world(), observations, scene.unknowns, initial=scene.initial_guess, settings=settings,
                          progress=_progress)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
        return exits.INTERRUPTED
    except (SceneError, CalibrationError, BagError, DataError, ContactError, FileExistsError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return exits.BAD_INPUT
    print(summary_table(fit, scene))
    if fit.status != "ok" and not args.allow_partial:
        print(f"{PROG}: {fit.status}: {fit.message}; nothing written (--allow-partial writes the diagnostics)", file=sys.stderr)
        return exits.UNDETERMINED
    try:
        paths = write_object_outputs(args.out, fit, scene, observations, data, force=args.force)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
        return exits.INTERRUPTED
    except OSError as err:
        print(f"{PROG}: error: cannot write {args.out}: {err}", file=sys.stderr)
        return exits.FAILURE
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    if fit.status != "ok":
        print(f"{PROG}: {fit.status}: {fit.message}", file=sys.stderr)
        return exits.UNDETERMINED
    return exits.OK
