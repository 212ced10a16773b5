"""Real Baxter: estimator + controller on one limb (needs baxter_core_msgs and a ROS 1-2 bridge).

    ros2 launch diffsim_ros baxter.launch.py side:=left|right
        [mode:=gravity_compensation|impedance|mpc] [calibration_file:=...] [params_file:=...]
        [model_term:=analytic|map|map_servo|gravity|none] [torque_map:=MAP.npz]

Commands go to /robot/limb/<side>/joint_command (baxter_core_msgs/JointCommand, TORQUE_MODE)
with /robot/limb/<side>/suppress_gravity_compensation. The common ROS 1-2 bridge forwards
torque commands only when built with SAFE_CMD=False. Node parameters: config/baxter.params.yaml.
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
    """estimator_node and controller_node for the Baxter limb ``side``."""
    share = get_package_share_directory("diffsim_ros")
    side = LaunchConfiguration("side")
    params_file = LaunchConfiguration("params_file")
    robot_config = ParameterValue(["package://diffsim_ros/config/baxter_", side, ".yaml"], value_type=str)
    use_sim_time = ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)
    arguments = [
        DeclareLaunchArgument("side", default_value="left", choices=["left", "right"], description="Baxter limb"),
        DeclareLaunchArgument("mode", default_value="gravity_compensation",
                              description="controller mode: gravity_compensation, impedance or mpc"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "baxter.params.yaml"),
                              description="node parameters (one ros__parameters block per node)"),
        DeclareLaunchArgument("calibration_file", default_value="",
                              description="calibration.yaml to start from ('' for the nominal model)"),
        DeclareLaunchArgument("calibration_output", default_value="",
                              description="where the estimator saves calibration.yaml ('' for $ROS_HOME/diffsim_ros/)"),
        DeclareLaunchArgument("model_term", default_value="analytic",
                              choices=["analytic", "map", "map_servo", "gravity", "none"],
                              description="impedance model term (map, map_servo: needs torque_map)"),
        DeclareLaunchArgument("torque_map", default_value="",
                              description="torque map .npz for the map terms (diffsim-ros torque-map build); "
                                          "it follows the estimator's calibration and is rebuilt in the background"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="take node time from /clock (bag replay)"),
    ]
    common = {"robot_config": robot_config, "calibration_file": _text("calibration_file"),
              "use_sim_time": use_sim_time}
    nodes = [
        Node(package="diffsim_ros", executable="estimator_node", name="estimator", output="screen",
             parameters=[params_file, common, {"calibration_output": _text("calibration_output")}]),
        Node(package="diffsim_ros", executable="controller_node", name="controller", output="screen",
             parameters=[params_file, common, {"side": ParameterValue(side, value_type=str), "mode": _text("mode"),
                                               "impedance.model_term": _text("model_term"),
                                               "impedance.torque_map": _text("torque_map")}]),
    ]
    return LaunchDescription(arguments + nodes)
