"""``diffsim-ros replay``: a recorded bag through the estimator node, in recorded time.

What ``ros2 bag play --clock`` does for ``estimator_node`` on a workstation, in one process:
the node runs on the embedded runtime with ``use_sim_time``, the bag's joint states,
commanded torques and camera poses are played at their recorded times, and every update the
node makes is the one it would make live (updates run to completion in recorded time, so the
result does not depend on this machine's speed). ``--start`` / ``--end`` play one segment, as
``calibrate`` reads one (e.g. after ``calibrate`` found that the robot changed). Outputs
(written atomically into ``--out``):

* ``estimates.csv``: ``t,parameter,value,stddev``, one row per scalar parameter per accepted
  update; ``t`` in seconds since the bag's first message; vector entries as ``payload.com[0]``;
* ``calibration.yaml``: the final estimate (the node's calibration file);
* ``updates.csv``: every update: ``t,accepted,reason,held_back_before,held_back_after,
  cpu_seconds,motion_seconds,rest_poses`` (held-back prediction errors in noise units).

Exit codes (:mod:`diffsim_ros.cli.exits`): 0 written; 2 bad input (options, and the bag as
``calibrate`` checks it, before it is played); 3 no update was accepted (nothing written);
130 interrupted.
"""

import csv
import math
import statistics
import sys
from dataclasses import fields
from pathlib import Path

from diffsim_ros.cli import exits, summary
from diffsim_ros.cli.calibrate import parse_groups, parse_window
from diffsim_ros.outputs import OutputPathError, atomic_directory
from diffsim_ros.vocabulary import MODELS, ONLINE_METHODS, TORQUE_SOURCES

# The library (torch, numba, rosbags) is imported by the functions that use it, not here:
# ``--help`` and argument errors answer without loading it (seconds of CPU).

__all__ = ["add_parser", "replay_command", "estimate_rows"]

PROG = "diffsim-ros replay"
_NOT_TUNING = {"groups", "model", "bounds", "torque_source", "method"}  # set by their own options


def _tuning_names():
    """Names ``--set`` accepts: the online estimator's settings but the ones with options."""
    from diffsim_ros.estimation.online import OnlineEstimatorConfig

    return {f.name for f in fields(OnlineEstimatorConfig)} - _NOT_TUNING


