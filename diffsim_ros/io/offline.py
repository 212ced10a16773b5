"""Offline calibration: bag -> staged identification -> calibration.yaml, URDF, report.png.

Stages (sequential identification, as labs do it by hand):

1. static groups (payload, spring, inertia, link lengths) from the rest poses, and the
   camera pose from the camera stream;
2. velocity-dependent groups (damping, friction) from the trajectories, with the stage-1
   model held fixed.
"""

from dataclasses import dataclass, field

import numpy as np

from diffsim_ros.estimation.data import Dataset
from diffsim_ros.estimation.identification import camera_initial_guess, identify
from diffsim_ros.io.bags import read_robot_bag
from diffsim_ros.io.calibration import Calibration, atomic_directory, write_calibration
from diffsim_ros.io.dataset import DatasetOptions, dataset_from_bag
from diffsim_ros.io.report import calibration_report
from diffsim_ros.io.urdf_export import export_calibrated_urdf

__all__ = ["MODELS", "STATIC_GROUPS", "DYNAMIC_GROUPS", "CalibrationRun", "default_groups", "calibrate_dataset", "calibrate_bag", "write_outputs"]

STATIC_GROUPS = ("payload", "spring", "inertia", "link_lengths", "camera")
DYNAMIC_GROUPS = ("damping", "friction")


@dataclass
class CalibrationRun:
    """Everything a calibration produced."""

    nominal: object
    model: object
    camera_pose: np.ndarray | None
    camera_guess: np.ndarray | None
    dataset: Dataset
    stages: list = field(default_factory=list)  # (name, IdentificationResult)
    calibration: Calibration | None = None
    summary: object = None


def default_groups(model, dataset):
    """Groups the data can inform: payload and springs from rest poses, camera, damping."""
    groups = []
    if dataset.static is not None:
        groups.append("payload")
        if model.spring_joints:
            groups.append("spring")
    if dataset.camera is not None:
        groups.append("camera")
    if dataset.trajectories:
        groups.append("damping")
    return tuple(groups)


def _metrics(result):
    out = {}
    for block, before in result.metrics_before.items():
        after = result.metrics_after[block]
        out[block] = {"before": [float(v) for v in before], "after": [float(v) for v in after]}
    return out


MODELS = ("rigid", "pbd")


def _simulator(kind, model, dataset):
    """None (exact rigid-body dynamics) or a PBD simulator at the data's sample period."""
    if kind not in MODELS:
        raise ValueError(f"unknown model '{kind}'; choose from {MODELS}")
    if kind == "rigid":
        return None
    from diffsim_ros.sim import PBDSimulator

    dt = dataset.trajectories[0].dt if dataset.trajectories else 0.01
    return PBDSimulator(model, dt=dt)


def calibrate_dataset(model, dataset, groups, *, trajectory_loss="inverse_dynamics", model_kind="rigid",
                      robot_name=None, progress=None, max_iterations=50, window_stride=None):
    """Run the identification stages on a dataset.

    Args:
        model: Nominal model.
        dataset: Identification data.
        groups: Requested groups.
        trajectory_loss: Loss for the dynamic stage (``"inverse_dynamics"`` or ``"rollout"``).
        model_kind: Differentiable model of the residuals: ``"rigid"`` (exact rigid-body
            dynamics) or ``"pbd"`` (the PBD simulator at the data's sample period).
        robot_name: Name stored in the calibration file.
        progress: Factory ``progress(stage_name) -> callable(cost)`` or None.
        max_iterations: Residual evaluations per optimizer pass.
        window_stride: Samples between rollout windows (rollout loss only).

    Returns:
        CalibrationRun.
    """
    groups = tuple(dict.fromkeys(groups))
    if model_kind == "pbd" and trajectory_loss == "inverse_dynamics":
        raise ValueError("the PBD model needs trajectory_loss='rollout' (inverse dynamics is rigid-body only)")
    simulator = _simulator(model_kind, model, dataset)
    stages, current, camera_pose, camera_guess = [], model, None, None
    static = tuple(g for g in groups if g in STATIC_GROUPS)
    dynamic = tuple(g for g in groups if g in DYNAMIC_GROUPS)
    if static:
        if "camera" in static:
            camera_guess = camera_initial_guess(model, dataset.camera)
        result = identify(current, dataset, static, simulator=simulator, camera_guess=camera_guess,
                          max_iterations=max_iterations, progress=progress("static") if progress else None)
        stages.append(("static", result))
        current, camera_pose = result.model, result.camera_pose
    if dynamic:
        data = Dataset(trajectories=dataset.trajectories)
        result = identify(current, data, dynamic, trajectory_loss=trajectory_loss, simulator=simulator,
                          max_iterations=max_iterations, window_stride=window_stride,
                          progress=progress("dynamic") if progress else None)
        stages.append(("dynamic", result))
        current = result.model
    values, stddev, unidentifiable, metrics = {}, {}, {}, {}
    for name, result in stages:
        values.update(result.values)
        stddev.update(result.stddev)
        unidentifiable.update(result.unidentifiable)
        metrics.update({f"{block} ({name})": m for block, m in _metrics(result).items()})
    calibration = Calibration(
        robot=robot_name or model.name, parameters=values, stddev=stddev, groups=groups,
        unidentifiable=unidentifiable, metrics=metrics,
    )
    return CalibrationRun(model, current, camera_pose, camera_guess, dataset, stages, calibration)


def calibrate_bag(bag_path, config, groups=None, *, options=DatasetOptions(), **kwargs):
    """Read a bag with a robot config and calibrate.

    Args:
        bag_path: rosbag2 directory or file (sqlite3 or mcap).
        config: RobotConfig.
        groups: Requested groups (None: :func:`default_groups`).
        options: DatasetOptions.
        **kwargs: Passed to :func:`calibrate_dataset`.

    Returns:
        CalibrationRun (``summary`` holds the DatasetSummary).
    """
    model = config.build_model()
    bag = read_robot_bag(bag_path, config)
    camera_frame = (config.raw.get("camera") or {}).get("tracked_frame")
    dataset, summary = dataset_from_bag(bag, camera_frame, options)
    groups = default_groups(model, dataset) if groups is None else groups
    run = calibrate_dataset(model, dataset, groups, robot_name=config.name, **kwargs)
    run.summary = summary
    return run


def write_outputs(run, out_dir, source_urdf, force=False):
    """Write calibration.yaml, <robot>_calibrated.urdf and report.png into ``out_dir`` atomically.

    Returns:
        Dict of the written paths.
    """
    name = run.calibration.robot
    with atomic_directory(out_dir, force=force) as tmp:
        write_calibration(tmp / "calibration.yaml", run.calibration)
        export_calibrated_urdf(run.model, run.nominal, source_urdf, tmp / f"{name}_calibrated.urdf")
        calibration_report(
            tmp / "report.png", [r for _, r in run.stages], [n for n, _ in run.stages], run.dataset,
            run.nominal, run.model, run.camera_guess, run.camera_pose, title=f"diffsim_ros calibration of {name}",
        )
    return {
        "calibration": out_dir / "calibration.yaml",
        "urdf": out_dir / f"{name}_calibrated.urdf",
        "report": out_dir / "report.png",
    }
