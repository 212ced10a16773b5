"""A plain baseline: Pinocchio inverse-dynamics regression on a motion bag.

What a lab would write in an afternoon, sharing nothing with diffsim_ros: read the bag with
rosbags, smooth positions with scipy's Savitzky-Golay filter, build Pinocchio's joint-torque
regressor of the wrist body (which carries the payload) and solve, by linear least squares,

    effort - rnea_nominal(q, qd, qdd) = Y_wrist(q, qd, qdd) dphi + b * qd + mu * sign(qd) + tau_spring(q; k, offset)

with the spring re-linearized around the current (k, offset) a few times. The payload's mass
and COM follow from the wrist body's parameter change ``dphi`` (mass and first moment).

For a wrong URDF (issue 46), :func:`base_parameter_baseline` is the robot-identification
textbook's answer on any arm: the joint torques are linear in every link's 10 inertial
parameters (Pinocchio's ``computeJointTorqueRegressor``) and in each joint's armature
(column ``qdd``), viscous damping (``qd``) and Coulomb friction (``sign(qd)`` of the filtered
velocity, rows of joints slower than ``stiction_velocity`` left out of the fit);
the base parameters are the regressor's independent columns, found by QR with column
pivoting on random samples (Gautier's numerical method), and fitted by least squares.
"""

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from scipy.signal import savgol_filter

from motion_recordings import ARM, NOMINAL_SPRING, TOPICS
from oracles import BAXTER_URDF, PinocchioOracle

__all__ = ["BaselineEstimate", "base_columns", "base_parameter_baseline", "filtered_motion", "identification_regressor",
           "model_rmse", "passive_parameters", "read_arm_joint_states", "read_joint_states", "regression_baseline", "rigid_prediction",
           "rmse_per_joint"]

RANK_TOLERANCE = 1e-8  # |R_ii| / |R_00| below which a pivoted column depends on the ones before it


@dataclass(frozen=True)
class BaselineEstimate:
    payload_mass: float
    payload_com: np.ndarray
    """[m] in the left_hand frame."""
    stiffness: float
    offset: float
    damping: np.ndarray
    friction: np.ndarray | None


def read_joint_states(bag):
    """(times [s], q, qd, effort) of the arm joints, in ARM order, sorted by stamp; NaN rows dropped."""
    return read_arm_joint_states(bag, ARM, TOPICS["joint_states"])


def read_arm_joint_states(bag, joints, topic="/joint_states"):
    """(times [s], q, qd, effort) of ``joints``, in that order, from ``topic``, sorted by header stamp; NaN rows dropped."""
    from rosbags.highlevel import AnyReader

    rows = []
    with AnyReader([Path(bag)]) as reader:
        connections = [c for c in reader.connections if c.topic == topic]
        if not connections:
            raise ValueError(f"{bag}: no topic {topic}; topics: {sorted(c.topic for c in reader.connections)}")
        for connection, _, raw in reader.messages(connections=connections):
            msg = reader.deserialize(raw, connection.msgtype)
            index = [list(msg.name).index(j) for j in joints]
            stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
            rows.append((stamp, np.asarray(msg.position)[index], np.asarray(msg.velocity)[index], np.asarray(msg.effort)[index]))
    rows.sort(key=lambda r: r[0])
    t, q, qd, e = (np.array([r[k] for r in rows]) for k in range(4))
    keep = np.isfinite(q).all(1) & np.isfinite(e).all(1)
    return t[keep], q[keep], qd[keep], e[keep]


def filtered_motion(t, q_raw, window=0.2):
    """Savitzky-Golay (cubic, ``window`` [s], at least 7 samples) q, qd, qdd of positions sampled at ``t`` [s].

    Returns ``(q, qd, qdd, keep)``: the arrays without a window's length at each end, where the
    filter is one-sided, and ``keep``, the slice of samples they are.
    """
    dt = float(np.median(np.diff(t)))
    length = max(7, int(round(window / dt)) | 1)
    keep = slice(length, len(t) - length)
    q = savgol_filter(q_raw, length, 3, axis=0)
    qd = savgol_filter(q_raw, length, 3, deriv=1, delta=dt, axis=0)
    qdd = savgol_filter(q_raw, length, 3, deriv=2, delta=dt, axis=0)
    return q[keep], qd[keep], qdd[keep], keep


def _spring(theta, k, offset):
    s = NOMINAL_SPRING
    phi = np.pi - s["alpha1"] - offset + theta
    length = np.sqrt(s["l1"] ** 2 + s["l2"] ** 2 - 2 * s["l1"] * s["l2"] * np.cos(phi))
    return -k * (length - s["rest_length"]) * s["l1"] * s["l2"] * np.sin(phi) / length


