"""diffsim_ros.runtime: the transport interface nodes are written against, and its backends.

* :mod:`~diffsim_ros.runtime.interface` — NodeHandle, Publisher, Subscription, Timer, Logger.
* :mod:`~diffsim_ros.runtime.params` — typed node configs (``declare_config``, ``param``) and
  ROS 2 params YAML files.
* :mod:`~diffsim_ros.runtime.qos` — QosProfile and the usual profiles.
* message conversions and type names are in ``diffsim_ros.io.ros_messages`` and
  ``diffsim_ros.io.ros_types`` (shared with the bag reader).
* :mod:`~diffsim_ros.runtime.inputs` — watchdog, validated inputs, joint-name checks.
* :mod:`~diffsim_ros.runtime.embedded` — in-process runtime (simulated or wall time,
  recording, bag replay).
* :mod:`~diffsim_ros.runtime.rclpy_backend` — rclpy (the only module importing rclpy):
  EventsExecutor, orderly shutdown, lifecycle nodes, services, parameter callbacks.
* :mod:`~diffsim_ros.runtime.heap` — keeps full garbage collections out of the control loop (``gc.freeze``).
* :mod:`~diffsim_ros.runtime.diagnostics` — ``/diagnostics`` statuses (input rates, drops, watchdogs).
* :mod:`~diffsim_ros.runtime.interfaces` — builds ROS 2 interface packages (``baxter_core_msgs``)
  with the package index's ament_cmake/rosidl/colcon.
"""

from diffsim_ros.runtime.interface import LOG_LEVELS, Logger, NodeHandle, Publisher, Subscription, Timer
from diffsim_ros.runtime.params import ParameterError, declare_config, param
from diffsim_ros.runtime.qos import CLOCK_QOS, COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, QosProfile

__all__ = [
    "CLOCK_QOS",
    "COMMAND_QOS",
    "LATCHED_QOS",
    "LOG_LEVELS",
    "Logger",
    "NodeHandle",
    "ParameterError",
    "Publisher",
    "QosProfile",
    "SENSOR_QOS",
    "Subscription",
    "Timer",
    "declare_config",
    "param",
]
