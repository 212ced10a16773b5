"""Rigid-body joint torques as a regression on the estimated parameters.

For the groups the streaming estimator keeps current, inverse dynamics less the passive
torques is, at every sample, ::

    tau(q, qd, qdd; theta) = known(q, qd, qdd) + A(q, qd, qdd) @ phi(theta)

with ``A`` (n, P_phi) independent of the parameters ``theta`` and ``phi`` a small nonlinear map:

* ``payload``: theta = (m, m c) (mass [kg], first moment [kg·m] in the payload frame, as
  :class:`~diffsim_ros.estimation.parameters.ParameterSpace`); phi = the payload's ten inertial
  parameters in its body's frame (:func:`~diffsim_ros.dynamics.regressor.joint_torque_regressor`
  columns), the point mass's rotational inertia ``(|h|^2 I - h h^T) / m`` included: exact.
* lever spring: theta = (k, offset); phi = k (1, d, d^2), d = offset - base: the torque's
  second-order expansion in the offset around a base that is moved as the estimate moves
  (:meth:`TorqueRegression.rebase`, an exact change of basis of the accumulated statistics).
* torsion spring: theta = (k, offset[, c]); phi = (k, k offset[, c]): exact.
* ``damping``, ``friction``: phi = theta (viscous and smoothed Coulomb terms): exact.

Accumulated normal equations in phi therefore give the exact least-squares cost of any theta
(:mod:`~diffsim_ros.estimation.information`), without keeping the samples.
"""

from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.dynamics.passive import DEFAULT_FRICTION_VELOCITY_SCALE, passive_torques
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.dynamics.regressor import inertial_parameters, regressor_array, regressor_rnea
from diffsim_ros.dynamics.springs import spring_torques
from diffsim_ros.estimation.parameters import PAYLOAD_MIN_MASS, PAYLOAD_START_MASS
from diffsim_ros.model.plausibility import DEFAULT_BOUNDS, scalar_bounds

__all__ = ["OFFSET_TRUST", "STREAMING_GROUPS", "RegressionBlock", "TorqueRegression"]

STREAMING_GROUPS = ("payload", "spring", "damping", "friction")
"""Groups the streaming (regression) estimator can keep current."""
OFFSET_TRUST = 0.05
"""[rad] a fit moves a lever spring's offset at most this far from its expansion point (where the
second-order expansion holds: its third-order error is ~1e-4 N·m there on Baxter's spring)."""
_LEVER_STEP = 1e-4  # [rad] central-difference step of a lever spring's offset derivatives


@dataclass(frozen=True)
class RegressionBlock:
    """One parameter element: its coordinates ``theta[t0:t0+nt]`` and lifted ``phi[p0:p0+np]``.

    Attributes:
        kind: ``"payload"``, ``"lever"``, ``"torsion"``, ``"damping"`` or ``"friction"``.
        names: Physical parameter names it determines.
        t0, nt: Coordinate slice.
        p0, np_: Lifted-parameter slice.
        joint: Joint index the element acts on (-1: the payload, all joints).
    """

    kind: str
    names: tuple
    t0: int
    nt: int
    p0: int
    np_: int
    joint: int = -1


def _payload_phi(theta, rot, pos):
    """phi (10,) and d phi / d theta (10, 4) of a payload ``theta = (m, h)`` (complex-step safe).

    ``h_b = R h + m p`` (the first moment in the body frame) and the point mass's inertia about
    the body origin ``(|h_b|^2 I - h_b h_b^T) / m``, in the regressor's order.
    """
    m, h = theta[0], theta[1:4]
    mt = m if m.real > PAYLOAD_MIN_MASS else PAYLOAD_MIN_MASS + 0.0 * m
    x, y, z = rot @ h + m * pos
    square = x * x + y * y + z * z
    inertia = np.array([square - x * x, -x * y, square - y * y, -x * z, -y * z, square - z * z]) / mt
    # d inertia / d (x, y, z), (6, 3), times d (x, y, z) / d theta = [p | R]
    d_hb = np.array([[0 * x, 2 * y, 2 * z], [-y, -x, 0 * x], [2 * x, 0 * x, 2 * z], [-z, 0 * x, -x], [0 * x, -z, -y],
                     [2 * x, 2 * y, 0 * x]]) / mt
    dtheta = np.concatenate([pos[:, None], rot], axis=1)  # (3, 4)
    d_inertia = d_hb @ dtheta
    if m.real > PAYLOAD_MIN_MASS:
        d_inertia[:, 0] -= inertia / mt
    phi = np.concatenate([[m, x, y, z], inertia])
    jac = np.concatenate([np.eye(1, 4, dtype=theta.dtype), dtheta.astype(theta.dtype), d_inertia])
    return phi, jac


