"""Simulated Baxter: sim_robot (MuJoCo, hidden true payload and spring) + estimator + controller.

    ros2 launch diffsim_ros baxter_sim.launch.py [output:=ros2_control|baxter]
        [mode:=impedance|gravity_compensation|mpc] [params_file:=...]
        [calibration_output:=/tmp/calibration.yaml] [use_sim_time:=false]
        [model_term:=analytic|map|map_servo|gravity|none] [torque_map:=MAP.npz]

Commands go through a ros2_control effort controller interface by default (standard messages
only); ``output:=baxter`` uses Baxter's JointCommand and needs the baxter_core_msgs package
(``python -m diffsim_ros.runtime.interfaces baxter_core_msgs``). With ``use_sim_time:=true``
sim_robot publishes ``/clock`` and the other nodes follow it. The same graph runs without ROS
as ``diffsim-ros demo``. Node parameters: config/baxter_sim.params.yaml.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def _text(name):
    """A string parameter from a launch argument (kept a string even when empty or numeric)."""
    return ParameterValue(LaunchConfiguration(name), value_type=str)


def generate_launch_description():
    """sim_robot_node, estimator_node and controller_node with the Baxter simulation parameters."""
    share = get_package_share_directory("diffsim_ros")
    params_file = LaunchConfiguration("params_file")
    use_sim_time = ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)
    arguments = [
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "baxter_sim.params.yaml"),
                              description="node parameters (one ros__parameters block per node)"),
        DeclareLaunchArgument("output", default_value="ros2_control", choices=["ros2_control", "baxter"],
                              description="command interface (baxter needs baxter_core_msgs)"),
        DeclareLaunchArgument("mode", default_value="impedance",
                              description="controller mode: gravity_compensation, impedance or mpc"),
        DeclareLaunchArgument("calibration_output", default_value="",
                              description="where the estimator saves calibration.yaml ('' for $ROS_HOME/diffsim_ros/)"),
        DeclareLaunchArgument("model_term", default_value="analytic",
                              choices=["analytic", "map", "map_servo", "gravity", "none"],
                              description="impedance model term (map, map_servo: needs torque_map)"),
        DeclareLaunchArgument("torque_map", default_value="",
                              description="torque map .npz for the map terms (diffsim-ros torque-map build); "
                                          "it follows the estimator's calibration and is rebuilt in the background"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="sim_robot publishes /clock; the other nodes take their time from it"),
    ]
    output = {"output": _text("output")}
    nodes = [
        Node(package="diffsim_ros", executable="sim_robot_node", name="sim_robot", output="screen",
             parameters=[params_file, output, {"publish_clock": use_sim_time}]),
        Node(package="diffsim_ros", executable="estimator_node", name="estimator", output="screen",
             parameters=[params_file, {"calibration_output": _text("calibration_output"),
                                       "use_sim_time": use_sim_time}]),
        Node(package="diffsim_ros", executable="controller_node", name="controller", output="screen",
             parameters=[params_file, output, {"mode": _text("mode"), "use_sim_time": use_sim_time,
                                               "impedance.model_term": _text("model_term"),
                                               "impedance.torque_map": _text("torque_map")}]),
    ]
    return LaunchDescription(arguments + nodes)
