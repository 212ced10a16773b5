"""Object pose estimates from a bag, as observations for object parameter estimation.

A camera (or motion-capture) pipeline publishes each tracked object's pose as
geometry_msgs/msg/PoseStamped in its camera frame. :func:`object_poses_from_bag` reads those
topics and expresses the poses in the robot base (= contact world) frame with the camera's
pose, e.g. the ``camera.pose`` of a calibration (``Calibration.camera_pose``), ready for
:func:`diffsim_ros.estimation.objects.estimate_object_parameters`.
"""

from collections.abc import Mapping

import numpy as np
from scipy.spatial.transform import Rotation

from diffsim_ros.estimation.streams import PoseSeries
from diffsim_ros.io.bags import read_pose_topics

__all__ = ["camera_to_base", "check_camera_pose", "object_poses_from_bag"]

# Largest deviation of a camera pose's rotation block from orthonormality.
ROTATION_TOLERANCE = 1e-6


def check_camera_pose(camera_pose):
    """The camera pose as a checked (4, 4) float64 transform (ValueError naming the problem)."""
    pose = np.asarray(camera_pose, dtype=np.float64)
    if pose.shape != (4, 4) or not np.isfinite(pose).all():
        raise ValueError(f"camera_pose must be a finite (4, 4) homogeneous transform, got shape {pose.shape}")
    rotation = pose[:3, :3]
    if np.abs(rotation.T @ rotation - np.eye(3)).max() > ROTATION_TOLERANCE or np.linalg.det(rotation) <= 0:
        raise ValueError("camera_pose: the rotation block is not a proper rotation matrix")
    if not np.allclose(pose[3], (0.0, 0.0, 0.0, 1.0)):
        raise ValueError(f"camera_pose: last row must be [0, 0, 0, 1], got {pose[3].tolist()}")
    return pose


def camera_to_base(camera_pose, position, quaternion):
    """Poses in the camera frame -> the base frame.

    Args:
        camera_pose: Camera frame in the base frame, (4, 4) (checked with :func:`check_camera_pose`).
        position: (T, 3) [m] in the camera frame.
        quaternion: (T, 4) unit quaternions (w, x, y, z) in the camera frame.

    Returns:
        ``(position (T, 3), quaternion (T, 4) (w, x, y, z))`` in the base frame.
    """
    position, quaternion = np.atleast_2d(position), np.atleast_2d(quaternion)
    position = position @ camera_pose[:3, :3].T + camera_pose[:3, 3]
    rotation = Rotation.from_matrix(camera_pose[:3, :3]) * Rotation.from_quat(quaternion[:, [1, 2, 3, 0]])
    return position, rotation.as_quat()[:, [3, 0, 1, 2]]


def object_poses_from_bag(path, topics, camera_pose=None, **read_options):
    """Object poses in the base frame from PoseStamped topics of a bag.

    Args:
        path: rosbag2 directory (sqlite3 or mcap) or a .db3/.mcap file.
        topics: Mapping ``object name -> PoseStamped topic``.
        camera_pose: Camera frame in the base frame, (4, 4) homogeneous transform; None when
            the poses are already in the base frame.
        **read_options: ``nan_policy``, ``order_policy``, ``typestore`` of
            :func:`~diffsim_ros.io.bags.read_pose_topics`.

    Returns:
        ``{object name: estimation.streams.PoseSeries}``, times [s] from the earliest stamp.

    Raises:
        BagError: Unreadable bag, missing topic, wrong type, bad samples (see
            ``read_pose_topics``).
        ValueError: Bad ``topics`` mapping or camera pose.
    """
    if not isinstance(topics, Mapping) or not topics:
        raise ValueError(f"topics must be a non-empty mapping object name -> topic, got {topics!r}")
    pose = None if camera_pose is None else check_camera_pose(camera_pose)
    _, series = read_pose_topics(path, list(topics.values()), **read_options)
    result = {}
    for name, topic in topics.items():
        poses = series[topic]
        position, quaternion = poses.position, poses.orientation  # unit quaternions (checked by the reader)
        if pose is not None:
            position, quaternion = camera_to_base(pose, position, quaternion)
        result[name] = PoseSeries(poses.times, position, quaternion, stats=poses.stats)
    return result
