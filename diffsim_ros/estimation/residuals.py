"""Residual blocks: the identification losses, each normalized by its measurement noise.

Every block maps ``(model, camera_pose)`` to a flat residual vector whose entries have unit
variance when the model is right, so blocks of different units can be stacked, and per-joint
RMS values can be reported in physical units through :meth:`per_joint_rms`.

* :class:`StaticTorqueResidual` — efforts at rest balance gravity and springs (rigid body).
* :class:`StaticSimulatorResidual` — the same through any simulator: starting at rest with
  the measured efforts, the arm must not accelerate (torque-equivalent, ``M qd_1 / dt``).
* :class:`InverseDynamicsResidual` — ``rnea - passive - tau`` on filtered trajectories.
* :class:`SimulatorDynamicsResidual` — the same through any simulator: one short step from
  every measured state must reproduce the measured acceleration (torque-equivalent).
* :class:`RolloutResidual` — one-step or multi-step (recurrent window) rollouts of a
  simulator compared with measured angles and/or velocities (Liu et al. Eq. 22/26,
  Le Lidec et al., Wang et al.).
* :class:`CameraResidual` — camera poses of the tracked link.
* :class:`CoordinatePrior` — the URDF's link inertials as a weak prior: motion determines
  only combinations of them (base parameters); the prior holds the rest.
"""

import numpy as np
import torch

from diffsim_ros.dynamics.crba import mass_matrix
from diffsim_ros.dynamics.kinematics import forward_kinematics
from diffsim_ros.dynamics.passive import passive_torques
from diffsim_ros.dynamics.regressor import joint_torque_regressor, regressor_rnea
from diffsim_ros.dynamics.rnea import gravity_torques, rnea
from diffsim_ros.dynamics.spatial import matrix_to_quat, matvec, quat_log, quat_to_matrix
from diffsim_ros.dynamics.springs import spring_torques

__all__ = [
    "StaticTorqueResidual",
    "StaticSimulatorResidual",
    "SimulatorDynamicsResidual",
    "InverseDynamicsResidual",
    "RolloutResidual",
    "CameraResidual",
    "ARMATURE_PRIOR",
    "CoordinatePrior",
    "INERTIA_PRIOR",
    "ROLLOUT_SCHEMES",
    "torques_applied",
]

ROLLOUT_SCHEMES = ("angle", "velocity", "both", "torque")
"""Rollout residuals: angle, velocity or both errors (Liu et al. Eq. 26 variants), or
``"torque"``: the velocity error mapped to torque units, ``M(q_k) (qd_sim - qd_k) / t_k`` at
the k-th compared sample ``t_k`` after the window start. Noise in the torques reaches the
velocity through M^-1, so the torque scheme weights every joint by what its torque noise
allows: a light wrist joint, whose velocity a tiny torque error moves a lot, does not drown
the shoulder (generalized least squares for short windows)."""
REGRESSOR_CACHE_BYTES = 512 * 2**20
"""Memory the inverse-dynamics loss may keep for its joint-torque regressors (about 0.4 MB per
second of 100 Hz data on a 7-joint arm, so a 20-minute recording); beyond it, regressors are
computed again at each evaluation (the same values, more CPU)."""
DT_TOLERANCE = 1e-3
"""Relative mismatch accepted between a trajectory's sample period and a multiple of the
simulator's period (clock rounding of recorded stamps); the simulator's dt is used."""


def _tensor(value, like):
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


