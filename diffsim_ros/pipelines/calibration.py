"""Offline calibration: bag -> one joint identification -> calibration.yaml, URDF, report.png.

Every requested group is estimated at once from every kind of data the bag holds (rest
poses, motion, camera poses): rest poses are not a gate, only one source of residuals.
Parameters the data do not determine are named with the reason and never written as values.
"""

from dataclasses import dataclass, field

import numpy as np
import yaml

from diffsim_ros.estimation.data import MIN_MOTION_SECONDS, MIN_REST_POSES, Dataset, UndeterminedError, data_shortfall
from diffsim_ros.estimation.identification import IdentificationSettings, camera_initial_guess, groups_with_data, identify
from diffsim_ros.estimation.preparation import DatasetOptions, prepare_dataset
from diffsim_ros.io.bags import BagTopics, MissingTopicError, read_robot_bag
from diffsim_ros.io.calibration import Calibration, atomic_directory, write_calibration
from diffsim_ros.io.urdf_export import export_calibrated_urdf
from diffsim_ros.model.plausibility import parameter_kind
from diffsim_ros.viz.calibration import calibration_report
from diffsim_ros.vocabulary import MODELS

__all__ = ["CAMERA_GROUPS", "MODELS", "CalibrationRun", "default_groups", "calibrate_dataset", "read_bag_dataset",
           "check_enough_data", "calibrate_bag", "unread_streams", "write_outputs", "write_diagnostics", "data_source"]



@dataclass
class CalibrationRun:
    """Everything a calibration produced.

    Attributes:
        nominal: Nominal model.
        model: Calibrated model (undetermined parameters stay nominal).
        camera_pose: Calibrated camera pose (4, 4) or None.
        camera_guess: Closed-form initial camera pose or None.
        dataset: The identification data.
        stages: ``[(name, IdentificationResult)]`` (one joint stage).
        calibration: The Calibration to write.
        summary: DatasetSummary of the bag (None for a dataset).
        nuisance_groups: Groups estimated without being requested (the effort sensor's groups
            that :func:`default_groups` adds): what they leave undetermined stays free in the
            fit, so the other stds carry it, and is not a requested result.
    """

    nominal: object
    model: object
    camera_pose: np.ndarray | None
    camera_guess: np.ndarray | None
    dataset: Dataset
    stages: list = field(default_factory=list)
    calibration: Calibration | None = None
    summary: object = None
    nuisance_groups: tuple = ()

    @property
    def poor_fit(self):
        """None, or why the fitted model does not explain the data (then nothing is a result)."""
        return next((result.poor_fit for _, result in self.stages if result.poor_fit), None)

    @property
    def undetermined(self):
        """Requested parameters the data do not determine: name -> reason."""
        return {k: v for k, v in self.calibration.unidentifiable.items() if not self._nuisance(k)}

    @property
    def undetermined_nuisances(self):
        """Parameters of ``nuisance_groups`` the data do not determine: name -> reason."""
        return {k: v for k, v in self.calibration.unidentifiable.items() if self._nuisance(k)}

    def _nuisance(self, name):
        return parameter_kind(name) in {_NUISANCE_KIND[g] for g in self.nuisance_groups}


_NUISANCE_KIND = {"effort_bias": "effort_bias", "effort_delay": "efforts.delay"}
"""Groups :func:`default_groups` adds as nuisances -> the kind of their parameters
(:func:`~diffsim_ros.model.plausibility.parameter_kind`)."""


def default_groups(model, dataset):
    """Groups the data can inform: payload and springs (rest poses or motion), camera, damping,
    and the efforts' bias and delay where torques are measured efforts (a torque sensor's offset
    and lag, which the payload, springs and damping would otherwise absorb)."""
    groups = []
    if dataset.static is not None or dataset.trajectories:
        groups.append("payload")
        if model.has_springs:
            groups.append("spring")
    if dataset.camera is not None:
        groups.append("camera")
    if dataset.trajectories:
        groups.append("damping")
    groups += groups_with_data(dataset, ("effort_bias", "effort_delay"))
    return tuple(groups)


