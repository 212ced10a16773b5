"""A plain baseline: Pinocchio inverse-dynamics regression on a motion bag.

What a lab would write in an afternoon, sharing nothing with diffsim_ros: read the bag with
rosbags, smooth positions with scipy's Savitzky-Golay filter, build Pinocchio's joint-torque
regressor of the wrist body (which carries the payload) and solve, by linear least squares,

    effort - rnea_nominal(q, qd, qdd) = Y_wrist(q, qd, qdd) dphi + b * qd + mu * sign(qd) + tau_spring(q; k, offset)

with the spring re-linearized around the current (k, offset) a few times. The payload's mass
and COM follow from the wrist body's parameter change ``dphi`` (mass and first moment).
"""

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from scipy.signal import savgol_filter

from motion_recordings import ARM, NOMINAL_SPRING, TOPICS
from oracles import BAXTER_URDF, PinocchioOracle

__all__ = ["BaselineEstimate", "read_joint_states", "regression_baseline"]


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
    from rosbags.highlevel import AnyReader

    rows = []
    with AnyReader([bag]) as reader:
        connections = [c for c in reader.connections if c.topic == TOPICS["joint_states"]]
        for connection, _, raw in reader.messages(connections=connections):
            msg = reader.deserialize(raw, connection.msgtype)
            index = [list(msg.name).index(j) for j in ARM]
            stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
            rows.append((stamp, np.asarray(msg.position)[index], np.asarray(msg.velocity)[index], np.asarray(msg.effort)[index]))
    rows.sort(key=lambda r: r[0])
    t, q, qd, e = (np.array([r[k] for r in rows]) for k in range(4))
    keep = np.isfinite(q).all(1) & np.isfinite(e).all(1)
    return t[keep], q[keep], qd[keep], e[keep]


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
    dt = float(np.median(np.diff(t)))
    length = max(7, int(round(window / dt)) | 1)
    q = savgol_filter(q_raw, length, 3, axis=0)
    qd = savgol_filter(q_raw, length, 3, deriv=1, delta=dt, axis=0)
    qdd = savgol_filter(q_raw, length, 3, deriv=2, delta=dt, axis=0)
    keep = slice(length, len(t) - length)
    q, qd, qdd, effort = q[keep], qd[keep], qdd[keep], effort[keep]
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
