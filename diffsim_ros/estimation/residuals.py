"""Residual blocks: the identification losses, each normalized by its measurement noise.

Every block maps ``(model, camera_pose)`` to a flat residual vector whose entries have unit
variance when the model is right, so blocks of different units can be stacked, and per-joint
RMS values can be reported in physical units through :meth:`per_joint_rms`.

* :class:`StaticTorqueResidual` — efforts at rest balance gravity and springs (rigid body).
* :class:`StaticSimulatorResidual` — the same through any simulator: starting at rest with
  the measured efforts, the arm must not accelerate (torque-equivalent, ``M qd_1 / dt``).
* :class:`InverseDynamicsResidual` — ``rnea - passive - tau`` on filtered trajectories.
* :class:`RolloutResidual` — one-step or multi-step (recurrent window) rollouts of a
  simulator compared with measured angles and/or velocities (Liu et al. Eq. 22/26,
  Le Lidec et al., Wang et al.).
* :class:`CameraResidual` — camera poses of the tracked link.
"""

import torch

from diffsim_ros.dynamics.crba import mass_matrix
from diffsim_ros.dynamics.kinematics import forward_kinematics
from diffsim_ros.dynamics.passive import passive_torques, spring_torques
from diffsim_ros.dynamics.rnea import gravity_torques, rnea
from diffsim_ros.dynamics.spatial import matrix_to_quat, matvec, quat_log, quat_to_matrix

__all__ = [
    "StaticTorqueResidual",
    "StaticSimulatorResidual",
    "InverseDynamicsResidual",
    "RolloutResidual",
    "CameraResidual",
    "ROLLOUT_SCHEMES",
]

ROLLOUT_SCHEMES = ("angle", "velocity", "both")
DT_TOLERANCE = 1e-3
"""Relative sample-period mismatch accepted between a trajectory and the simulator (clock
rounding of recorded stamps); the simulator's dt is used."""


def _tensor(value, like):
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


class _Block:
    """Shared helpers: per-joint RMS in physical units of a residual vector."""

    name = "block"
    unit = ""

    def per_joint_rms(self, residual):
        """Per-column RMS in physical units, shape (columns,)."""
        physical = residual.reshape(-1, self.columns) * self.scale.reshape(-1, self.columns)
        return physical.square().mean(0).sqrt()


class StaticTorqueResidual(_Block):
    """``(g(q) - tau_spring(q) - effort) / std`` for every static pose and joint [N·m].

    Args:
        poses: :class:`~diffsim_ros.estimation.data.StaticPoses`.
        model: Model whose dtype/device the data is converted to.
    """

    name = "static torques"
    unit = "N·m"

    def __init__(self, poses, model):
        like = model.params.mass
        self.q = _tensor(poses.q, like)
        self.effort = _tensor(poses.effort, like)
        self.scale = _tensor(poses.effort_std, like)
        self.columns = poses.q.shape[1]

    def predict(self, model):
        """Torques that hold each pose [N·m], shape (N, n)."""
        return gravity_torques(model, self.q) - spring_torques(model, self.q)

    def __call__(self, model, camera_pose=None):
        return ((self.predict(model) - self.effort) / self.scale).reshape(-1)


class StaticSimulatorResidual(StaticTorqueResidual):
    """Static balance through a simulator: ``M(q) qd_1 / dt`` after one step from rest [N·m].

    With exact dynamics this equals ``effort - (g - tau_spring)`` to first order in dt; with
    the PBD simulator it measures how well PBD's statics reproduce the data.

    Args:
        poses: Static poses.
        model: Model for dtype/device.
        simulator: A :class:`~diffsim_ros.sim.base.JointSpaceSimulator`; its model is
            replaced by the candidate model at every evaluation.
    """

    name = "static torques (simulator)"

    def __init__(self, poses, model, simulator):
        super().__init__(poses, model)
        self.simulator = simulator

    def __call__(self, model, camera_pose=None):
        sim = self.simulator.with_model(model)
        _, qd1 = sim.joint_step(self.q, torch.zeros_like(self.q), self.effort)
        torque = matvec(mass_matrix(model, self.q), qd1) / sim.dt
        return (-torque / self.scale).reshape(-1)


class InverseDynamicsResidual(_Block):
    """``(rnea(q, qd, qdd) - passive(q, qd) - tau) / std`` along filtered trajectories [N·m].

    Args:
        trajectories: Trajectories with ``qdd``.
        model: Model for dtype/device.
        torque_std: Torque noise [N·m].
    """

    name = "inverse dynamics"
    unit = "N·m"

    def __init__(self, trajectories, model, torque_std):
        like = model.params.mass
        missing = [i for i, t in enumerate(trajectories) if t.qdd is None]
        if missing:
            raise ValueError(f"inverse-dynamics loss needs accelerations; trajectories {missing} have none")
        self.q = torch.cat([_tensor(t.q, like) for t in trajectories])
        self.qd = torch.cat([_tensor(t.qd, like) for t in trajectories])
        self.qdd = torch.cat([_tensor(t.qdd, like) for t in trajectories])
        self.tau = torch.cat([_tensor(t.tau, like) for t in trajectories])
        self.scale = torch.full_like(self.q, float(torque_std))
        self.columns = self.q.shape[1]

    def __call__(self, model, camera_pose=None):
        predicted = rnea(model, self.q, self.qd, self.qdd) - passive_torques(model, self.q, self.qd)
        return ((predicted - self.tau) / self.scale).reshape(-1)