def _metrics(result):
    out = {}
    for block, before in result.metrics_before.items():
        after = result.metrics_after[block]
        out[block] = {"before": [float(v) for v in before], "after": [float(v) for v in after]}
    for item in result.agreement:  # the fit-quality check's figures (estimation/fit_quality.py)
        out[item.block].update(slope=[float(v) for v in item.slope], offset=[float(v) for v in item.offset])
    return out


def calibrate_dataset(model, dataset, groups, *, settings=IdentificationSettings(), model_kind="rigid", robot_name=None,
                      progress=None):
    """Identify the requested groups from a dataset as one joint problem.

    Args:
        model: Nominal model.
        dataset: Identification data (rest poses, trajectories, camera; any mix).
        groups: Requested groups.
        settings: IdentificationSettings (loss, bounds, determination policy, iterations).
        model_kind: ``"rigid"`` (exact rigid-body dynamics) or ``"pbd"`` (residuals through
            the PBD simulator; rollouts of the motion, statics of the rest poses).
        robot_name: Name stored in the calibration file.
        progress: Callable ``progress(cost)`` after every residual evaluation, or None.

    Returns:
        CalibrationRun.
    """
    groups = tuple(dict.fromkeys(groups))
    if model_kind not in MODELS:
        raise ValueError(f"unknown model '{model_kind}'; choose from {MODELS}")
    if model_kind == "pbd" and settings.trajectory_loss == "inverse_dynamics":
        raise ValueError("the PBD model needs the simulator_dynamics or rollout loss (inverse dynamics is rigid-body only)")
    guess = camera_initial_guess(model, dataset.camera) if "camera" in groups and dataset.camera is not None else None
    result = identify(model, dataset, groups, settings=settings, simulator=model_kind, camera_guess=guess, progress=progress)
    calibration = Calibration(
        robot=robot_name or model.name, parameters=dict(result.values), stddev=dict(result.stddev), groups=groups,
        unidentifiable=dict(result.unidentifiable), metrics=_metrics(result), combined=dict(result.combined),
        base_parameters=result.base_parameters.records() if result.base_parameters is not None else [],
    )
    return CalibrationRun(model, result.model, result.camera_pose, guess, dataset, [("joint", result)], calibration)


CAMERA_GROUPS = frozenset({"camera", "link_lengths"})
"""Groups whose residuals use camera poses: only these read the config's ``topics.camera_pose``."""

_MISSING_HINTS = {
    "joint_states": "the robot config's topics.joint_states (default /joint_states)",
    "commanded_torques": "the robot config's topics.commanded_torques; to explain the motion by the measured efforts "
                         "instead: --torque-source effort (torque_source='effort' in Python), or remove "
                         "topics.commanded_torques from the config",
    "camera_pose": "the robot config's topics.camera_pose; for a bag recorded without the camera: --no-camera "
                   "(without=('camera_pose',) in Python), or remove topics.camera_pose from the config",
}


def _read_config_bag(bag_path, config, options, read_options, without):
    """The bag's streams: every configured one must be there (no silent fallback), but those in
    ``without`` (not read) and the commanded torques with ``torque_source="effort"``."""
    optional = set(without) | ({"commanded_torques"} if options.torque_source == "effort" else set())
    required = tuple(key for key, _ in BagTopics.from_config(config).items() if key not in optional)
    try:
        return read_robot_bag(bag_path, config, without=without, required=required, **(read_options or {}))
    except MissingTopicError as err:
        raise MissingTopicError(f"{err} ({_MISSING_HINTS[err.stream]})", err.stream, err.topic) from None


