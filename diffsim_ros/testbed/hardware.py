"""What a robot's command interfaces do with torque commands (used by sim_robot_node).

The sim robot must fail like the real hardware so that the controller's watchdog is tested
against realistic behaviour:

* :class:`BaxterLimbEmulator` — a Baxter limb. A ``JointCommand`` in TORQUE_MODE switches it
  to torque mode; the robot adds its own gravity compensation (from its internal, nominal
  model: it knows nothing of a payload) unless ``suppress_gravity_compensation`` messages
  keep arriving; when torque commands stop for ``command_timeout`` (0.2 s) it falls back to
  position mode, holding the position it had then. It starts in position mode (enabled,
  holding its start pose). Its timeouts run on elapsed time, as the robot's own monotonic
  clock does: a ROS clock jumping backwards does not keep it in torque mode.
* :class:`EffortControllerEmulator` — a ros2_control ``JointGroupEffortController``: applies
  the last command forever. Before its first command the arm is held in position, as by a
  position controller that is switched to the effort controller when commanding starts.

Position mode is a PD hold plus the nominal gravity compensation, with gains critically
damped for the nominal joint inertia at the held pose.
"""

import numpy as np

from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.testbed.scenarios import hold_gains

__all__ = ["BaxterLimbEmulator", "EffortControllerEmulator", "PositionHold", "POSITION", "TORQUE"]

POSITION = "position"
TORQUE = "torque"


class PositionHold:
    """PD hold of one configuration plus nominal gravity compensation.

    Args:
        model: Nominal RobotModel (the robot's internal model).
        bandwidth: Closed-loop natural frequency [rad/s] of the hold.
    """

    def __init__(self, model, bandwidth=20.0):
        self.model = model
        self.fast = FastDynamics.from_model(model)
        self.bandwidth = float(bandwidth)
        self.target = None
        self.kp = self.kd = None

    def hold(self, q):
        """Hold configuration ``q`` [rad], shape (n,), from now on."""
        self.target = np.asarray(q, dtype=np.float64).copy()
        self.kp, self.kd = hold_gains(self.model, self.target, self.bandwidth)

    def torques(self, q, qd):
        """Motor torques [N·m], shape (n,), at state ``(q [rad], qd [rad/s])``."""
        return self.kp * (self.target - q) - self.kd * qd + self.holding_torques(q)

    def holding_torques(self, q):
        """The nominal holding torque g(q) - tau_spring(q) [N·m]."""
        return self.fast.gravity_torques(q) - self.fast.spring_torques(q)


class BaxterLimbEmulator:
    """Torque/position mode switching of a Baxter limb (module docstring).

    Args:
        model: Nominal RobotModel (the robot's own gravity model).
        start: Start configuration [rad], shape (n,), held in position mode.
        command_timeout: Torque mode ends this long after the last command [s].
        suppress_timeout: The robot's gravity compensation returns this long after the last
            suppress message [s].
        bandwidth: Position-mode hold bandwidth [rad/s].

    Attributes:
        mode: POSITION or TORQUE.
        fallbacks: Times the robot fell back from torque to position mode.
    """

    def __init__(self, model, start, command_timeout=0.2, suppress_timeout=0.2, bandwidth=20.0):
        self.position = PositionHold(model, bandwidth)
        self.position.hold(start)
        self.command_timeout, self.suppress_timeout = float(command_timeout), float(suppress_timeout)
        self.mode = POSITION
        self.fallbacks = 0
        self._command = np.zeros(len(start))
        self._since_command = self._since_suppress = np.inf  # elapsed time [s]
        self._last_t = None

    def _advance(self, t):
        """Count the time elapsed since the last call; a clock running backwards counts as none."""
        t = float(t)
        if self._last_t is not None and t > self._last_t:
            self._since_command += t - self._last_t
            self._since_suppress += t - self._last_t
        self._last_t = t

    def command(self, t, tau):
        """A TORQUE_MODE command [N·m], shape (n,), received at ``t`` [s]."""
        self._advance(t)
        self._command = np.asarray(tau, dtype=np.float64).copy()
        self._since_command = 0.0
        self.mode = TORQUE

    def suppress_gravity_compensation(self, t):
        """A ``suppress_gravity_compensation`` message received at ``t`` [s]."""
        self._advance(t)
        self._since_suppress = 0.0

    def gravity_suppressed(self, t):
        """Whether the robot's own gravity compensation is off at ``t`` [s]."""
        self._advance(t)
        return self._since_suppress <= self.suppress_timeout

    def torques(self, t, q, qd):
        """Motor torques [N·m], shape (n,), at ``t`` [s] for the state ``(q [rad], qd [rad/s])``."""
        self._advance(t)
        if self.mode == TORQUE and self._since_command > self.command_timeout:
            self.mode = POSITION
            self.fallbacks += 1
            self.position.hold(q)
        if self.mode == POSITION:
            return self.position.torques(q, qd)
        if self.gravity_suppressed(t):
            return self._command.copy()
        return self._command + self.position.holding_torques(q)


class EffortControllerEmulator:
    """A ros2_control JointGroupEffortController: the last command, forever (module docstring).

    Args:
        model: Nominal RobotModel (for the initial position hold).
        start: Start configuration [rad], shape (n,).
        bandwidth: Initial position-hold bandwidth [rad/s].
    """

    def __init__(self, model, start, bandwidth=20.0):
        self.position = PositionHold(model, bandwidth)
        self.position.hold(start)
        self.mode = POSITION
        self._command = None

    def command(self, t, tau):
        """A command [N·m], shape (n,) in model joint order, received at ``t`` [s]."""
        self._command = np.asarray(tau, dtype=np.float64).copy()
        self.mode = TORQUE

    def torques(self, t, q, qd):
        """Motor torques [N·m], shape (n,), at ``t`` [s] for the state ``(q [rad], qd [rad/s])``."""
        return self.position.torques(q, qd) if self._command is None else self._command.copy()