class _Block:
    """Shared helpers: weights, per-column RMS in physical units, noise rescaling.

    ``scale`` holds each entry's noise standard deviation; ``weight`` is 1 for entries that
    count and 0 for those a block leaves out (e.g. joints sticking in Coulomb friction);
    ``series`` is what :meth:`serial_segments` returns.
    """

    name = "block"
    unit = ""
    weight = None
    span = 0
    """Rows on each side whose errors a row's error is correlated with (filtered data)."""
    torque_error_sign = 1.0
    """+1 where a torque error is the model's torque minus the measured one, -1 where it is
    measured minus model (a simulation that misses a torque falls behind)."""
    speeds = None
    """Motion blocks: per entry, the slowest joint speed among the samples it depends on
    [rad/s], shaped like the errors (rows, columns); None for rest poses."""
    series = None
    sample_ns = None
    """The stamp [ns] of every sample (a sample being ``entries / len(sample_ns)`` consecutive
    entries: a motion sample, a rollout window's start, a rest pose's middle), shape (samples,)
    int64; None for blocks without times (camera observations, rest poses of unknown times)."""

    def measured_torques(self):
        """Measured torques [N·m] shaped like the errors, (rows, columns), or None where the
        block's errors are not torque errors."""
        return None

    @property
    def active(self):
        """Number of residual entries that count."""
        return int(self.scale.numel() if self.weight is None else int(self.weight.sum()))

    def active_per_column(self):
        """Entries that count in each column, shape (columns,)."""
        if self.weight is None:
            return torch.full((self.columns,), self.scale.numel() // self.columns, dtype=self.scale.dtype)
        return self.weight.reshape(-1, self.columns).sum(0)

    def _finish(self, error):
        """Normalized, weighted residual vector of physical errors shaped like ``scale``."""
        residual = error / self.scale
        if self.weight is not None:
            residual = residual * self.weight
        return residual.reshape(-1)

    def per_joint_rms(self, residual):
        """Per-column RMS in physical units over the entries that count, shape (columns,)."""
        physical = residual.reshape(-1, self.columns) * self.scale.reshape(-1, self.columns)
        count = self.active_per_column().clamp_min(1)
        return (physical.square().sum(0) / count).sqrt()

    def rescale(self, factors):
        """Multiply the noise of each column by ``factors`` (shape (columns,))."""
        shape = self.scale.shape
        self.scale = (self.scale.reshape(-1, self.columns) * factors).reshape(shape)

    def serial_segments(self):
        """Which entries are samples of time series with correlated errors, or None.

        Returns:
            None when the errors of all entries are independent (rest poses, camera
            observations); else ``(lengths, reach)``: the samples of every segment (gap-free
            run) in entry order, a sample being ``entries / sum(lengths)`` consecutive
            entries, and the largest lag [samples] at which the errors of one segment share
            raw data (a filter's span; errors of different segments never do).
        """
        return self.series


def _series(lengths, reach):
    """``serial_segments`` of a block: None when no two samples share raw data."""
    return (tuple(int(n) for n in lengths), int(reach)) if reach > 0 else None


def _filter_reach(trajectories):
    """Largest lag [samples] at which two samples' filtered values share a raw sample."""
    return 2 * max(int(t.filter_span) for t in trajectories)


def _stiction_weight(qd, velocity):
    """1 where a joint moves at least ``velocity`` [rad/s] in every given sample, else 0.

    While a joint sticks, its Coulomb friction is any torque within +-mu: such entries carry
    no equation the friction model can satisfy, so they are left out.

    Args:
        qd: Velocities, shape (..., S, n): the samples each entry depends on along dim -2.
        velocity: Threshold [rad/s], or None (every entry counts).
    """
    if velocity is None:
        return None
    return (qd.abs() >= velocity).all(dim=-2).to(qd.dtype)


def _effort_rows(trajectories, like, repeat=None):
    """1 for the rows of trajectories whose torques are measured efforts, else 0, shape (rows, 1).

    Args:
        trajectories: The block's trajectories, in row order.
        like: Tensor giving dtype and device.
        repeat: Rows per trajectory (default: its samples).
    """
    counts = [len(t) for t in trajectories] if repeat is None else repeat
    flags = [float(t.measured_efforts) for t in trajectories]
    return torch.repeat_interleave(torch.tensor(flags, dtype=like.dtype, device=like.device),
                                   torch.tensor(counts, device=like.device))[:, None]


def torques_applied(tau, efforts, model, rate=None):
    """Joint torques of measured ``tau`` [N·m]: efforts less the model's effort bias, and read
    ``effort_delay`` later (to first order, with their ``rate`` [N·m/s]) where ``efforts`` is 1
    (shape broadcastable to ``tau``); commanded torques as they are."""
    if efforts is None:
        return tau
    if rate is not None:
        tau = tau + efforts * model.params.effort_delay * rate
    return tau - efforts * model.params.effort_bias


def _rates(trajectories, like):
    """Stacked ``tau_rate`` of trajectories (zeros where a trajectory has none), or None."""
    if all(t.tau_rate is None for t in trajectories):
        return None
    return torch.cat([_tensor(np.zeros_like(t.tau) if t.tau_rate is None else t.tau_rate, like) for t in trajectories])


def _kinematics(model):
    """What a joint-torque regressor depends on: the model, its joint origins, axes, rotations, gravity."""
    with torch.no_grad():
        tensors = (model.params.joint_origin_xyz, model.joint_axis, model.joint_origin_rot, model.gravity)
        return (model,) + tuple(torch.autograd.forward_ad.unpack_dual(t).primal.clone() for t in tensors)


def _same_kinematics(model, kinematics):
    """True when ``model``'s kinematics are ``kinematics``' (:func:`_kinematics`), values and structure,
    and carry no tangent or gradient (a regressor built for them is then exact for ``model``)."""
    reference = kinematics[0]
    if model.parents != reference.parents or model.joint_types != reference.joint_types:
        return False
    tensors = (model.params.joint_origin_xyz, model.joint_axis, model.joint_origin_rot, model.gravity)
    for tensor, expected in zip(tensors, kinematics[1:]):
        primal, tangent = torch.autograd.forward_ad.unpack_dual(tensor)
        if tangent is not None or tensor.requires_grad or not torch.equal(primal, expected):
            return False
    return True


def _rest_stamps(poses):
    """Stamps [ns] of rest poses (``sample_ns``), or None when their times are unknown."""
    return None if poses.times is None else np.round(poses.times * 1e9).astype(np.int64)


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
        self.sample_ns = _rest_stamps(poses)

    def predict(self, model):
        """Torques that hold each pose [N·m], shape (N, n)."""
        return gravity_torques(model, self.q) - spring_torques(model, self.q)

    def measured_torques(self):
        return self.effort

    def __call__(self, model, camera_pose=None):
        return self._finish(self.predict(model) - (self.effort - model.params.effort_bias))


class SimulatorDynamicsResidual(_Block):
    """Inverse dynamics through any simulator: ``M(q) (qd + h qdd - qd_1) / h`` [N·m].

    From each measured state ``(q, qd)`` the simulator advances one step of ``h`` (its dt)
    with the mean torque over that step. A model that reproduces the data moves the
    velocity by ``h qdd`` (to first order), so the residual is the torque by which the
    simulator's dynamics miss the measured acceleration: the inverse-dynamics residual of a
    simulator, at any data rate (rest poses are the case ``qd = qdd = 0``). Keep ``h`` short
    (e.g. 1 ms): its error is about ``(h / 2) M jerk``.

    Args:
        q, qd, qdd: Measured states and accelerations, arrays (N, n).
        tau: Motor torque held over each step [N·m], (N, n) (for trajectories: filtered
            like the accelerations, see :mod:`diffsim_ros.estimation.preparation`).
        scale: Torque noise [N·m], broadcastable to (N, n).
        model: Model for dtype/device.
        simulator: JointSpaceSimulator whose dt is h; its model is replaced by the
            candidate model at every evaluation.
        weight: Entry weights (N, n) or None.
    """

    name = "simulator dynamics"
    unit = "N·m"

    def __init__(self, q, qd, qdd, tau, scale, model, simulator, weight=None, span=0, speeds=None, efforts=None,
                 rate=None):
        like = model.params.mass
        self.q, self.qd, self.qdd, self.tau = (_tensor(v, like) for v in (q, qd, qdd, tau))
        self.efforts = efforts  # (N, 1): rows whose tau are measured efforts, or None (all commanded)
        self.rate = rate  # (N, n) d tau / dt, or None
        self.scale = torch.broadcast_to(_tensor(scale, like), self.q.shape).clone()
        self.columns = self.q.shape[1]
        self.simulator = simulator
        self.weight = weight
        self.span = int(span)
        self.speeds = None if speeds is None else _tensor(speeds, like)

    def measured_torques(self):
        return self.tau

    @classmethod
    def from_trajectories(cls, trajectories, model, simulator, torque_std, stiction_velocity=None):
        """One step from every sample of trajectories with accelerations."""
        parts = {k: [] for k in ("q", "qd", "qdd", "tau")}
        for traj in trajectories:
            if traj.qdd is None:
                raise ValueError("the simulator-dynamics loss needs accelerations (filtered trajectories)")
            for key in ("q", "qd", "qdd", "tau"):
                parts[key].append(getattr(traj, key))  # tau: filtered like qdd (consistent)
            parts.setdefault("slowest", []).append(traj.slowest_speed())
        arrays = {k: np.concatenate(v) for k, v in parts.items()}
        like = model.params.mass
        weight = _stiction_weight(_tensor(arrays["slowest"], like)[:, None, :], stiction_velocity)
        block = cls(arrays["q"], arrays["qd"], arrays["qdd"], arrays["tau"], float(torque_std), model, simulator, weight,
                    max(t.filter_span for t in trajectories), arrays["slowest"], _effort_rows(trajectories, like),
                    _rates(trajectories, like))
        block.series = _series([len(t) for t in trajectories], _filter_reach(trajectories))
        block.sample_ns = np.concatenate([t.stamps_ns for t in trajectories])
        return block

    def __call__(self, model, camera_pose=None):
        sim = self.simulator.with_model(model)
        _, qd1 = sim.rollout(self.q, self.qd, torques_applied(self.tau, self.efforts, model, self.rate)[:, None, :])
        missing = (self.qd + sim.dt * self.qdd - qd1[:, 0]) / sim.dt
        return self._finish(matvec(mass_matrix(model, self.q), missing))


class StaticSimulatorResidual(SimulatorDynamicsResidual):
    """Static balance through a simulator: ``-M(q) qd_1 / h`` after one step from rest [N·m].

    With exact dynamics this equals ``effort - (g - tau_spring)`` to first order in h; with
    the PBD simulator it measures how well PBD's statics reproduce the data.

    Args:
        poses: Static poses.
        model: Model for dtype/device.
        simulator: JointSpaceSimulator (its dt is h).
    """

    name = "static torques (simulator)"

    def __init__(self, poses, model, simulator):
        zeros = np.zeros_like(poses.q)
        super().__init__(poses.q, zeros, zeros, poses.effort, poses.effort_std, model, simulator)
        self.effort = self.tau
        self.efforts = torch.ones_like(self.tau[:, :1])
        self.sample_ns = _rest_stamps(poses)

    def predict(self, model):
        """Torques that hold each pose [N·m] (rigid-body statics, for reports), shape (N, n)."""
        return gravity_torques(model, self.q) - spring_torques(model, self.q)


class InverseDynamicsResidual(_Block):
    """``(rnea(q, qd, qdd) - passive(q, qd) - tau) / std`` along filtered trajectories [N·m].

    Args:
        trajectories: Trajectories with ``qdd``.
        model: Model for dtype/device.
        torque_std: Torque noise [N·m].
        stiction_velocity: Entries of joints slower than this [rad/s] anywhere within the
            filter span of the sample are left out (Coulomb friction is undetermined while a
            joint sticks, and a reversal inside the span blurs its sign); None keeps all.
    """

    name = "inverse dynamics"
    unit = "N·m"

    def __init__(self, trajectories, model, torque_std, stiction_velocity=None):
        like = model.params.mass
        missing = [i for i, t in enumerate(trajectories) if t.qdd is None]
        if missing:
            raise ValueError(f"inverse-dynamics loss needs accelerations; trajectories {missing} have none")
        self.q = torch.cat([_tensor(t.q, like) for t in trajectories])
        self.qd = torch.cat([_tensor(t.qd, like) for t in trajectories])
        self.qdd = torch.cat([_tensor(t.qdd, like) for t in trajectories])
        self.tau = torch.cat([_tensor(t.tau, like) for t in trajectories])
        self.efforts = _effort_rows(trajectories, like)
        self.rate = _rates(trajectories, like)
        self.scale = torch.full_like(self.q, float(torque_std))
        self.columns = self.q.shape[1]
        self.speeds = torch.cat([_tensor(t.slowest_speed(), like) for t in trajectories])
        self.weight = _stiction_weight(self.speeds[:, None, :], stiction_velocity)
        self.span = max(t.filter_span for t in trajectories)
        self.series = _series([len(t) for t in trajectories], _filter_reach(trajectories))
        self.sample_ns = np.concatenate([t.stamps_ns for t in trajectories])
        self._kinematics = _kinematics(model)
        self._regressors = {}

    def measured_torques(self):
        return self.tau

    def _regressor(self, rows):
        """The joint-torque regressor of the samples ``rows`` (a slice), cached within the budget."""
        key = rows.indices(self.samples)[:2]
        if key in self._regressors:
            return self._regressors[key]
        with torch.no_grad():
            value = joint_torque_regressor(self._kinematics[0], self.q[rows], self.qd[rows], self.qdd[rows])
        held = sum(y.numel() * y.element_size() for y in self._regressors.values())
        if held + value.numel() * value.element_size() <= REGRESSOR_CACHE_BYTES:
            self._regressors[key] = value
        return value

    def rigid_torques(self, model, rows=slice(None)):
        """``rnea(model, q, qd, qdd)`` of the samples ``rows`` [N·m], shape (rows, n), armature included.

        Inverse dynamics is linear in the inertial parameters: while ``model`` has the
        kinematics the block was built with (masses, COMs, inertias and the payload may
        differ, with or without tangents), this is the cached regressor times the model's
        inertial parameters, exact, and its forward-mode tangents cost one matrix product.
        Other kinematics (``link_lengths`` being fitted) go through the recursion.
        """
        if _same_kinematics(model, self._kinematics):
            return regressor_rnea(self._regressor(rows), model, self.qdd[rows])
        return rnea(model, self.q[rows], self.qd[rows], self.qdd[rows])

    chunk_rows = 1024
    """Samples per chunk when Jacobians are taken chunk by chunk. With torch's Python shape code
    for zero tangents out of the way (:mod:`diffsim_ros._tangents`), each vectorized forward-mode
    operation costs a fixed overhead, so larger chunks are cheaper (measured on Baxter, 13
    tangents, forward Jacobians of 2048 samples: chunks of 128 0.54 s, 256 0.36 s, 1024 0.19 s,
    2048 0.16 s; a rigid calibration from 20 s of 100 Hz motion 26 -> 17 s of CPU from 256 to
    1024). 1024 bounds the tangents' memory on long recordings."""

    @property
    def samples(self):
        """Number of samples (rows of ``(samples, columns)``)."""
        return self.q.shape[0]

    def __call__(self, model, camera_pose=None, rows=slice(None)):
        q, qd = self.q[rows], self.qd[rows]
        predicted = self.rigid_torques(model, rows) - passive_torques(model, q, qd)
        rate = None if self.rate is None else self.rate[rows]
        residual = (predicted - torques_applied(self.tau[rows], self.efforts[rows], model, rate)) / self.scale[rows]
        if self.weight is not None:
            residual = residual * self.weight[rows]
        return residual.reshape(-1)


class RolloutResidual(_Block):
    """Simulated vs measured states over windows of ``horizon`` samples.

    The simulator may step faster than the data: with sample period ``dt`` and simulator
    period ``dt / m`` (m an integer), every sample period is simulated in m steps, each with
    the trajectory's mean torque over that step (the torque signal as the robot applied it),
    and states are compared at the samples only: low-rate data (e.g. 10 Hz) with a fine
    internal step (Wang et al.).

    Args:
        trajectories: Trajectories whose ``dt`` is a multiple of the simulator's.
        model: Model for dtype/device.
        simulator: JointSpaceSimulator (rigid-body or PBD).
        horizon: Samples per window (1 = one-step loss, > 1 = multi-step recurrent loss).
        scheme: One of :data:`ROLLOUT_SCHEMES`.
        stride: Samples between windows (default: ``horizon``).
        checkpoint_every: Gradient checkpointing block for long horizons.
        stiction_velocity: Entries of a joint slower than this [rad/s] anywhere in a window
            are left out; None keeps every entry.
        torque_std: Initial torque noise of the ``"torque"`` scheme [N·m].
    """

    name = "rollout"
    torque_error_sign = -1.0
    # Windows apply the measured torques as recorded: efforts' bias is subtracted, but their
    # delay (``effort_delay``, a first-order correction with the filtered torque rate of the
    # instantaneous losses) is not modelled here, so rollouts alone leave it undetermined.

    def __init__(self, trajectories, model, simulator, horizon=1, scheme="both", stride=None, checkpoint_every=None,
                 stiction_velocity=None, torque_std=0.05):
        if scheme not in ROLLOUT_SCHEMES:
            raise ValueError(f"unknown rollout scheme '{scheme}'; choose from {ROLLOUT_SCHEMES}")
        like = model.params.mass
        parts = {k: [] for k in ("q0", "qd0", "tau", "q", "qd")}
        q_std, qd_std, counts, stamps = [], [], [], []
        self.steps_per_sample = None
        for traj in trajectories:
            m = self._steps_per_sample(traj.dt, simulator.dt)
            windows = traj.windows(horizon, stride, m)
            counts.append(len(windows["start"]))
            stamps.append(traj.stamps_ns[windows["start"]])
            for key in parts:
                parts[key].append(_tensor(windows[key], like))
            q_std.append(torch.full_like(parts["q"][-1], traj.q_std))
            qd_std.append(torch.full_like(parts["qd"][-1], traj.qd_std))
        self.data = {k: torch.cat(v) for k, v in parts.items()}
        self.sample_ns = np.concatenate(stamps)
        self.efforts = _effort_rows(trajectories, like, counts)[:, None]  # (W, 1, 1)
        self.simulator = simulator
        self.scheme = scheme
        self.checkpoint_every = checkpoint_every
        self.columns = self.data["q"].shape[-1] * (2 if scheme == "both" else 1)
        q_std, qd_std = torch.cat(q_std), torch.cat(qd_std)
        tau_std = torch.full_like(q_std, float(torque_std))
        self.scale = {"angle": q_std, "velocity": qd_std, "both": torch.cat([q_std, qd_std], -1), "torque": tau_std}[scheme]
        self.unit = {"angle": "rad", "velocity": "rad/s", "both": "rad | rad/s", "torque": "N·m"}[scheme]
        self.weight = self._weight(stiction_velocity)
        self.span = max(t.filter_span for t in trajectories)
        speeds = torch.cat([self.data["qd0"][:, None, :], self.data["qd"]], dim=1).abs().amin(1, keepdim=True)
        self.speeds = speeds.expand_as(self.data["q"]).reshape(-1, self.data["q"].shape[-1])
        # A window is one sample of the series; windows less than its horizon plus the filter's
        # reach apart share raw data (one's end state is the next one's start). Rounded up.
        step = horizon if stride is None else int(stride)
        self.series = _series(counts, -(-(int(horizon) + _filter_reach(trajectories)) // step))
        if scheme == "torque":
            # Rigid-body inertia of the nominal model at the measured states: a fixed metric.
            elapsed = trajectories[0].dt * torch.arange(1, self.data["q"].shape[1] + 1, dtype=like.dtype, device=like.device)
            self.metric = mass_matrix(model, self.data["q"]).detach() / elapsed[None, :, None, None]

    def measured_torques(self):
        """Of the ``"torque"`` scheme: the mean applied torque from each window's start to
        each of its samples [N·m], (W * K, n), the torque its error ``M dv / t`` is compared
        with; None for the other schemes."""
        if self.scheme != "torque":
            return None
        tau, m = self.data["tau"], self.steps_per_sample  # (W, K * m, n)
        steps = torch.arange(1, tau.shape[1] + 1, dtype=tau.dtype, device=tau.device)
        means = tau.cumsum(1) / steps[None, :, None]
        return means[:, m - 1 :: m].reshape(-1, tau.shape[-1])

    def _steps_per_sample(self, dt, sim_dt):
        m = int(round(dt / sim_dt))
        if m < 1 or abs(m * sim_dt - dt) > DT_TOLERANCE * dt:
            raise ValueError(f"trajectory dt {dt} s is not a multiple of the simulator dt {sim_dt} s")
        if self.steps_per_sample not in (None, m):
            raise ValueError("all trajectories of a rollout residual need the same sample period")
        self.steps_per_sample = m
        return m

    def _weight(self, velocity):
        if velocity is None:
            return None
        d = self.data
        speeds = torch.cat([d["qd0"][:, None, :], d["qd"]], dim=1)  # (W, K + 1, n)
        weight = _stiction_weight(speeds, velocity)[:, None, :].expand_as(d["q"])
        return torch.cat([weight, weight], -1) if self.scheme == "both" else weight

    def simulate(self, model):
        """Simulated ``(q, qd)`` at every sample of every window, shapes (W, K, n)."""
        sim = self.simulator.with_model(model)
        d = self.data
        q, qd = sim.rollout(d["q0"], d["qd0"], torques_applied(d["tau"], self.efforts, model), checkpoint_every=self.checkpoint_every)
        m = self.steps_per_sample
        return q[..., m - 1 :: m, :], qd[..., m - 1 :: m, :]

    def __call__(self, model, camera_pose=None):
        q, qd = self.simulate(model)
        err = {"angle": q - self.data["q"], "velocity": qd - self.data["qd"]}
        if self.scheme == "both":
            error = torch.cat([err["angle"], err["velocity"]], -1)
        elif self.scheme == "torque":
            error = matvec(self.metric, err["velocity"])
        else:
            error = err[self.scheme]
        return self._finish(error)


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
        return self._finish(torch.cat([position - self.position, rot_err], -1))



INERTIA_PRIOR = (0.15, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.05, 0.05, 0.05)
"""Std of a link's log-Cholesky coordinates ``[alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3]``
(:func:`~diffsim_ros.model.inertia.inertial_from_log_cholesky`) around the URDF's: how far a
URDF's inertials may be from the robot's (CAD estimates; cables, motors and gears left out).
``alpha`` is the log of the mass's square root (0.15: the mass within ~30 %), ``d`` the logs of
the mass distribution's extent along three axes (~30 %), ``s`` its shears, ``t`` the COM [m]
(5 cm). Being Gaussian in these coordinates, the prior keeps a link away from a flat or
needle-like distribution (d -> -inf), which the data alone may drift to in the directions
they do not determine. Motion determines only combinations of the inertials (base
parameters): the prior holds each link at the values nearest the URDF's that the data allow,
and is otherwise far weaker than the data."""
ARMATURE_PRIOR = 1.0
"""[kg·m² or kg] Std of an armature around the nominal one (zero: no URDF has one): far weaker
than the inertials', so that where a joint's armature and its link's inertia about the axis
act alike, the difference goes to the armature."""


class CoordinatePrior(_Block):
    """``(x[index] - nominal) / std``: a Gaussian prior on some of the fit's coordinates.

    Rows are independent and untimed, their noise is fixed (never re-estimated from the fit),
    and both sides of a time split share them: a prior says the same before and after a cut.
    Call :meth:`of_coordinates` (the coordinates, not a model).

    Args:
        index: Coordinates held, int (K,).
        nominal: Their prior means, (K,).
        std: Their prior std, (K,).
        like: Tensor giving dtype and device.
        armature: Whether armature coordinates are among them (see :data:`ARMATURE_PRIOR`).
    """

    name = "inertial prior"
    unit = "prior std"
    prior = True
    fixed_noise = True
    shared = True
    columns = 1

    def __init__(self, index, nominal, std, like, armature=False):
        self.index = torch.as_tensor(np.asarray(index, dtype=np.int64), device=like.device)
        self.nominal = _tensor(nominal, like)
        self.scale = _tensor(std, like).clone()
        self.armature = bool(armature)

    def of_coordinates(self, x):
        return self._finish(x[self.index] - self.nominal)
