"""Torque prediction on a recording a calibration did not see: nominal and calibrated side by side.

Robot identification is judged by how well a model predicts the joint torques of another
trajectory (issue 46): the recording is prepared as ``calibrate`` prepares it (the same checks,
filters and torque source), and each model's inverse dynamics plus passive torques are compared
with the measured torques, per joint, in N·m. Nothing is fitted here.
"""

from dataclasses import dataclass

import numpy as np
import torch
import yaml

from diffsim_ros.estimation.data import DataError, UndeterminedError
from diffsim_ros.estimation.preparation import DatasetOptions
from diffsim_ros.estimation.residuals import InverseDynamicsResidual
from diffsim_ros.pipelines.calibration import data_source, read_bag_dataset
from diffsim_ros.viz.validation import validation_figure

__all__ = ["MIN_VALIDATION_SECONDS", "Validation", "validate_bag", "write_validation"]

MIN_VALIDATION_SECONDS = 2.0
"""[s] Motion a recording must hold to score a model on (shorter: a few periods of the filter)."""


@dataclass(frozen=True)
class Validation:
    """Torque-prediction errors of models on one recording.

    Attributes:
        joints: Joint names, in model order.
        rmse: Model label -> per-joint RMS error of the predicted torques [N·m], shape (n,).
        samples: Motion samples scored.
        seconds: Motion scored [s].
        source: What was scored (the bag, and its window).
        torque_source: ``"commanded"`` or ``"effort"``: what the predictions are compared with.
    """

    joints: tuple
    rmse: dict
    samples: int
    seconds: float
    source: str
    torque_source: str

    def overall(self, label):
        """RMS over every joint of model ``label`` [N·m]."""
        return float(np.sqrt(np.mean(np.square(self.rmse[label]))))


def validate_bag(bag, config, models, *, options=DatasetOptions(), window=None, order_policy="raise"):
    """Per-joint torque-prediction RMSE of each model on the motion of ``bag``.

    Args:
        bag: rosbag2 directory or file.
        config: RobotConfig of the recording.
        models: Label -> RobotModel (e.g. ``{"nominal": ..., "calibrated": ...}``), same robot.
        options: DatasetOptions (torque source and hold, as ``calibrate``'s).
        window: ``(start, end)`` [s from the first joint state], or None.
        order_policy: Out-of-order stamps: ``"raise"`` or ``"sort"``.

    Raises:
        BagError, DataError: The bag cannot be read or prepared (named).
        UndeterminedError: Less than :data:`MIN_VALIDATION_SECONDS` of motion.
    """
    first = next(iter(models.values()))
    dataset, summary = read_bag_dataset(bag, config, first, options, {"order_policy": order_policy}, window,
                                        without=("camera_pose",))
    motion = [t for t in dataset.trajectories if t.qdd is not None]
    seconds = sum(len(t) * t.dt for t in motion)
    if seconds < MIN_VALIDATION_SECONDS:
        raise UndeterminedError(f"{data_source(bag, window)} holds {seconds:.1f} s of motion; validation needs at "
                                f"least {MIN_VALIDATION_SECONDS:g} s")
    block = InverseDynamicsResidual(motion, first, torque_std=1.0)  # unit noise: residuals in N·m
    rmse = {}
    with torch.no_grad():
        for label, model in models.items():
            if model.joint_names != first.joint_names:
                raise DataError(f"model '{label}' has joints {list(model.joint_names)}, not {list(first.joint_names)}")
            rmse[label] = block.per_joint_rms(block(model)).cpu().numpy()
    return Validation(tuple(first.joint_names), rmse, block.samples, seconds, data_source(bag, window),
                      summary.torque_source)


def write_validation(validation, out):
    """``validation.yaml`` and ``validation.png`` into the directory ``out``; returns their paths."""
    labels = list(validation.rmse)
    document = {
        "source": validation.source, "torques": validation.torque_source, "motion_seconds": round(validation.seconds, 3),
        "samples": validation.samples,
        "rmse_nm": {label: {j: float(v) for j, v in zip(validation.joints, validation.rmse[label])} for label in labels},
        "overall_rmse_nm": {label: validation.overall(label) for label in labels},
    }
    paths = {"validation": out / "validation.yaml", "figure": out / "validation.png"}
    paths["validation"].write_text(yaml.safe_dump(document, sort_keys=False))
    validation_figure(paths["figure"], validation.joints, validation.rmse, validation.source)
    return paths
