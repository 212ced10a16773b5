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
    metrics:               # per-joint residual RMS before and after, per residual block
      static torques [N·m]:
        before: {left_s0: 0.01, ...}
        after: {left_s0: 0.005, ...}
"""

import datetime
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from diffsim_ros.model.errors import RobotModelError

__all__ = ["Calibration", "CalibrationError", "write_calibration", "load_calibration", "apply_calibration", "atomic_directory"]

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
        "metrics": calibration.metrics,
    }


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write_text(path, text):
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; outputs follow the umask
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_calibration(path, calibration):
    """Write ``calibration.yaml`` atomically (a reader never sees a partial file)."""
    _atomic_write_text(path, yaml.safe_dump(_to_yaml(calibration), sort_keys=False, default_flow_style=None))
    return Path(path)


def load_calibration(path):
    """Read a calibration file.

    A camera-only calibration (e.g. for object estimation) may omit ``robot``.

    Raises:
        CalibrationError: Missing file, invalid YAML, or missing ``parameters``.
    """
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"calibration file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise CalibrationError(f"invalid YAML in {path}: {err}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("parameters"), dict):
        raise CalibrationError(f"{path}: expected a 'parameters' mapping")
    return Calibration(
        robot=str(raw.get("robot") or ""),
        parameters=dict(raw["parameters"]),
        stddev=dict(raw.get("stddev") or {}),
        groups=tuple(raw.get("groups") or ()),
        unidentifiable=dict(raw.get("unidentifiable") or {}),
        metrics=dict(raw.get("metrics") or {}),
        created=str(raw.get("created", "")),
    )


def apply_calibration(model, calibration):
    """The model with the calibrated parameters (``camera.pose`` is not a model parameter).

    Raises:
        CalibrationError: A parameter the model does not have (a calibration of another robot).
    """
    values = {k: v for k, v in calibration.parameters.items() if k != CAMERA_POSE}
    try:
        return model.with_parameters(values)
    except RobotModelError as err:
        raise CalibrationError(f"calibration for '{calibration.robot}' does not fit this model: {err}") from None


class atomic_directory:
    """Create an output directory atomically: files go to a hidden sibling, renamed on success.

    Args:
        path: Final directory.
        force: Replace an existing directory (only after everything was written).

    Raises:
        FileExistsError: ``path`` exists and ``force`` is False (raised on entry, before any work).
    """

    def __init__(self, path, force=False):
        self.path = Path(path)
        self.force = force
        if self.path.exists() and not force:
            raise FileExistsError(f"output directory {self.path} exists; use --force to replace it")
        self.tmp = None

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.tmp-", dir=self.path.parent))
        os.chmod(self.tmp, 0o777 & ~_umask())
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        if self.path.exists():
            backup = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
            os.replace(self.path, backup)
            os.replace(self.tmp, self.path)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(self.tmp, self.path)
        return False
