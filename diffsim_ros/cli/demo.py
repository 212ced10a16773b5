"""``diffsim-ros demo``: the simulated Baxter graph calibrates itself online, in simulated time.

    diffsim-ros demo [--out DIR] [--force] [--seconds S] [--payload-change KG] [--payload-seconds S2]
        [--storage sqlite3|mcap]

Runs :func:`diffsim_ros.pipelines.demo.run_demo` (sim robot with a hidden payload, estimator,
controller; before / calibration while moving / payload change of ``KG`` for ``S2`` seconds /
after) and prints estimated vs true parameters and the tracking errors before vs after
calibration. Writes ``bag/``, ``calibration.yaml``, ``<robot>_calibrated.urdf`` and
``report.png`` to ``--out`` (atomically).
"""

import math
import sys
from pathlib import Path

import numpy as np

from diffsim_ros.cli import summary
from diffsim_ros.io.bags import STORAGES
from diffsim_ros.io.calibration import OutputPathError
from diffsim_ros.nodes.robot import set_threads
from diffsim_ros.pipelines.demo import CALIBRATION_SEGMENT, PAYLOAD_TRACKED, camera_error, payload_tracking, run_demo

__all__ = ["add_parser", "demo_command", "summary_text"]

UNITS = {"mass": "kg", "com": "m", "stiffness": "N/m", "offset": "rad"}


def add_parser(subparsers):
    """Register the ``demo`` subcommand."""
    parser = subparsers.add_parser("demo", help=summary("demo"))
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="output directory (default: demo_out)")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.add_argument("--seconds", type=float, default=45.0,
                        help=f"simulated seconds of online calibration while moving ({CALIBRATION_SEGMENT:g} s per move; "
                             "default 45)")
    parser.add_argument("--payload-change", type=float, default=2.0, metavar="KG",
                        help="hidden payload mass after the change [kg] (default 2.0; the start is 1.3)")
    parser.add_argument("--payload-seconds", type=float, default=40.0, metavar="S",
                        help="simulated seconds of motion after the payload change (0: no change; default 40)")
    parser.add_argument("--storage", choices=STORAGES, default="sqlite3", help="bag storage (default: sqlite3)")
    parser.add_argument("--seed", type=int, default=3, help="seed of the calibration poses")
    parser.add_argument("--threads", type=int, default=1, help="torch and numba threads (1 avoids stalls on busy machines)")
    parser.set_defaults(handler=demo_command)


def demo_command(args):
    """Handler: returns the exit code (0 ok, 2 bad arguments or existing output)."""
    if not args.seconds >= CALIBRATION_SEGMENT:  # NaN too
        print(f"diffsim-ros demo: error: --seconds must be at least {CALIBRATION_SEGMENT:g}", file=sys.stderr)
        return 2
    if not (args.payload_seconds == 0 or args.payload_seconds >= CALIBRATION_SEGMENT) or not 0 < args.payload_change <= 5:
        print(f"diffsim-ros demo: error: --payload-seconds must be 0 or at least {CALIBRATION_SEGMENT:g}, and "
              "--payload-change in (0, 5] kg (the estimator's plausibility bound)", file=sys.stderr)
        return 2
    set_threads(args.threads)
    payload = (args.payload_change, args.payload_seconds) if args.payload_seconds > 0 else None
    try:
        result = run_demo(args.out, seconds=args.seconds, force=args.force, storage=args.storage, seed=args.seed,
                          payload=payload, log=print)
    except (FileExistsError, OutputPathError) as err:  # both raised before any work
        print(f"diffsim-ros demo: error: {err}", file=sys.stderr)
        return 2
    print(summary_text(result))
    return 0


# --- output ------------------------------------------------------------------------------------


def _fmt(value):
    return ", ".join(f"{v:.4g}" for v in np.atleast_1d(np.asarray(value, dtype=float)))


def _unit(name):
    return UNITS.get(name.rsplit(".", 1)[-1], "")


def summary_text(result):
    """Plain-text summary: parameters (nominal, true, estimate ± stddev) and tracking before/after."""
    rows = [("parameter", "nominal", "true", "estimate", "stddev")]
    for label, nominal, true, estimate, sigma in _display_items(result):
        rows.append((label, "" if nominal is None else _fmt(nominal), _fmt(true),
                     "not estimated" if estimate is None else _fmt(estimate),
                     "" if sigma is None or np.size(sigma) != np.size(true) else _fmt(sigma)))
    lines = _table(rows)
    camera = camera_error(result)
    if camera:
        lines.append(f"camera pose error: {camera[0] * 1e3:.2f} mm, {camera[1]:.3f} deg")
    lines.append("")
    rows = [("control on MuJoCo Baxter", "nominal model", "calibrated", "ratio")]
    for metric, (before, after) in result.tracking.items():
        rows.append((metric, f"{before:.4f}", f"{after:.4f}", f"{before / max(after, 1e-12):.1f}x"))
    lines += _table(rows)
    lines += _payload_lines(result)
    lines.append("")
    lines.append(f"{result.updates} estimator updates accepted; {result.sim_seconds:.1f} s simulated in "
                 f"{result.wall_seconds:.1f} s")
    lines += [f"wrote {kind}: {path}" for kind, path in result.paths.items()]
    lines.append(_offline_check(result))
    return "\n".join(lines)


def _offline_check(result):
    """The ``calibrate`` command of the bag's segment before the payload change (the whole bag,
    two payloads, is not one robot: calibrate refuses it)."""
    bag = result.paths["bag"]
    command = f"diffsim-ros calibrate --bag {bag} --config config/baxter_left.yaml --out {bag.parent / 'offline'}"
    if result.payload_change is None:
        return f"offline check: {command}"
    end = math.floor(result.payload_change[0]) - 1  # [s] a margin for the bag's first stamp
    return f"offline check (the bag before the payload change): {command} --end {end}"


def _payload_lines(result):
    tracking = payload_tracking(result)
    if tracking is None:
        return []
    t_change, before, mass = result.payload_change
    tracked, last = tracking
    head = f"payload change at {t_change:.1f} s: {before:g} -> {mass:g} kg while moving; "
    if last is None:
        return [head + "no estimate accepted after it"]
    if tracked is None:
        return [head + f"last estimate {last:.3f} kg: NOT within {PAYLOAD_TRACKED:.0%}"]
    return [head + f"tracked within {PAYLOAD_TRACKED:.0%} from {tracked:.1f} s after the change on "
                   f"(last estimate {last:.3f} kg)"]


def _display_items(result):
    """(label, nominal, true, estimate, stddev) per parameter; the camera pose as position and orientation."""
    for name, true in result.truth.items():
        estimate, sigma = result.estimates.get(name), result.stddev.get(name)
        if name != "camera.pose":
            yield f"{name} [{_unit(name)}]", result.nominal[name], true, estimate, sigma
            continue
        for label, part in (("camera position [m]", slice(0, 3)), ("camera orientation [quaternion xyzw]", slice(3, 7))):
            yield (label, None, np.asarray(true)[part], None if estimate is None else np.asarray(estimate)[part],
                   None if sigma is None or np.size(sigma) != 7 else np.asarray(sigma)[part])


def _table(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