def regression_baseline(bag, friction=False, window=0.2, iterations=4, stiction_velocity=0.05):
    """Estimate payload, spring, damping (and friction) from a motion bag.

    Args:
        bag: Bag path written by :func:`motion_recordings.write_motion_bag`.
        friction: Also regress Coulomb friction (sign of the filtered velocity).
        window: Savitzky-Golay window [s] (at least 7 samples).
        iterations: Spring re-linearizations.
        stiction_velocity: With ``friction``, rows of joints slower than this [rad/s] are left
            out: while a joint sticks, its friction torque is anything within +-mu.
    """
    import pinocchio as pin

    t, q_raw, _, effort = read_joint_states(bag)
    q, qd, qdd, keep = filtered_motion(t, q_raw, window)
    effort = effort[keep]
    oracle = PinocchioOracle(SimpleNamespace(joint_names=ARM), BAXTER_URDF)
    model, data = oracle.model, oracle.data
    wrist = model.getJointId("left_w2")
    nominal, regressor = [], []
    for qi, vi, ai in zip(q, qd, qdd):
        args = (oracle.q(qi), oracle.v(vi), oracle.v(ai))
        nominal.append(oracle.sel(pin.rnea(model, data, *args)))
        full = pin.computeJointTorqueRegressor(model, data, *args)
        regressor.append(full[oracle.v_index][:, 10 * (wrist - 1) : 10 * wrist])
    nominal, regressor = np.array(nominal), np.array(regressor)  # (T, 7), (T, 7, 10)
    n, steps = len(ARM), len(q)
    eye = np.broadcast_to(np.eye(n), (steps, n, n))
    columns = [regressor, eye * qd[:, None, :]]
    if friction:
        columns.append(eye * np.sign(qd)[:, None, :])
    k, offset = NOMINAL_SPRING["stiffness"], NOMINAL_SPRING["offset"]
    for _ in range(iterations):
        base = _spring(q[:, 1], k, offset)
        d_off = (_spring(q[:, 1], k, offset + 1e-6) - _spring(q[:, 1], k, offset - 1e-6)) / 2e-6
        spring_cols = np.zeros((steps, n, 2))
        spring_cols[:, 1, 0] = base / k
        spring_cols[:, 1, 1] = d_off
        A = np.concatenate(columns + [spring_cols], axis=2).reshape(steps * n, -1)
        # effort = nominal + Y dphi + b qd + mu sign(qd) - tau_spring, with the spring torque
        # tau_spring ~ k g(q; offset0) + d_off (offset - offset0)
        rhs = (effort - nominal - d_off[:, None] * offset * np.eye(n)[1]).reshape(-1)
        A[:, -2:] *= -1.0
        rows = (np.abs(qd) >= stiction_velocity).reshape(-1) if friction else slice(None)
        x, *_ = np.linalg.lstsq(A[rows], rhs[rows], rcond=None)
        k, offset = float(x[-2]), float(x[-1])
    dphi = x[:10]
    mass = float(dphi[0])
    com_wrist = dphi[1:4] / mass
    hand = model.frames[model.getFrameId("left_hand", pin.BODY)].placement
    com_hand = hand.actInv(com_wrist)
    damping = x[10 : 10 + n]
    mu = x[10 + n : 10 + 2 * n] if friction else None
    return BaselineEstimate(mass, np.asarray(com_hand), k, offset, np.asarray(damping), mu)


# --- base-parameter least squares on any arm (issue 46) ------------------------------------


def identification_regressor(oracle, q, qd, qdd):
    """Torques linear in the parameters, shape (T, n, 10 nb + 3 n): Pinocchio's joint-torque
    regressor of every body (rows of the chain joints), then armature (qdd), damping (qd) and
    Coulomb friction (sign qd) columns, one per joint; ``tau = Y @ theta``."""
    pin = oracle.pin
    full = np.array([pin.computeJointTorqueRegressor(oracle.model, oracle.data, oracle.q(a), oracle.v(b), oracle.v(c))
                     [oracle.v_index] for a, b, c in zip(q, qd, qdd)])
    eye = np.eye(q.shape[1])
    passive = [eye * qdd[:, None, :], eye * qd[:, None, :], eye * np.sign(qd)[:, None, :]]
    return np.concatenate([full] + passive, axis=2)


def passive_parameters(oracle, armature, damping, friction):
    """theta of :func:`identification_regressor`: the oracle's inertial parameters, then the passive ones (n,) each."""
    inertial = np.concatenate([oracle.model.inertias[i].toDynamicParameters() for i in range(1, oracle.model.njoints)])
    return np.concatenate([inertial, armature, damping, friction])


