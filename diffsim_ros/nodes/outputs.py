"""Torque command outputs to hardware: Baxter JointCommand or a ros2_control effort controller.

* ``baxter``: ``baxter_core_msgs/msg/JointCommand`` (mode TORQUE_MODE = 3, ``names`` +
  ``command``) on ``/robot/limb/<side>/joint_command``, and ``std_msgs/msg/Empty`` on
  ``/robot/limb/<side>/suppress_gravity_compensation`` while our gravity compensation is
  active (else the robot adds its own on top of ours).
* ``ros2_control``: ``std_msgs/msg/Float64MultiArray`` on ``/<controller_name>/commands`` for
  a ``JointGroupEffortController``: exactly its joints in its order (it drops commands of
  another length silently), reliable QoS. The controller applies its last command forever, so
  when commanding stops this output gets the safety layer's hold (``safety.hold``: by default
  the model's holding torque, faded out after ``safety.hold_fade_after``;
  :mod:`diffsim_ros.control.safety`).
"""

import numpy as np

from diffsim_ros.control.safety import BAXTER, OUTPUT_TYPES, ROS2_CONTROL
from diffsim_ros.io.ros_messages import (
    JointMappingError,
    MessageConversionError,
    float64_multi_array_msg,
    joint_command_msg,
)
from diffsim_ros.io.ros_types import EMPTY, FLOAT64_MULTI_ARRAY, JOINT_COMMAND
from diffsim_ros.runtime import COMMAND_QOS
from diffsim_ros.runtime.inputs import check_joint_names
from diffsim_ros.runtime.params import ParameterError

__all__ = [
    "BAXTER",
    "OUTPUTS",
    "ROS2_CONTROL",
    "CommandOutput",
    "baxter_topics",
    "controller_joint_order",
    "effort_controller_topic",
    "safety_output",
]

OUTPUTS = tuple(OUTPUT_TYPES)  # (BAXTER, ROS2_CONTROL)
_SIDES = ("left", "right")


def baxter_topics(side):
    """``(joint_command, suppress_gravity_compensation)`` topics of a Baxter limb.

    Raises:
        ParameterError: ``side`` is not "left" or "right".
    """
    if side not in _SIDES:
        raise ParameterError(f"Baxter side must be one of {_SIDES}, got {side!r}")
    return f"/robot/limb/{side}/joint_command", f"/robot/limb/{side}/suppress_gravity_compensation"


def effort_controller_topic(controller_name):
    """``/<controller_name>/commands`` of a ros2_control JointGroupEffortController."""
    name = str(controller_name).strip("/")
    if not name:
        raise ParameterError("controller_name must not be empty")
    return f"/{name}/commands"


def controller_joint_order(model_joints, controller_joints):
    """Model joint index of each controller joint, shape (m,) int (m = n).

    Args:
        model_joints: Model joint names, shape (n,).
        controller_joints: The effort controller's joints in its order (empty: model order).

    Raises:
        JointMappingError: A model joint the controller lacks, a duplicate, or a controller
            joint the model does not command (its command could not be computed).
    """
    model_joints = list(model_joints)
    if not controller_joints:
        return np.arange(len(model_joints))
    check_joint_names(model_joints, controller_joints, "controller_joints")
    extra = [name for name in controller_joints if name not in model_joints]
    if extra:
        raise JointMappingError(f"controller_joints: joint(s) {extra} are not in the model {model_joints}; "
                                "the effort controller must command exactly the model's joints")
    return np.array([model_joints.index(name) for name in controller_joints], dtype=np.int64)


def safety_output(output):
    """``output`` checked: a node output is also its SafetyLayer output type ("baxter" or "ros2_control").

    The simulated robot's ``output`` (the interface it emulates) is checked here too.

    Raises:
        ParameterError: Another output.
    """
    if output not in OUTPUTS:
        raise ParameterError(f"output must be one of {OUTPUTS}, got {output!r}")
    return output


class CommandOutput:
    """Publishes torque commands given in model joint order on the configured output.

    Args:
        handle: NodeHandle.
        output: "baxter" or "ros2_control".
        joint_names: Model joint names, shape (n,).
        side: Baxter limb.
        controller_name: ros2_control controller name.
        controller_joints: ros2_control controller joints in its order (empty: model order).

    Attributes:
        topic: Command topic.
        published: Commands published.
    """

    def __init__(self, handle, output, joint_names, side="left", controller_name="effort_controller",
                 controller_joints=()):
        self.handle, self.output = handle, output
        self.joint_names = [str(name) for name in joint_names]
        self.published = 0
        self._suppress = None
        zeros = np.zeros(len(self.joint_names))
        # One message built up front; each cycle only replaces its torques (building a message
        # field by field costs tens of µs on rclpy, a large part of a 1 ms cycle budget).
        if output == BAXTER:
            self.topic, suppress_topic = baxter_topics(side)
            self._publisher = handle.create_publisher(JOINT_COMMAND, self.topic, COMMAND_QOS)
            self._suppress = handle.create_publisher(EMPTY, suppress_topic, COMMAND_QOS)
            self._order, self._msg, self._field = None, joint_command_msg(handle.messages, self.joint_names, zeros), "command"
        elif output == ROS2_CONTROL:
            self.topic = effort_controller_topic(controller_name)
            self._order = controller_joint_order(self.joint_names, list(controller_joints))
            self._publisher = handle.create_publisher(FLOAT64_MULTI_ARRAY, self.topic, COMMAND_QOS)
            self._msg, self._field = float64_multi_array_msg(handle.messages, zeros), "data"
        else:
            raise ParameterError(f"output must be one of {OUTPUTS}, got {output!r}")
        # rclpy takes array.array for float64 sequences; the typestore messages numpy arrays.
        self._sequence = getattr(handle.messages, "float64_sequence", None) or (lambda v: np.array(v, dtype=np.float64))

    def publish(self, command):
        """Publish torques [N·m], shape (n,) in model joint order."""
        values = np.asarray(command, dtype=np.float64)
        if values.shape != (len(self.joint_names),):
            raise MessageConversionError(f"{self.topic}: {values.shape} torques for {len(self.joint_names)} joints")
        if self._order is not None:
            values = values[self._order]
        setattr(self._msg, self._field, self._sequence(values))
        self._publisher.publish(self._msg)
        self.published += 1

    def suppress_gravity_compensation(self):
        """Baxter: tell the robot not to add its own gravity compensation (no-op otherwise)."""
        if self._suppress is not None:
            self._suppress.publish(self.handle.new_message(EMPTY))
