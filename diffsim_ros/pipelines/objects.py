"""The object-estimation pipeline's ends: scene, calibration and bag in; objects.yaml, summary and figure out.

Between them :func:`diffsim_ros.estimation.object_fit.fit_objects` does the work
(``diffsim-ros estimate-objects`` runs all three). Outputs are written into a temporary sibling
directory renamed into place at the end (:class:`~diffsim_ros.io.calibration.atomic_directory`):
a reader never sees half a result.
"""

import yaml

from diffsim_ros.estimation.data import DataError
from diffsim_ros.io.calibration import CAMERA_POSE, CalibrationError, atomic_directory, load_calibration
from diffsim_ros.io.object_poses import object_poses_from_bag
from diffsim_ros.io.object_report import estimates_document, summary_table
from diffsim_ros.io.scene import load_scene
from diffsim_ros.model.plausibility import describe_violations, plausibility_violations
from diffsim_ros.viz.objects import trajectory_figure

__all__ = ["load_inputs", "write_object_outputs"]


def load_inputs(scene_path, bag_path, calibration_path=None, read_options=None):
    """Scene, world-frame observations and a data summary from the files.

    Args:
        scene_path, bag_path, calibration_path: The files (no calibration: poses in the base frame).
        read_options: ``order_policy`` / ``nan_policy`` of the bag reader.

    Returns:
        ``(scene, observations, data)``: ObjectScene, object -> PoseSeries in the base frame
        (cut to the scene's window), object -> {poses, start, end, notes: what the bag reader dropped or
        reordered (StreamStats.notes)}.

    Raises:
        SceneError, CalibrationError, BagError, DataError: Bad input, named.
    """
    scene = load_scene(scene_path)
    camera_pose = None
    if calibration_path is not None:
        calibration = load_calibration(calibration_path)
        if CAMERA_POSE not in calibration.parameters:
            raise CalibrationError(f"{calibration_path}: no {CAMERA_POSE}; the object poses are in the camera frame")
        violations = plausibility_violations({CAMERA_POSE: calibration.parameters[CAMERA_POSE]})
        if violations:  # the robot path checks it when a calibration is applied; here nothing else would
            raise CalibrationError(f"{calibration_path}: {describe_violations(violations)} ({CAMERA_POSE} is "
                                   "[x, y, z, qx, qy, qz, qw]: the camera frame in the base frame, m and a unit quaternion)")
        camera_pose = calibration.camera_pose
    observations = object_poses_from_bag(bag_path, scene.topics, camera_pose=camera_pose, **dict(read_options or {}))
    start, end = scene.window
    cut = {}
    for name, series in observations.items():
        keep = (series.times >= start) & (series.times <= end)
        if keep.sum() < 3:
            raise DataError(f"{scene.path} [window]: only {int(keep.sum())} poses of '{name}' in [{start}, {end}] s "
                            f"(its poses span {series.times[0]:.3f}..{series.times[-1]:.3f} s)")
        cut[name] = series.between(start, end)
    data = {name: {"poses": len(s), "start": float(s.times[0]), "end": float(s.times[-1]),
                   "notes": observations[name].stats.notes() if observations[name].stats else []} for name, s in cut.items()}
    return scene, cut, data


def write_object_outputs(out_dir, fit, scene, observations, data, force=False):
    """Write ``objects.yaml``, ``summary.txt`` and ``trajectories.png`` into ``out_dir`` atomically.

    Returns:
        Dict kind -> path.
    """
    with atomic_directory(out_dir, force=force) as tmp:
        (tmp / "objects.yaml").write_text(yaml.safe_dump(estimates_document(fit, scene, data), sort_keys=False))
        (tmp / "summary.txt").write_text(summary_table(fit, scene) + "\n")
        trajectory_figure(tmp / "trajectories.png", fit, observations, title=f"object estimation ({scene.path})")
    return {kind: out_dir / name for kind, name in
            (("estimates", "objects.yaml"), ("summary", "summary.txt"), ("plot", "trajectories.png"))}