def read_bag_dataset(bag_path, config, model, options=DatasetOptions(), read_options=None, window=None, without=()):
    """Read a bag with a robot config into identification data, with every check of ``calibrate``.

    Every topic the config names must be in the bag with messages (a misspelt topic is an
    error listing the bag's topics, never a silent fallback), except the streams in
    ``without`` and, with ``options.torque_source == "effort"``, the commanded torques.

    Args:
        bag_path: rosbag2 directory or file (sqlite3 or mcap).
        config: RobotConfig (joints, controller joint order, topics, camera frame).
        model: Nominal model (its joint limits).
        options: DatasetOptions.
        read_options: Keyword arguments of :func:`~diffsim_ros.io.bags.read_bag`.
        window: ``(start, end)`` [s from the bag's first joint state]: use only that segment
            (:meth:`~diffsim_ros.estimation.streams.RobotStreams.between`), or None for all.
        without: Configured streams not to read: ``("camera_pose",)`` for a bag recorded without
            the camera, or when no requested group uses camera poses.

    Returns:
        ``(Dataset, DatasetSummary)``.

    Raises:
        BagError: The bag cannot be read as this robot's (named), e.g. a configured topic it
            lacks (:class:`~diffsim_ros.io.bags.MissingTopicError`).
        DataError: Its data cannot be used (no torques, efforts all zero, ...).
    """
    unknown = set(without) - {"camera_pose", "commanded_torques"}
    if unknown:
        raise ValueError(f"without: unknown stream(s) {sorted(unknown)}; choose from camera_pose, commanded_torques")
    bag = _read_config_bag(bag_path, config, options, read_options, without)
    camera_frame = (config.raw.get("camera") or {}).get("tracked_frame")
    limits = (model.lower.detach().cpu().numpy(), model.upper.detach().cpu().numpy())
    streams = bag.streams() if window is None else bag.streams().between(*window)
    return prepare_dataset(streams, camera_frame, options, limits)


def data_source(bag_path, window=None):
    """What the data came from, for messages: the bag, and the window read from it [s]."""
    return str(bag_path) if window is None else f"{bag_path} [{window[0]:g}, {window[1]:g}] s"


def check_enough_data(summary, source, min_motion_seconds=MIN_MOTION_SECONDS, min_poses=MIN_REST_POSES):
    """UndeterminedError unless the data reach the minimum of an estimate (as online).

    Args:
        summary: DatasetSummary.
        source: What the data came from (named in the message), e.g. the bag's path.
        min_motion_seconds: Motion needed without enough rest poses [s].
        min_poses: Rest poses needed without enough motion.
    """
    shortfall = data_shortfall(summary.trajectory_seconds, summary.static_poses, min_motion_seconds, min_poses)
    if shortfall:
        notes = f"; data notes: {'; '.join(summary.notes)}" if summary.notes else ""
        raise UndeterminedError(f"{source}: {shortfall}{notes}")


def unread_streams(groups, no_camera=False):
    """Configured streams a calibration of ``groups`` does not read (for :func:`read_bag_dataset`).

    Args:
        groups: Requested groups, or None for the default ones (then the camera poses are read:
            what the data support is asked).
        no_camera: The user said that the bag has no camera poses.

    Raises:
        ValueError: ``no_camera`` with a group that needs camera poses.
    """
    needing = sorted(CAMERA_GROUPS & set(groups or ()))
    if no_camera and needing:
        raise ValueError(f"--no-camera: group(s) {needing} need camera poses")
    return ("camera_pose",) if no_camera or (groups is not None and not needing) else ()


def calibrate_bag(bag_path, config, groups=None, *, options=DatasetOptions(), read_options=None, window=None,
                  no_camera=False, **kwargs):
    """Read a bag with a robot config and calibrate.

    Args:
        bag_path: rosbag2 directory or file (sqlite3 or mcap).
        config: RobotConfig.
        groups: Requested groups (None: :func:`default_groups`).
        options: DatasetOptions.
        read_options: Keyword arguments of :func:`~diffsim_ros.io.bags.read_bag`
            (``nan_policy``, ``order_policy``).
        window: ``(start, end)`` [s from the bag's first joint state] or None (the whole bag).
        no_camera: The bag was recorded without the camera: ``topics.camera_pose`` is not read
            (else it must be in the bag when the groups are the default or use camera poses).
        **kwargs: Passed to :func:`calibrate_dataset`.

    Returns:
        CalibrationRun (``summary`` holds the DatasetSummary).

    Raises:
        BagError: A configured topic that is not in the bag (see :func:`read_bag_dataset`), ...
        UndeterminedError: Less data than an estimate needs (:func:`check_enough_data`).
    """
    without = unread_streams(groups, no_camera)
    model = config.build_model()
    dataset, summary = read_bag_dataset(bag_path, config, model, options, read_options, window, without)
    check_enough_data(summary, data_source(bag_path, window))
    requested = groups
    groups = default_groups(model, dataset) if groups is None else groups
    run = calibrate_dataset(model, dataset, groups, robot_name=config.name, **kwargs)
    run.summary = summary
    if requested is None:  # the sensor's groups were added, not asked for
        run.nuisance_groups = tuple(g for g in groups if g in _NUISANCE_KIND)
    return run


