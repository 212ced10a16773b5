"""Calibration files (``calibration.yaml``) and atomic output directories.

Format::

    robot: baxter_left
    created: 2026-11-22T08:00:00+00:00
    groups: [payload, spring, camera, damping]
    parameters:            # parameter names of the model (issue #2) plus camera.pose
      payload.mass: 1.2998
      payload.com: [0.0199, -0.0100, 0.0601]
      left_s1.spring.stiffness: 9599.9
      camera.pose: [x, y, z, qx, qy, qz, qw]   # camera frame in the base frame
    stddev:                # the same names
      payload.mass: 0.0005
    unidentifiable:        # requested but not determined by the data (kept nominal)
      left_w2.damping: "..."
    combined:              # under 'parameters' (std .nan), yet determined only in combinations:
      left_upper_elbow.inertia: "..."   # link inertials (and armatures) of base parameters
    base_parameters:       # the combinations the data determine (group inertia)
      - expression: "left_upper_elbow.izz + 0.91 left_lower_elbow.m + ..."
        value: 0.123
        std: 0.001
        terms: [[1.0, left_upper_elbow.izz], [0.91, left_lower_elbow.m], ...]
    metrics:               # per residual block, per joint in the model's order
      static torques:
        before: [0.01, ...]     # residual RMS at the nominal values [N·m]
        after: [0.005, ...]     # and at the estimate
        slope: [1.001, ...]     # torque blocks: measured = offset + slope x predicted
        offset: [-0.002, ...]   # [N·m] (the fit-quality check, estimation/fit_quality.py)

Reading validates before anything uses the file: :func:`load_calibration` checks the
structure and that every value is a finite number or list of numbers (standard deviations
>= 0 or NaN for unknown); :func:`apply_calibration` checks that the file was made for this
robot, that every parameter exists in the model and that every value is inside the
plausibility bounds (:mod:`diffsim_ros.model.plausibility`, as identification and the
controller use them).

Output directories and files are written atomically (:mod:`diffsim_ros.outputs`).
"""

import datetime
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from diffsim_ros.model.errors import RobotModelError
from diffsim_ros.model.plausibility import DEFAULT_BOUNDS, describe_violations, plausibility_violations
from diffsim_ros.outputs import OutputPathError, atomic_directory, atomic_file, atomic_write_text, check_output_path
from diffsim_ros.resources import describe_path

__all__ = [
    "Calibration",
    "CAMERA_POSE",
    "CalibrationError",
    "OutputPathError",
    "apply_calibration",
    "atomic_directory",
    "check_output_path",
    "load_calibration",
    "write_calibration",
]

CAMERA_POSE = "camera.pose"


class CalibrationError(ValueError):
    """A calibration file is missing, malformed or does not fit the model."""


@dataclass
class Calibration:
    """Calibrated parameter values with their uncertainty.

    Attributes:
        robot: Robot config name the calibration was made for.
        parameters: Name -> value (float or list of floats).
        stddev: Name -> standard deviation (same shapes).
        groups: Parameter groups that were requested.
        unidentifiable: Name -> reason it was not estimated.
        combined: Name -> why it is under ``parameters`` though the data determine it only in
            combinations (:attr:`base_parameters`): each value is needed for them to hold.
        base_parameters: The determined combinations, ``[{expression, value, std, terms}]``.
        metrics: Residual block -> {"before": {column: rms}, "after": {...}}.
        created: ISO-8601 time stamp.
    """

    robot: str
    parameters: dict
    stddev: dict = field(default_factory=dict)
    groups: tuple = ()
    unidentifiable: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    created: str = ""
    combined: dict = field(default_factory=dict)
    base_parameters: list = field(default_factory=list)

    @property
    def camera_pose(self):
        """Camera frame in the base frame as a (4, 4) array, or None."""
        value = self.parameters.get(CAMERA_POSE)
        if value is None:
            return None
        x, y, z, qx, qy, qz, qw = value
        from scipy.spatial.transform import Rotation

        pose = np.eye(4)
        pose[:3, :3] = Rotation.from_quat([qx, qy, qz, qw]).as_matrix()
        pose[:3, 3] = (x, y, z)
        return pose


def _plain(value):
    """numpy/torch values -> YAML-friendly floats and lists."""
    array = np.asarray(value, dtype=float)
    return float(array) if array.ndim == 0 else [float(v) for v in array.reshape(-1)]


def _to_yaml(calibration):
    return {
        "robot": calibration.robot,
        "created": calibration.created or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "groups": list(calibration.groups),
        "parameters": {k: _plain(v) for k, v in calibration.parameters.items()},
        "stddev": {k: _plain(v) for k, v in calibration.stddev.items()},
        "unidentifiable": dict(calibration.unidentifiable),
        **({"combined": dict(calibration.combined)} if calibration.combined else {}),
        **({"base_parameters": list(calibration.base_parameters)} if calibration.base_parameters else {}),
        "metrics": calibration.metrics,
    }