class RolloutResidual(_Block):
    """Simulated vs measured states over windows of ``horizon`` steps.

    Args:
        trajectories: Trajectories whose ``dt`` equals the simulator's.
        model: Model for dtype/device.
        simulator: JointSpaceSimulator (rigid-body or PBD).
        horizon: Steps per window (1 = one-step loss, > 1 = multi-step recurrent loss).
        scheme: ``"angle"``, ``"velocity"`` or ``"both"`` (Liu et al. Eq. 26 variants).
        stride: Samples between windows (default: ``horizon``).
        checkpoint_every: Gradient checkpointing block for long horizons.
    """

    name = "rollout"

    def __init__(self, trajectories, model, simulator, horizon=1, scheme="both", stride=None, checkpoint_every=None):
        if scheme not in ROLLOUT_SCHEMES:
            raise ValueError(f"unknown rollout scheme '{scheme}'; choose from {ROLLOUT_SCHEMES}")
        like = model.params.mass
        parts = {k: [] for k in ("q0", "qd0", "tau", "q", "qd")}
        q_std, qd_std = [], []
        for traj in trajectories:
            if abs(traj.dt - simulator.dt) > DT_TOLERANCE * simulator.dt:
                raise ValueError(f"trajectory dt {traj.dt} s differs from the simulator dt {simulator.dt} s")
            windows = traj.windows(horizon, stride)
            for key in parts:
                parts[key].append(_tensor(windows[key], like))
            q_std.append(torch.full_like(parts["q"][-1], traj.q_std))
            qd_std.append(torch.full_like(parts["qd"][-1], traj.qd_std))
        self.data = {k: torch.cat(v) for k, v in parts.items()}
        self.simulator = simulator
        self.scheme = scheme
        self.checkpoint_every = checkpoint_every
        self.columns = self.data["q"].shape[-1] * (2 if scheme == "both" else 1)
        q_std, qd_std = torch.cat(q_std), torch.cat(qd_std)
        self.scale = {"angle": q_std, "velocity": qd_std, "both": torch.cat([q_std, qd_std], -1)}[scheme]
        self.unit = {"angle": "rad", "velocity": "rad/s", "both": "rad | rad/s"}[scheme]

    def simulate(self, model):
        """Simulated ``(q, qd)`` of every window, shapes (W, K, n)."""
        sim = self.simulator.with_model(model)
        d = self.data
        return sim.rollout(d["q0"], d["qd0"], d["tau"], checkpoint_every=self.checkpoint_every)

    def __call__(self, model, camera_pose=None):
        q, qd = self.simulate(model)
        err = {"angle": q - self.data["q"], "velocity": qd - self.data["qd"]}
        if self.scheme == "both":
            residual = torch.cat([err["angle"], err["velocity"]], -1)
        else:
            residual = err[self.scheme]
        return (residual / self.scale).reshape(-1)


class CameraResidual(_Block):
    """Predicted vs measured pose of the tracked link in the camera frame.

    Residual per observation: position error / position_std (3) and the rotation vector of
    ``R_measured^T R_predicted`` / rotation_std (3).

    Args:
        observations: :class:`~diffsim_ros.estimation.data.CameraObservations`.
        model: Model for dtype/device.
    """

    name = "camera"
    unit = "m | rad"

    def __init__(self, observations, model):
        like = model.params.mass
        self.frame = observations.frame
        model.frame(self.frame)  # clear error for an unknown tracked link
        self.q = _tensor(observations.q, like)
        self.position = _tensor(observations.position, like)
        self.rotation = quat_to_matrix(_tensor(observations.quaternion, like))
        n = self.q.shape[0]
        self.scale = torch.cat(
            [
                torch.full((n, 3), float(observations.position_std), dtype=like.dtype, device=like.device),
                torch.full((n, 3), float(observations.rotation_std), dtype=like.dtype, device=like.device),
            ],
            -1,
        )
        self.columns = 6

    def predict(self, model, camera_pose):
        """Predicted link poses in the camera frame: rotations (N, 3, 3), positions (N, 3)."""
        link = forward_kinematics(model, self.q, self.frame)
        rot_c = camera_pose[:3, :3].transpose(0, 1)
        rotation = rot_c @ link[:, :3, :3]
        position = matvec(rot_c, link[:, :3, 3] - camera_pose[:3, 3])
        return rotation, position

    def __call__(self, model, camera_pose):
        if camera_pose is None:
            raise ValueError("the camera residual needs a camera pose (estimate group 'camera')")
        rotation, position = self.predict(model, camera_pose)
        rot_err = quat_log(matrix_to_quat(self.rotation.transpose(-1, -2) @ rotation))
        return (torch.cat([position - self.position, rot_err], -1) / self.scale).reshape(-1)