def _report(path, run, title):
    return calibration_report(path, [r for _, r in run.stages], [n for n, _ in run.stages], run.dataset,
                              run.nominal.joint_names, title=title)


def write_outputs(run, out_dir, source_urdf, force=False):
    """Write calibration.yaml, <robot>_calibrated.urdf and report.png into ``out_dir`` atomically.

    Returns:
        Dict of the written paths.
    """
    name = run.calibration.robot
    with atomic_directory(out_dir, force=force) as tmp:
        write_calibration(tmp / "calibration.yaml", run.calibration)
        export_calibrated_urdf(run.model, run.nominal, source_urdf, tmp / f"{name}_calibrated.urdf")
        _report(tmp / "report.png", run, f"diffsim_ros calibration of {name}")
    return {
        "calibration": out_dir / "calibration.yaml",
        "urdf": out_dir / f"{name}_calibrated.urdf",
        "report": out_dir / "report.png",
    }


def _fit_quality(result, joint_names):
    """Per torque block, the fit-quality check's figures by joint (plain lists, joint order)."""
    out = {}
    for item in result.agreement:
        failing = set(int(j) for j in item.failing())
        out[item.block] = {
            "joints": list(joint_names),
            "slope": [float(v) for v in item.slope], "slope_std": [float(v) for v in item.slope_std],
            "offset": [float(v) for v in item.offset], "residual_rms": [float(v) for v in item.residual_rms],
            "measured_rms": [float(v) for v in item.measured_rms],
            "failing": [joint_names[j] for j in sorted(failing)],
        }
    return out


def _time_split(split):
    """The estimates before and after the cut of the parameters they disagree on (plain lists)."""
    plain = lambda v: np.atleast_1d(np.asarray(v, float)).tolist()  # noqa: E731
    return {
        "cut_seconds": split.at_ns / 1e9, "fraction": float(split.fraction), "p_value": float(split.p_value),
        "parameters": {name: {"before": plain(split.before[name]), "before_std": plain(split.before_std[name]),
                              "after": plain(split.after[name]), "after_std": plain(split.after_std[name])}
                       for name in split.differ},
    }


def write_diagnostics(run, out_dir, force=False):
    """Write what a poor fit shows, and no calibration: ``diagnostics.yaml`` and ``report.png``.

    A fit whose model does not explain the torques (``run.poor_fit``) gives no values, so no
    ``calibration.yaml`` or URDF a node could load is written; the user still needs the
    per-joint slopes and offsets and the torque plots to see what is wrong with the data.

    Returns:
        Dict of the written paths.
    """
    joint_names = list(run.nominal.joint_names)
    result = run.stages[-1][1]
    document = {
        "status": "poor_fit",
        "message": run.poor_fit,
        "robot": run.calibration.robot,
        "groups": list(run.calibration.groups),
        "not_a_result": sorted(set(run.calibration.parameters) | set(run.calibration.unidentifiable)),
        "fit_quality": _fit_quality(result, joint_names),
        "metrics": dict(run.calibration.metrics),
    }
    if result.split is not None and result.split.differ:
        document["time_split"] = _time_split(result.split)
    with atomic_directory(out_dir, force=force) as tmp:
        (tmp / "diagnostics.yaml").write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
        _report(tmp / "report.png", run, f"diffsim_ros calibration of {run.calibration.robot}: POOR FIT, not a calibration")
    return {"diagnostics": out_dir / "diagnostics.yaml", "report": out_dir / "report.png"}
