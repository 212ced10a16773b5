"""Write a plant :class:`~diffsim_ros.testbed.scenarios.Recording` as a ROS 2 bag.

The bag looks like ``ros2 bag record`` on the real arm: sensor_msgs/JointState with
positions, velocities and efforts, geometry_msgs/PoseStamped from the camera, and the
commanded torques as std_msgs/Float64MultiArray or baxter_core_msgs/JointCommand.
"""

import heapq

from diffsim_ros.control.safety import BAXTER, OUTPUT_TYPES
from diffsim_ros.io.bags import BagTopics, write_bag
from diffsim_ros.io.ros_messages import float64_multi_array_msg, joint_command_msg, joint_state_msg, pose_stamped_msg, seconds_to_ns
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore

__all__ = ["write_recording_bag"]


def _stream(times, build):
    for i, t in enumerate(times):
        yield seconds_to_ns(float(t)), i, build(i, seconds_to_ns(float(t)))


def write_recording_bag(path, recording, topics, *, storage="sqlite3", output=BAXTER,
                        camera_frame_id="camera", start_time=1_700_000_000.0, overwrite=False):
    """Write a recording to a bag (atomically).

    Args:
        path: Bag directory to create.
        recording: :class:`~diffsim_ros.testbed.scenarios.Recording`.
        topics: :class:`~diffsim_ros.io.bags.BagTopics` (joint_states, camera_pose, commanded_torques).
        storage: ``"sqlite3"`` or ``"mcap"``.
        output: Command interface recorded: ``"baxter"`` (baxter_core_msgs/JointCommand, TORQUE_MODE)
            or ``"ros2_control"`` (std_msgs/Float64MultiArray), as the nodes' ``output`` parameter.
        camera_frame_id: Header frame of the camera poses.
        start_time: Wall-clock time [s] of recording time 0 (bags carry absolute stamps).
        overwrite: Replace an existing bag.

    Returns:
        The bag path.
    """
    if output not in OUTPUT_TYPES:
        raise ValueError(f"output must be one of {tuple(OUTPUT_TYPES)}, got {output!r}")
    if not isinstance(topics, BagTopics):
        topics = BagTopics.from_config(topics)
    factory = TypestoreMessages(default_typestore())
    names = list(recording.joint_names)
    offset = start_time
    streams = [
        (topics.joint_states, _stream(recording.joint_time + offset, lambda i, ns: joint_state_msg(
            factory, ns, names, recording.q[i], recording.qd[i], recording.effort[i])))
    ]
    if topics.camera_pose and len(recording.camera_time):
        streams.append((topics.camera_pose, _stream(recording.camera_time + offset, lambda i, ns: pose_stamped_msg(
            factory, ns, camera_frame_id, recording.camera_position[i], recording.camera_quaternion[i]))))
    if topics.commanded_torques and len(recording.command_time):
        if output == BAXTER:
            build = lambda i, ns: joint_command_msg(factory, names, recording.command[i])  # noqa: E731
        else:
            build = lambda i, ns: float64_multi_array_msg(factory, recording.command[i])  # noqa: E731
        streams.append((topics.commanded_torques, _stream(recording.command_time + offset, build)))

    def tagged(topic, stream):
        for ns, i, msg in stream:
            yield ns, topic, i, msg

    merged = heapq.merge(*(tagged(topic, s) for topic, s in streams), key=lambda item: (item[0], item[1]))
    return write_bag(path, ((topic, msg, ns) for ns, topic, _, msg in merged), storage=storage, overwrite=overwrite)