def write_calibration(path, calibration):
    """Write ``calibration.yaml`` atomically (a reader never sees a partial file)."""
    atomic_write_text(path, yaml.safe_dump(_to_yaml(calibration), sort_keys=False, default_flow_style=None))
    return Path(path)


def _values(raw, key, path, stddev=False):
    """A name -> float or list of floats mapping, every value checked (named errors)."""
    section = raw.get(key)
    if section is None and key != "parameters":
        return {}
    if not isinstance(section, dict):
        raise CalibrationError(f"{path}: '{key}' must be a mapping of parameter names to numbers, got {section!r}")
    out = {}
    for name, value in section.items():
        where = f"{path}: {key}.{name}"
        if not isinstance(name, str):
            raise CalibrationError(f"{path}: {key}: parameter names must be strings, got {name!r}")
        items = value if isinstance(value, list) else [value]
        if not items or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
            raise CalibrationError(f"{where} must be a number or a list of numbers, got {value!r}")
        numbers = [float(v) for v in items]
        if stddev and any(v < 0 or math.isinf(v) for v in numbers):
            raise CalibrationError(f"{where}: a standard deviation must be >= 0 (or .nan for unknown), got {value!r}")
        if not stddev and not all(math.isfinite(v) for v in numbers):
            raise CalibrationError(f"{where} must be finite, got {value!r}")
        out[name] = numbers if isinstance(value, list) else numbers[0]
    return out


def load_calibration(path):
    """Read and check a calibration file (module docstring).

    A camera-only calibration (e.g. for object estimation) may omit ``robot``.

    Raises:
        CalibrationError: Missing or unreadable file, invalid YAML, missing ``parameters``, a
            ``robot`` that is not a name, or a value that is not a finite number (named). A
            camera-only calibration needs no ``robot``.
    """
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"calibration file not found: {describe_path(path)}")
    try:
        raw = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as err:
        raise CalibrationError(f"cannot read {path} as YAML: {err}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("parameters"), dict):
        raise CalibrationError(f"{path}: expected a 'parameters' mapping, e.g. 'parameters: {{{CAMERA_POSE}: "
                               "[x, y, z, qx, qy, qz, qw]}' for a camera-only calibration")
    robot = raw.get("robot")
    if robot is None and set(raw["parameters"]) - {CAMERA_POSE}:
        raise CalibrationError(f"{path}: expected 'robot' and a 'parameters' mapping (only a camera-only "
                               "calibration may leave out the robot it was made for)")
    if robot is not None and (not isinstance(robot, str) or not robot):
        raise CalibrationError(f"{path}: 'robot' must be the robot config's name, got {robot!r}")
    groups = raw.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise CalibrationError(f"{path}: 'groups' must be a list of group names, got {groups!r}")
    for key in ("unidentifiable", "metrics", "combined"):
        if not isinstance(raw.get(key) or {}, dict):
            raise CalibrationError(f"{path}: '{key}' must be a mapping, got {raw.get(key)!r}")
    if not isinstance(raw.get("base_parameters") or [], list):
        raise CalibrationError(f"{path}: 'base_parameters' must be a list, got {raw.get('base_parameters')!r}")
    return Calibration(
        robot=robot or "",
        parameters=_values(raw, "parameters", path),
        stddev=_values(raw, "stddev", path, stddev=True),
        groups=tuple(groups),
        unidentifiable=dict(raw.get("unidentifiable") or {}),
        metrics=dict(raw.get("metrics") or {}),
        created=str(raw.get("created", "")),
        combined=dict(raw.get("combined") or {}),
        base_parameters=list(raw.get("base_parameters") or []),
    )


def apply_calibration(model, calibration, robot=None, bounds=DEFAULT_BOUNDS):
    """The model with the calibrated parameters (``camera.pose`` is not a model parameter).

    Args:
        model: RobotModel.
        calibration: Calibration.
        robot: Name of the robot config the model is of; when given, a calibration made for
            another robot is refused.
        bounds: PlausibilityBounds every value must satisfy.

    Raises:
        CalibrationError: A calibration of another robot, a parameter the model does not have,
            or an implausible value (each named).
    """
    if robot is not None and calibration.robot != robot:
        raise CalibrationError(f"calibration was made for robot '{calibration.robot}', not '{robot}'")
    violations = plausibility_violations(calibration.parameters, bounds)
    if violations:
        raise CalibrationError(f"calibration for '{calibration.robot}' has implausible values: "
                               f"{describe_violations(violations)}")
    values = {k: v for k, v in calibration.parameters.items() if k != CAMERA_POSE}
    try:
        return model.with_parameters(values)
    except (RobotModelError, ValueError, TypeError) as err:
        raise CalibrationError(f"calibration for '{calibration.robot}' does not fit this model: {err}") from None
