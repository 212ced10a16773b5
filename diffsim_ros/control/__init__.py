"""Controllers for the arm: gravity compensation, impedance with torque maps, MPC, and the safety layer.

Every controller has ``compute(t, q, qd) -> tau`` (float64 arrays of shape (n,) in model joint
order, [s], [rad], [rad/s] -> [N·m]; MPC returns None when its simulator fails),
``reset()`` and ``update_model(model)`` (a new calibration; a torque map must match it).
A node runs, each cycle::

    tau = controller.compute(t, q, qd)
    command, status = safety.filter(t, tau, q, qd, state_time)   # tau None -> stop
    if status.publish:
        publish(command)   # Baxter: nothing when stopped; ros2_control: the hold (safety.hold)

``status.active`` says whether our torques are applied (Baxter: suppress its own gravity
compensation then); ``status.reason``/``faults``/``late`` are for logging.
"""

from diffsim_ros.control.errors import ControlError, TorqueMapError
from diffsim_ros.control.gravity import GravityCompensation, holding_torques
from diffsim_ros.control.impedance import MODEL_TERMS, JointImpedanceController
from diffsim_ros.control.loop import ControlLoop, EstimateDecision, JointVelocities
from diffsim_ros.control.mpc import INITIALIZATIONS, ModelPredictiveController, MPCInfo, MPCSettings
from diffsim_ros.control.mpc_fast import FastModelPredictiveController, make_mpc
from diffsim_ros.control.references import MinimumJerkMove, SetPoint, WaypointSequence, check_within_limits, make_reference
from diffsim_ros.control.safety import BAXTER, OUTPUT_TYPES, ROS2_CONTROL, JointStateBounds, OutputType, SafetyConfig, SafetyLayer, SafetyStatus
from diffsim_ros.control.torque_map import (
    TorqueMap,
    TorqueMapGrid,
    build_torque_map,
    joint_inertias,
    parameter_hash,
    solve_one_step_torques,
    validate_torque_map,
)

__all__ = [
    "BAXTER",
    "ROS2_CONTROL",
    "INITIALIZATIONS",
    "MODEL_TERMS",
    "OUTPUT_TYPES",
    "ControlError",
    "ControlLoop",
    "EstimateDecision",
    "GravityCompensation",
    "JointImpedanceController",
    "JointStateBounds",
    "JointVelocities",
    "MPCInfo",
    "MPCSettings",
    "MinimumJerkMove",
    "ModelPredictiveController",
    "FastModelPredictiveController",
    "make_mpc",
    "make_reference",
    "OutputType",
    "SafetyConfig",
    "SafetyLayer",
    "SafetyStatus",
    "SetPoint",
    "WaypointSequence",
    "TorqueMap",
    "TorqueMapError",
    "TorqueMapGrid",
    "build_torque_map",
    "check_within_limits",
    "holding_torques",
    "joint_inertias",
    "parameter_hash",
    "solve_one_step_torques",
    "validate_torque_map",
]
