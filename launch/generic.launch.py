"""Any arm behind a ros2_control JointGroupEffortController: estimator + controller (+ optional sim).

    ros2 launch diffsim_ros generic.launch.py robot_config:=/path/to/robot.yaml
        [controller:=effort_controller] [mode:=gravity_compensation|impedance|mpc]
        [joint_states_topic:=/joint_states] [sim:=false] [params_file:=...]

Commands go to /<controller>/commands (std_msgs/Float64MultiArray, reliable), exactly the
controller's joints in its order (``controller_joints`` in the params file; default: the
model's joint order). ``sim:=true`` also starts sim_robot_node as a stand-in for the arm.
Node parameters: config/generic.params.yaml.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def _text(name):
    """A string parameter from a launch argument (kept a string even when empty or numeric)."""
    return ParameterValue(LaunchConfiguration(name), value_type=str)


def generate_launch_description():
    """estimator_node and controller_node with ros2_control output, and sim_robot_node when sim:=true."""
    share = get_package_share_directory("diffsim_ros")
    params_file = LaunchConfiguration("params_file")
    use_sim_time = ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)
    arguments = [
        DeclareLaunchArgument("robot_config", description="robot config YAML (URDF, chain, springs, payload, topics)"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "generic.params.yaml"),
                              description="node parameters (one ros__parameters block per node)"),
        DeclareLaunchArgument("controller", default_value="effort_controller",
                              description="ros2_control JointGroupEffortController name"),
        DeclareLaunchArgument("mode", default_value="gravity_compensation",
                              description="controller mode: gravity_compensation, impedance or mpc"),
        DeclareLaunchArgument("joint_states_topic", default_value="/joint_states", description="joint state topic"),
        DeclareLaunchArgument("calibration_file", default_value="",
                              description="calibration.yaml to start from ('' for the nominal model)"),
        DeclareLaunchArgument("sim", default_value="false", description="also start sim_robot_node (MuJoCo)"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="take node time from /clock"),
    ]
    common = {"robot_config": _text("robot_config"),
              "joint_states_topic": _text("joint_states_topic"), "use_sim_time": use_sim_time}
    output = {"output": "ros2_control", "controller_name": _text("controller")}
    nodes = [
        Node(package="diffsim_ros", executable="sim_robot_node", name="sim_robot", output="screen",
             condition=IfCondition(LaunchConfiguration("sim")), parameters=[params_file, common, output]),
        Node(package="diffsim_ros", executable="estimator_node", name="estimator", output="screen",
             parameters=[params_file, common, {"calibration_file": _text("calibration_file")}]),
        Node(package="diffsim_ros", executable="controller_node", name="controller", output="screen",
             parameters=[params_file, common, output, {"mode": _text("mode"),
                                                       "calibration_file": _text("calibration_file")}]),
    ]
    return LaunchDescription(arguments + nodes)