class TorqueRegression:
    """``tau = known + A phi(theta)`` for the requested groups (module docstring).

    Args:
        model: RobotModel (float64 recommended): kinematics, and every parameter not estimated.
        groups: Subset of :data:`STREAMING_GROUPS`.
        bounds: PlausibilityBounds of the coordinates' boxes.

    Raises:
        ValueError: A group this regression does not support (named, with the supported ones),
            ``spring`` without springs or with point springs.
    """

    def __init__(self, model, groups, bounds=DEFAULT_BOUNDS):
        groups = tuple(dict.fromkeys(groups))
        unsupported = [g for g in groups if g not in STREAMING_GROUPS]
        if unsupported or not groups:
            raise ValueError(f"the streaming estimator supports the groups {list(STREAMING_GROUPS)}, got "
                             f"{unsupported or 'none'}; use method='batch' for the others")
        if "spring" in groups and not model.has_springs:
            raise ValueError("group 'spring' requested but the model has no spring elements")
        if "spring" in groups and model.point_springs:
            raise ValueError("the streaming estimator does not support point springs; use method='batch'")
        self.model, self.groups, self.bounds = model, groups, bounds
        self.blocks, self._lower, self._upper = [], [], []
        for group in groups:
            getattr(self, f"_add_{group}")(model)
        self.lower, self.upper = np.array(self._lower, float), np.array(self._upper, float)
        self.size = sum(b.nt for b in self.blocks)
        self.phi_size = sum(b.np_ for b in self.blocks)
        frame = model.frame(model.payload_frame)
        placement = frame.placement.detach().cpu().numpy()
        self._payload = (frame.body, placement[:3, :3], placement[:3, 3])
        self.base = {b.names[1]: float(model.get_parameter(b.names[1])) for b in self.blocks if b.kind == "lever"}

    # ------------------------------------------------------------------ layout
    def _add(self, kind, names, nt, np_, bounds, joint=-1):
        t0, p0 = sum(b.nt for b in self.blocks), sum(b.np_ for b in self.blocks)
        self.blocks.append(RegressionBlock(kind, tuple(names), t0, nt, p0, np_, joint))
        for low, high in bounds:
            self._lower.append(low)
            self._upper.append(high)

    def _add_payload(self, model):
        mass_bounds = scalar_bounds("payload.mass", self.bounds)
        self._add("payload", ("payload.mass", "payload.com"), 4, 10, [mass_bounds] + [(-np.inf, np.inf)] * 3)

    def _add_spring(self, model):
        for law, name, _ in model.spring_elements():
            joint = model.joint_index(name) if law == "torsion" else model.spring_joints[self._lever_index(model, name)]
            keys = ("stiffness", "offset") if law == "lever" else ("stiffness", "offset", "damping")
            if law == "torsion" and "damping" in self.groups:
                keys = keys[:2]  # the same dashpot as the joint's damping: that coordinate carries it
            names = [f"{name}.spring.{key}" for key in keys]
            self._add(law, names, len(keys), 3 if law == "lever" else len(keys),
                      [scalar_bounds(n, self.bounds) for n in names], joint)

    @staticmethod
    def _lever_index(model, name):
        levers = [n for law, n, _ in model.spring_elements() if law == "lever"]
        return levers.index(name)

    def _add_damping(self, model):
        for j, joint in enumerate(model.joint_names):
            self._add("damping", (f"{joint}.damping",), 1, 1, [scalar_bounds(f"{joint}.damping", self.bounds)], j)

    def _add_friction(self, model):
        for j, joint in enumerate(model.joint_names):
            self._add("friction", (f"{joint}.friction",), 1, 1, [scalar_bounds(f"{joint}.friction", self.bounds)], j)

    def box(self):
        """``(lower, upper)`` (P,) of a fit: the plausibility bounds, lever offsets within OFFSET_TRUST of their base."""
        lower, upper = self.lower.copy(), self.upper.copy()
        for b in self.blocks:
            if b.kind == "lever":
                base = self.base[b.names[1]]
                lower[b.t0 + 1] = max(lower[b.t0 + 1], base - OFFSET_TRUST)
                upper[b.t0 + 1] = min(upper[b.t0 + 1], base + OFFSET_TRUST)
        return lower, upper

    def coordinate_names(self):
        """A name per coordinate of theta."""
        out = []
        for b in self.blocks:
            out += (["payload.mass"] + [f"payload.first_moment[{k}]" for k in range(3)]) if b.kind == "payload" else list(b.names)
        return out

    def block_of(self):
        """Index of the block of every coordinate, shape (P,)."""
        return np.concatenate([np.full(b.nt, i) for i, b in enumerate(self.blocks)])

    # ------------------------------------------------------------------ maps
    def theta_of(self, model):
        """Coordinates of ``model``'s values, shape (P,) (a zero payload starts at PAYLOAD_START_MASS when ``start``)."""
        theta = []
        for b in self.blocks:
            if b.kind == "payload":
                mass = float(model.params.payload_mass)
                theta += [mass] + list(mass * model.params.payload_com.detach().cpu().numpy())
            elif b.kind == "torsion" and len(b.names) >= 2:
                theta += [float(model.get_parameter(n)) for n in b.names]
            else:
                theta += [float(model.get_parameter(n)) for n in b.names]
        return np.array(theta, float)

    def start(self, model):
        """Where a fit starts: the model's coordinates, a zero payload at PAYLOAD_START_MASS, inside the bounds."""
        theta = self.theta_of(model)
        for b in self.blocks:
            if b.kind == "payload" and theta[b.t0] < PAYLOAD_START_MASS:
                theta[b.t0 : b.t0 + 4] = [PAYLOAD_START_MASS] + list(PAYLOAD_START_MASS * model.params.payload_com.detach().cpu().numpy())
        return np.clip(theta, self.lower, self.upper)

    def phi(self, theta):
        """Lifted parameters phi (P_phi,) and their Jacobian d phi / d theta (P_phi, P)."""
        theta = np.asarray(theta)
        phi = np.zeros(self.phi_size, dtype=theta.dtype)
        jac = np.zeros((self.phi_size, self.size), dtype=theta.dtype)
        for b in self.blocks:
            t, p = theta[b.t0 : b.t0 + b.nt], slice(b.p0, b.p0 + b.np_)
            if b.kind == "payload":
                phi[p], jac[p, b.t0 : b.t0 + 4] = _payload_phi(t, *self._payload[1:])
            elif b.kind == "lever":
                k, d = t[0], t[1] - self.base[b.names[1]]
                phi[p] = [k, k * d, k * d * d]
                jac[p, b.t0 : b.t0 + 2] = [[1.0, 0.0], [d, k], [d * d, 2 * k * d]]
            elif b.kind == "torsion":
                phi[p] = [t[0], t[0] * t[1]] + list(t[2:])
                jac[b.p0, b.t0] = 1.0
                jac[b.p0 + 1, b.t0 : b.t0 + 2] = [t[1], t[0]]
                if b.nt == 3:
                    jac[b.p0 + 2, b.t0 + 2] = 1.0
            else:
                phi[p], jac[b.p0, b.t0] = t, 1.0
        return phi, jac

    def physical(self, theta):
        """``(values, jacobian (Q, P), layout)`` of the named parameters (the delta method's arguments)."""
        theta = np.asarray(theta, float)
        value, rows, layout = [], [], []
        for b in self.blocks:
            if b.kind == "payload":
                m = max(theta[b.t0], PAYLOAD_MIN_MASS)
                h = theta[b.t0 + 1 : b.t0 + 4]
                jac = np.zeros((4, self.size))
                jac[0, b.t0] = 1.0
                jac[1:, b.t0] = -h / m**2
                jac[1:, b.t0 + 1 : b.t0 + 4] = np.eye(3) / m
                value += [theta[b.t0]] + list(h / m)
                rows.append(jac)
                layout += [("payload.mass", ()), ("payload.com", (3,))]
                continue
            for i, name in enumerate(b.names):
                jac = np.zeros((1, self.size))
                jac[0, b.t0 + i] = 1.0
                value.append(theta[b.t0 + i])
                rows.append(jac)
                layout.append((name, ()))
        return np.array(value), np.concatenate(rows), layout

    def model_at(self, model, theta):
        """``model`` with the parameters of ``theta``."""
        values, _, layout = self.physical(theta)
        out, start = {}, 0
        for name, shape in layout:
            size = int(np.prod(shape)) if shape else 1
            out[name] = values[start : start + size].reshape(shape)
            start += size
        return model.with_parameters(out)

    def rebase(self, theta, threshold):
        """Move every lever spring's expansion point to its offset in ``theta`` when it moved more
        than ``threshold`` [rad]; returns the (P_phi, P_phi) map ``T`` with ``phi_old = T phi_new``
        (the accumulated statistics transform as ``T^T H T``, ``T^T g``), or None when none moved."""
        transform = np.eye(self.phi_size)
        moved = False
        for b in self.blocks:
            if b.kind != "lever":
                continue
            delta = float(theta[b.t0 + 1]) - self.base[b.names[1]]
            if abs(delta) <= threshold:
                continue
            p = b.p0
            transform[p : p + 3, p : p + 3] = [[1.0, 0.0, 0.0], [delta, 1.0, 0.0], [delta**2, 2 * delta, 1.0]]
            self.base[b.names[1]] += delta
            moved = True
        return transform if moved else None

    # ------------------------------------------------------------------ rows
    def _base_model(self, model):
        """``(base, fast, parameters, phi)``: ``model`` with every lever offset at its expansion point
        (so that A phi is exact there), its compiled snapshot, its inertial parameters (n, 10) and
        the lifted parameters of its values (P_phi,); the last ones are reused while neither the
        model nor an expansion point changed."""
        key = (id(model), tuple(self.base.values()))
        if getattr(self, "_base_key", None) != key:
            base = model.with_parameters(dict(self.base)) if self.base else model
            with torch.inference_mode():
                parameters = inertial_parameters(base)
            self._base_key = key
            self._base = (base, FastDynamics.from_model(base), parameters, self.phi(self.theta_of(base))[0],
                          model)  # model: kept alive for its id
        return self._base[:4]

    def rows(self, model, q, qd, qdd, tau):
        """Regression rows of samples: ``A`` (N, n, P_phi) and ``b = tau - known`` (N, n) [N·m].

        ``A`` and ``b`` do not depend on the values of the estimated parameters in ``model``
        (their torques are ``A phi``, taken out of ``known``): a caller may pass the same model
        for every chunk, and the snapshots of its base are then built once.

        Args:
            model: Current model (every parameter not estimated is read from it).
            q, qd, qdd: Filtered joint positions [rad], velocities [rad/s], accelerations
                [rad/s²], numpy (N, n).
            tau: Joint torques the robot applied [N·m], (N, n) (efforts already less their bias).
        """
        base, fast, parameters, phi = self._base_model(model)
        y = regressor_array(fast, q, qd, qdd)  # (N, n, n, 10)
        like = model.params.mass
        q_t, qd_t, qdd_t, y_t = (torch.as_tensor(x, dtype=like.dtype, device=like.device) for x in (q, qd, qdd, y))
        with torch.inference_mode():
            full = (regressor_rnea(y_t, base, qdd_t, parameters) - passive_torques(base, q_t, qd_t)).cpu().numpy()
        a = np.zeros(q.shape + (self.phi_size,))
        for b in self.blocks:
            j = b.joint
            if b.kind == "payload":
                a[:, :, b.p0 : b.p0 + 10] = y[:, :, self._payload[0], :]
            elif b.kind == "lever":
                a[:, j, b.p0 : b.p0 + 3] = self._lever_columns(base, q_t, b)
            elif b.kind == "torsion":
                a[:, j, b.p0], a[:, j, b.p0 + 1] = q[:, j], -1.0
                if b.nt == 3:
                    a[:, j, b.p0 + 2] = qd[:, j]
            elif b.kind == "damping":
                a[:, j, b.p0] = qd[:, j]
            else:
                a[:, j, b.p0] = np.tanh(qd[:, j] / DEFAULT_FRICTION_VELOCITY_SCALE)
        known = full - a @ phi
        return a, np.asarray(tau, float) - known

    def _lever_columns(self, base, q, block):
        """(N, 3) columns ``(-s, ds/dq, -d2s/dq2 / 2)`` of a lever spring at unit stiffness, its joint's torque.

        The offset enters the lever law as ``theta - offset``: its derivatives are the joint
        angle's, taken by central differences of :func:`~diffsim_ros.dynamics.springs.spring_torques`
        (step ``_LEVER_STEP``: truncation and rounding both below 1e-6 of the torque).
        """
        key = (id(base), block.names[0])
        if getattr(self, "_unit_key", None) != key:  # the unit-stiffness model of the last base
            unit = {f"{n}.spring.stiffness": 0.0 for law, n, _ in base.spring_elements()}
            unit[block.names[0]] = 1.0
            self._unit_key, self._unit = key, base.with_parameters(unit)
        model = self._unit
        j = block.joint
        shift = torch.zeros_like(q)
        shift[:, j] = _LEVER_STEP
        with torch.inference_mode():
            s_minus, s_mid, s_plus = spring_torques(model, torch.stack([q - shift, q, q + shift]))[..., j]
        d1 = (s_plus - s_minus) / (2 * _LEVER_STEP)
        d2 = (s_plus - 2 * s_mid + s_minus) / _LEVER_STEP**2
        return torch.stack([-s_mid, d1, -0.5 * d2], -1).cpu().numpy()