def add_parser(subparsers):
    parser = subparsers.add_parser("replay", help=summary("replay"),
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--bag", required=True, type=Path, help="rosbag2 directory or .db3/.mcap file")
    parser.add_argument("--config", required=True, type=Path, help="robot config YAML (topics, URDF, joints)")
    parser.add_argument("--out", required=True, type=Path, help="output directory (estimates.csv, calibration.yaml)")
    parser.add_argument("--estimate", default="payload,spring",
                        help="comma-separated parameter groups (default: payload,spring)")
    parser.add_argument("--model", choices=MODELS, default="rigid", help="model of the residuals (default: rigid)")
    parser.add_argument("--method", choices=ONLINE_METHODS, default="batch",
                        help="online estimator: batch (a windowed refit every update_period, default) or streaming "
                             "(accumulated statistics, a validated refresh every refresh_period; rigid model, groups "
                             "payload, spring, damping, friction)")
    parser.add_argument("--calibration", default="", help="calibration.yaml to start from (default: nominal)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="estimator tuning, e.g. --set window_seconds=12 (any setting of the online estimator, "
                             "OnlineEstimatorConfig; an unknown name is refused with the list)")
    parser.add_argument("--start", type=float, default=None, metavar="SECONDS",
                        help="play the bag from this time on [s from its first joint state, as calibrate's] "
                             "(default: its start)")
    parser.add_argument("--end", type=float, default=None, metavar="SECONDS",
                        help="play the bag up to this time [s from its first joint state] (default: its end)")
    parser.add_argument("--torque-source", choices=TORQUE_SOURCES, default="auto",
                        help="torques of the motion, as calibrate's: commanded (the robot config's "
                             "topics.commanded_torques, which must then be in the bag) or measured efforts")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.set_defaults(handler=replay_command)


def _overrides(args, config):
    """Estimator node parameters from the command line (ValueError naming a bad one)."""
    from diffsim_ros.io.bags import BagError, BagTopics, bag_info
    from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, JOINT_COMMAND

    groups = list(parse_groups(args.estimate))
    topics = BagTopics.from_config(config)
    info = bag_info(args.bag)
    overrides = {"use_sim_time": True, "save_on_shutdown": False, "robot_config": str(args.config.resolve()),
                 "calibration_file": args.calibration, "groups": groups, "model": args.model, "torque_estimate": "off",
                 "joint_states_topic": topics.joint_states, "torque_source": args.torque_source,
                 "method": args.method}
    # A configured topic the bag lacks is refused by _check_bag, as calibrate refuses it.
    played = [topics.joint_states]
    if topics.commanded_torques and topics.commanded_torques in info.topics:
        msgtype = info.topics[topics.commanded_torques][0]
        if msgtype not in (FLOAT64_MULTI_ARRAY, JOINT_COMMAND):
            raise BagError(f"{args.bag}: commanded torques on {topics.commanded_torques} are {msgtype}")
        overrides.update(commanded_torques_topic=topics.commanded_torques, commanded_torques_type=msgtype)
        played.append(topics.commanded_torques)
    if "camera" in groups:
        if not topics.camera_pose:
            raise BagError(f"{config.path}: group 'camera' needs camera poses: the robot config names no "
                           "topics.camera_pose")
        overrides["camera_topic"] = topics.camera_pose
        played.append(topics.camera_pose)
    overrides.update(_tuning(args.set))
    return overrides, played, info


def _tuning(items):
    """``--set NAME=VALUE`` items as estimator parameters (ValueError naming a bad one)."""
    from diffsim_ros.estimation.online import OnlineEstimatorConfig

    tuning, names = {}, _tuning_names()
    for item in items:
        name, _, value = item.partition("=")
        if name not in names or not value:
            raise ValueError(f"--set {item!r}: expected NAME=VALUE with NAME one of {sorted(names)}")
        kind = type(getattr(OnlineEstimatorConfig(), name))
        try:
            tuning[name] = kind(value)
        except ValueError:
            raise ValueError(f"--set {item!r}: {name} must be {'a number' if kind in (int, float) else kind.__name__}, "
                             f"got {value!r}") from None
    return tuning


def _check_bag(bag, config, overrides, window):
    """Refuse, before playing it, a bag that ``calibrate`` refuses (same checks, same messages).

    Out-of-order stamps are not refused: the node drops them as it would live. A bag (or its
    ``window``) below the estimator's minimum of data (``min_motion_seconds``, ``min_poses``)
    in all raises UndeterminedError: no window of it can hold more.
    """
    from diffsim_ros.estimation.online import OnlineEstimatorConfig
    from diffsim_ros.estimation.preparation import DatasetOptions
    from diffsim_ros.pipelines.calibration import check_enough_data, data_source, read_bag_dataset

    options = DatasetOptions(torque_source=overrides.get("torque_source", "auto"))
    without = () if "camera_topic" in overrides else ("camera_pose",)  # the node reads camera poses for 'camera' only
    _, summary = read_bag_dataset(bag, config, config.build_model(), options, {"order_policy": "sort"}, window, without)
    defaults = OnlineEstimatorConfig()
    check_enough_data(summary, data_source(bag, window), overrides.get("min_motion_seconds", defaults.min_motion_seconds),
                      overrides.get("min_poses", defaults.min_poses))


def _played_span(bag, joint_states, window):
    """``(start_ns, stop_ns)`` of the receive times to play for ``window`` (None: all).

    ``calibrate`` cuts by header stamps from the first joint state's; a player plays by
    receive time, so the window counts from the first joint state's receive time (the two
    differ by the transport's latency, not by the bag's length).
    """
    from diffsim_ros.io.bags import iter_bag

    if window is None:
        return None, None
    records = iter_bag(bag, topics=[joint_states])
    try:
        first = next(records).timestamp_ns
    finally:
        records.close()
    start, end = window
    start_ns = None if math.isinf(start) else first + int(round(start * 1e9))
    stop_ns = None if math.isinf(end) else first + int(round(end * 1e9)) + 1  # --end is inclusive
    return start_ns, stop_ns


def estimate_rows(updates, t0):
    """``(t, parameter, value, stddev)`` rows of the accepted updates (t in seconds since ``t0``)."""
    import numpy as np

    rows = []
    for update in updates:
        if not update.accepted:
            continue
        for name, value in update.values.items():
            value, std = np.asarray(value, float), np.asarray(update.stddev.get(name, np.nan), float)
            std = np.broadcast_to(std, value.shape)
            if value.ndim == 0:
                rows.append((update.time - t0, name, float(value), float(std)))
            else:
                rows.extend((update.time - t0, f"{name}[{i}]", float(v), float(s))
                            for i, (v, s) in enumerate(zip(value.reshape(-1), std.reshape(-1))))
    return rows


def _play(overrides, played, info, bag, span):
    """Run the graph over the bag (receive times in ``span``, see :func:`_played_span`); returns the node."""
    from tqdm import tqdm

    from diffsim_ros.estimation.online_estimators import refresh_period
    from diffsim_ros.nodes.estimator_node import EstimatorNode  # the node pulls in the runtime's message types
    from diffsim_ros.runtime.embedded import EmbeddedRuntime

    with EmbeddedRuntime() as runtime:
        node = runtime.add_node(EstimatorNode, "estimator", parameter_overrides=overrides)
        player = runtime.play_bag(bag, topics=played, start_ns=span[0], stop_ns=span[1])
        total = sum(info.topics[t][1] for t in played) if span == (None, None) else None  # a window: a count
        with tqdm(total=total, unit="msg", desc="replay", file=sys.stderr, disable=None) as bar:
            while not player.done:
                runtime.spin_until_condition(lambda: player.done, timeout_s=1.0)
                bar.update(player.published - bar.n)
        runtime.spin_for(refresh_period(node.config.estimation) + 0.5)  # the update due at the end
    return node


def _print_drops(node):
    """The final count of every input sample the node dropped (its log lines are rate-limited)."""
    inputs = [("joint states", node.joints)] + ([("camera poses", node.camera)] if node.camera is not None else [])
    for name, monitor in inputs:
        for line in monitor.counters.drop_notes():
            print(f"note: {name} ({monitor.what}): {line}")
    if node.commands_dropped:
        print(f"note: commanded torques: {node.commands_dropped} of {node.commands_received} messages dropped")


def replay_command(args):
    """Handler: returns the exit code."""
    from diffsim_ros.estimation.data import DataError, UndeterminedError
    from diffsim_ros.estimation.online_estimators import cpu_share
    from diffsim_ros.io.bags import BagError
    from diffsim_ros.io.calibration import CalibrationError, load_calibration
    from diffsim_ros.model import RobotModelError, load_robot_config

    try:
        atomic_directory(args.out, force=args.force)  # refuse early, before any work
        config = load_robot_config(args.config)
        if args.calibration:  # the node would find it missing only after the bag's checks
            load_calibration(Path(args.calibration))
        window = parse_window(args)
        overrides, played, info = _overrides(args, config)
        _check_bag(args.bag, config, overrides, window)
        node = _play(overrides, played, info, args.bag, _played_span(args.bag, overrides["joint_states_topic"], window))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; nothing written", file=sys.stderr)
        return exits.INTERRUPTED
    except UndeterminedError as err:
        print(f"{PROG}: not determined: {err}; nothing written", file=sys.stderr)
        return exits.UNDETERMINED
    except (BagError, DataError, CalibrationError, RobotModelError, OutputPathError, FileExistsError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return exits.BAD_INPUT
    _print_drops(node)
    updates = node.estimator.updates
    accepted = [u for u in updates if u.accepted]
    print(f"{len(updates)} updates, {len(accepted)} accepted; CPU per update: median "
          f"{statistics.median([u.cpu_seconds for u in updates]) if updates else math.nan:.3f} s; estimator CPU "
          f"{cpu_share(updates):.1%} of a core")
    if not accepted:
        reasons = sorted({u.reason.split(":")[0] for u in updates}) or ["no update ran"]
        print(f"{PROG}: no estimate was accepted ({'; '.join(reasons)}); nothing written", file=sys.stderr)
        last = next((u.reason for u in reversed(updates) if u.reason.startswith(("rejected", "no update"))), None)
        if last:  # why the fits were refused, in full (a poor fit names its joints)
            print(f"  last: {last}", file=sys.stderr)
        return exits.UNDETERMINED
    for name, value in node.estimator.values.items():
        std = node.estimator.stddev.get(name)
        print(f"  {name:32s} {_rounded(value)} +- {_rounded(std)}")
    code, _ = exits.write_guarded(PROG, args.out, lambda: _write(args.out, args.force, node, updates, info.start_ns * 1e-9))
    if code == exits.OK:
        print(f"wrote {args.out / 'estimates.csv'}, {args.out / 'updates.csv'} and {args.out / 'calibration.yaml'}")
    return code


def _rounded(value):
    """A value or array as a list rounded to 5 decimals, for printing."""
    import numpy as np

    return np.round(value, 5).tolist()


def _write(out, force, node, updates, t0):
    """estimates.csv, calibration.yaml and updates.csv into ``out`` (atomically); ``t0`` [s]: the bag's start."""
    from diffsim_ros.io.calibration import write_calibration

    with atomic_directory(out, force=force) as tmp:
        with open(tmp / "estimates.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(("t", "parameter", "value", "stddev"))
            writer.writerows((f"{t:.3f}", n, repr(v), repr(s)) for t, n, v, s in estimate_rows(updates, t0))
        write_calibration(tmp / "calibration.yaml", node.calibration())
        with open(tmp / "updates.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(("t", "accepted", "reason", "held_back_before", "held_back_after", "cpu_seconds",
                             "motion_seconds", "rest_poses"))
            writer.writerows((f"{u.time - t0:.3f}", int(u.accepted), u.reason, f"{u.holdout_rms_before:.4g}",
                              f"{u.holdout_rms_after:.4g}", f"{u.cpu_seconds:.3f}", f"{u.motion_seconds:.1f}", u.poses)
                             for u in updates)
