"""Online object contact estimation: object_estimator_node on a scene's object pose topics.

    ros2 launch diffsim_ros objects.launch.py scene_file:=/path/scene.yaml
        [calibration_file:=/path/calibration.yaml] [objects_output:=/tmp/objects.yaml] [use_sim_time:=false]

The scene file (the format of ``diffsim-ros estimate-objects``) names the objects, their sizes,
known masses, pair coefficients, unknowns and each object's geometry_msgs/PoseStamped topic;
``camera.pose`` of the calibration maps the camera-frame poses into the robot base. Accepted
estimates are published on ``/object_estimator/estimates`` and saved as objects.yaml.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def _text(name):
    """A string parameter from a launch argument (kept a string even when empty or numeric)."""
    return ParameterValue(LaunchConfiguration(name), value_type=str)


def generate_launch_description():
    """object_estimator_node for one scene."""
    arguments = [
        DeclareLaunchArgument("scene_file", description="scene YAML: objects, sizes, topics, known values, unknowns"),
        DeclareLaunchArgument("calibration_file", default_value="",
                              description="calibration.yaml with camera.pose ('': poses already in the base frame)"),
        DeclareLaunchArgument("objects_output", default_value="",
                              description="where objects.yaml is saved ('' for $ROS_HOME/diffsim_ros/objects.yaml)"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="take node time from /clock (bag replay)"),
    ]
    parameters = {"scene_file": _text("scene_file"), "calibration_file": _text("calibration_file"),
                  "objects_output": _text("objects_output"),
                  "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)}
    node = Node(package="diffsim_ros", executable="object_estimator_node", name="object_estimator", output="screen",
                parameters=[parameters])
    return LaunchDescription(arguments + [node])