def base_columns(oracle, samples=200, seed=0, tolerance=RANK_TOLERANCE):
    """Indices of the independent columns of :func:`identification_regressor` (the base parameters).

    QR with column pivoting of the regressor at ``samples`` random states (positions within the
    joint limits, unit-normal velocities and accelerations): the first ``rank`` pivots.
    """
    from scipy.linalg import qr

    rng = np.random.default_rng(seed)
    lower = oracle.model.lowerPositionLimit[[j.idx_q for j in oracle.joints]]
    upper = oracle.model.upperPositionLimit[[j.idx_q for j in oracle.joints]]
    n = len(oracle.joints)
    q = rng.uniform(np.maximum(lower, -np.pi), np.minimum(upper, np.pi), (samples, n))
    regressor = identification_regressor(oracle, q, rng.standard_normal((samples, n)), rng.standard_normal((samples, n)))
    _, r, pivots = qr(regressor.reshape(samples * n, -1), mode="economic", pivoting=True)
    diagonal = np.abs(np.diag(r))
    rank = int(np.sum(diagonal > tolerance * diagonal[0]))
    return np.sort(pivots[:rank])


def rigid_prediction(oracle, q, qd, qdd, armature, damping, friction):
    """Torques [N·m], (T, n): Pinocchio's rnea with ``model.armature``, plus damping qd and friction sign(qd)."""
    pin = oracle.pin
    model = oracle.model.copy()
    model.armature[oracle.v_index] = armature
    data = model.createData()
    rigid = np.array([np.asarray(pin.rnea(model, data, oracle.q(a), oracle.v(b), oracle.v(c)))[oracle.v_index]
                      for a, b, c in zip(q, qd, qdd)])
    return rigid + damping * qd + friction * np.sign(qd)


def rmse_per_joint(predicted, measured, mask=None):
    """RMS error per joint [N·m], (n,), over the samples where ``mask`` (T, n) is true (default: all)."""
    squared = np.square(predicted - measured)
    if mask is None:
        return np.sqrt(np.mean(squared, axis=0))
    return np.sqrt(np.sum(squared * mask, axis=0) / np.sum(mask, axis=0))


def base_parameter_baseline(fit_bag, test_bag, urdf, joints, topic="/joint_states", window=0.2, stiction_velocity=0.05):
    """Fit the base parameters on ``fit_bag`` and predict the efforts of ``test_bag``.

    Args:
        fit_bag, test_bag: Bags with JointState ``topic`` (``joints`` among its names; efforts are the torques).
        urdf: The nominal URDF (its structure; its inertial values are not used).
        joints: Chain joints in order (others are locked at 0, as :class:`oracles.PinocchioOracle` does).
        window: Savitzky-Golay window [s].
        stiction_velocity: [rad/s] rows of joints slower than this are left out of the fit.

    Returns:
        dict: ``rank``, ``parameters`` (regressor columns), ``rmse`` (n,) [N·m] on the test bag, ``fit_rmse`` (n,).
    """
    oracle = PinocchioOracle(SimpleNamespace(joint_names=list(joints)), urdf)
    columns = base_columns(oracle)
    fit, test = (_prepared(bag, joints, topic, window) for bag in (fit_bag, test_bag))
    regressor = identification_regressor(oracle, *fit[:3])[:, :, columns]
    steps, n, _ = regressor.shape
    rows = (np.abs(fit[1]) >= stiction_velocity).reshape(-1)
    theta, *_ = np.linalg.lstsq(regressor.reshape(steps * n, -1)[rows], fit[3].reshape(-1)[rows], rcond=None)
    fitted = regressor @ theta
    predicted = identification_regressor(oracle, *test[:3])[:, :, columns] @ theta
    return {"rank": len(columns), "parameters": 10 * (oracle.model.njoints - 1) + 3 * n,
            "rmse": rmse_per_joint(predicted, test[3]), "fit_rmse": rmse_per_joint(fitted, fit[3])}


def model_rmse(test_bag, urdf, joints, passive=None, topic="/joint_states", window=0.2, min_speed=0.0):
    """Per-joint RMS error [N·m], (n,), of a URDF's model predicting the efforts of ``test_bag``.

    ``passive``: ``(armature, damping, friction)``, (n,) each, or None for the URDF's own
    (``<dynamics damping friction>`` as Pinocchio reads them, no armature). ``min_speed``
    [rad/s]: score each joint only where it moves at least that fast (sticking and reversals left out).
    """
    oracle = PinocchioOracle(SimpleNamespace(joint_names=list(joints)), urdf)
    if passive is None:
        passive = (np.zeros(len(joints)), oracle.sel(oracle.model.damping), oracle.sel(oracle.model.friction))
    q, qd, qdd, effort = _prepared(test_bag, joints, topic, window)
    predicted = rigid_prediction(oracle, q, qd, qdd, *(np.asarray(p, float) for p in passive))
    return rmse_per_joint(predicted, effort, np.abs(qd) >= min_speed)


def _prepared(bag, joints, topic, window):
    """(q, qd, qdd, effort) of ``bag``, filtered as :func:`filtered_motion`."""
    t, q_raw, _, effort = read_arm_joint_states(bag, joints, topic)
    q, qd, qdd, keep = filtered_motion(t, q_raw, window)
    return q, qd, qdd, effort[keep]
