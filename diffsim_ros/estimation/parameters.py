"""Parameter groups -> optimizer coordinates, with physical bounds and parametrizations.

Groups (issue #4): ``payload`` (payload.mass, payload.com), ``spring`` (every spring
element: stiffness, rest length or offset, and damping where the law has one; optionally the
geometry: lever l1, l2, point spring ends), ``damping``, ``friction``, ``armature`` (each
joint's reflected rotor inertia), ``inertia``
(mass, COM and inertia of every body through the log-Cholesky parametrization, so every
iterate is physically consistent), ``camera`` (camera frame in the base frame), and
``link_lengths`` (joint origin translations).

Coordinates stay inside the plausibility bounds of :mod:`diffsim_ros.model.plausibility`
(masses, stiffness, damping, friction >= 0 and below their maxima) through the optimizers'
box constraints; the camera pose is optimized as a local perturbation ``T = T0 * exp(delta)``
around a closed-form initial guess.
"""

from dataclasses import dataclass

import numpy as np
import torch

from diffsim_ros.dynamics.spatial import matrix_to_quat, so3_exp
from diffsim_ros.model.inertia import inertial_from_log_cholesky, log_cholesky_from_inertial
from diffsim_ros.model.plausibility import DEFAULT_BOUNDS, scalar_bounds
from diffsim_ros.vocabulary import GROUPS

__all__ = ["GROUPS", "ParameterBlock", "ParameterSpace", "camera_pose_vector"]

PAYLOAD_MIN_MASS = 1e-6
"""[kg] Denominator floor of com = (m c) / m while the payload mass passes through zero."""
PAYLOAD_START_MASS = 0.1
"""[kg] Initial payload mass when the nominal model carries none."""
_INF = np.inf


@dataclass(frozen=True)
class ParameterBlock:
    """A contiguous run of optimizer coordinates and what they mean.

    Attributes:
        kind: ``"direct"`` (coordinates are the named model parameter), ``"payload"``
            (mass [kg] and first moment m*c [kg·m]: gravity is linear in them, so the COM
            stays identifiable even from a zero initial mass), ``"log_cholesky"`` (10
            coordinates -> mass, COM, inertia of one body) or ``"camera"`` (6 coordinates:
            translation [m] and rotation vector [rad] of a perturbation of the initial pose).
        names: Parameter names this block determines.
        size: Number of coordinates.
        lower: Lower bounds, shape (size,).
        upper: Upper bounds, shape (size,).
        body: Body index for ``"log_cholesky"`` blocks.
    """

    kind: str
    names: tuple
    size: int
    lower: np.ndarray
    upper: np.ndarray
    body: int | None = None


def camera_pose_vector(pose):
    """``[x, y, z, qx, qy, qz, qw]`` of a (..., 4, 4) pose tensor (ROS quaternion order)."""
    quat = matrix_to_quat(pose[..., :3, :3])  # (w, x, y, z)
    return torch.cat([pose[..., :3, 3], quat[..., 1:], quat[..., :1]], dim=-1)


class ParameterSpace:
    """Maps a flat coordinate vector to a model (and camera pose) differentiably.

    Args:
        model: Nominal RobotModel (initial values).
        groups: Iterable of group names from :data:`GROUPS`.
        camera_guess: Initial camera pose in the base frame, (4, 4), required for ``camera``.
        spring_geometry: Also identify each lever spring's l1 and l2 (as the paper does) and
            each point spring's ends.
        bounds: :class:`~diffsim_ros.model.plausibility.PlausibilityBounds` of the box
            constraints.

    Raises:
        ValueError: Unknown groups, or a group that the model cannot have (e.g. ``spring``
            without spring elements, ``camera`` without a guess).
    """

    def __init__(self, model, groups, camera_guess=None, spring_geometry=False, bounds=DEFAULT_BOUNDS):
        groups = tuple(dict.fromkeys(groups))
        unknown = [g for g in groups if g not in GROUPS]
        if unknown:
            raise ValueError(f"unknown parameter groups {unknown}; choose from {list(GROUPS)}")
        if not groups:
            raise ValueError("no parameter groups to estimate")
        self.model = model
        self.groups = groups
        self.bounds = bounds
        self.blocks = []
        x0 = []
        for group in groups:
            for block, initial in getattr(self, f"_blocks_{group}")(model, spring_geometry, camera_guess):
                self.blocks.append(block)
                x0.append(np.asarray(initial, dtype=np.float64).reshape(block.size))
        self.x0 = np.concatenate(x0)
        self.lower = np.concatenate([b.lower for b in self.blocks])
        self.upper = np.concatenate([b.upper for b in self.blocks])
        self.x0 = np.clip(self.x0, self.lower, self.upper)
        self.nominal = self._nominal_coordinates(model)
        self._camera_guess = None if camera_guess is None else torch.as_tensor(
            np.asarray(camera_guess, dtype=np.float64), dtype=model.dtype, device=model.device
        )

    def _nominal_coordinates(self, model):
        """The nominal model's own coordinates, clipped into the bounds: ``x0`` but for a zero
        payload, which ``x0`` starts at ``PAYLOAD_START_MASS``. Where a block the data do not
        determine is held (the reported model keeps it nominal: so must the fit of the rest)."""
        nominal, start = self.x0.copy(), 0
        for block in self.blocks:
            if block.kind == "payload":
                mass = float(model.params.payload_mass)
                nominal[start : start + 4] = np.concatenate([[mass], mass * model.params.payload_com.detach().cpu().numpy()])
            start += block.size
        return np.clip(nominal, self.lower, self.upper)

    # ------------------------------------------------------------------ block builders
    def _direct(self, model, name):
        value = model.get_parameter(name).detach().cpu().numpy()
        size = max(1, value.size)
        lower, upper = scalar_bounds(name, self.bounds) or (-_INF, _INF)
        return ParameterBlock("direct", (name,), size, np.full(size, lower), np.full(size, upper)), value

    def _blocks_payload(self, model, spring_geometry, camera_guess):
        # At exactly zero mass no prediction depends on the COM; start from a small mass.
        mass = max(float(model.params.payload_mass), PAYLOAD_START_MASS)
        moment = mass * model.params.payload_com.detach().cpu().numpy()
        low, high = scalar_bounds("payload.mass", self.bounds)
        lower = np.array([low, -_INF, -_INF, -_INF])
        upper = np.array([high, _INF, _INF, _INF])
        block = ParameterBlock("payload", ("payload.mass", "payload.com"), 4, lower, upper)
        yield block, np.concatenate([[mass], moment])

    _SPRING_KEYS = {
        "lever": (("stiffness", "offset"), ("l1", "l2")),
        "torsion": (("stiffness", "offset", "damping"), ()),
        "point": (("stiffness", "rest_length", "damping"), ("point_a", "point_b")),
    }
    """Law -> (keys always identified, geometry keys identified with ``spring_geometry``)."""

    def _blocks_spring(self, model, spring_geometry, camera_guess):
        if not model.has_springs:
            raise ValueError("group 'spring' requested but the model has no spring elements")
        for law, name, _ in model.spring_elements():
            keys, geometry = self._SPRING_KEYS[law]
            for key in keys + (geometry if spring_geometry else ()):
                if law == "torsion" and key == "damping" and "damping" in self.groups:
                    continue  # the same dashpot as the joint's damping: that coordinate carries it
                yield self._direct(model, f"{name}.spring.{key}")

    def _blocks_damping(self, model, spring_geometry, camera_guess):
        for joint in model.joint_names:
            yield self._direct(model, f"{joint}.damping")

    def _blocks_friction(self, model, spring_geometry, camera_guess):
        for joint in model.joint_names:
            yield self._direct(model, f"{joint}.friction")

    def _blocks_armature(self, model, spring_geometry, camera_guess):
        for joint in model.joint_names:
            yield self._direct(model, f"{joint}.armature")

    def _blocks_effort_bias(self, model, spring_geometry, camera_guess):
        for joint in model.joint_names:
            yield self._direct(model, f"{joint}.effort_bias")

    def _blocks_effort_delay(self, model, spring_geometry, camera_guess):
        yield self._direct(model, "efforts.delay")

    def _blocks_link_lengths(self, model, spring_geometry, camera_guess):
        for joint in model.joint_names[1:]:  # the first origin only moves the whole arm
            yield self._direct(model, f"{joint}.origin.xyz")

    def _blocks_inertia(self, model, spring_geometry, camera_guess):
        p = model.params
        for body, link in enumerate(model.body_names):
            theta = log_cholesky_from_inertial(p.mass[body], p.com[body], p.inertia[body]).detach().cpu().numpy()
            names = (f"{link}.mass", f"{link}.com", f"{link}.inertia")
            yield ParameterBlock("log_cholesky", names, 10, np.full(10, -_INF), np.full(10, _INF), body), theta

    def _blocks_camera(self, model, spring_geometry, camera_guess):
        if camera_guess is None:
            raise ValueError("group 'camera' needs an initial camera pose (camera_guess)")
        yield ParameterBlock("camera", ("camera.pose",), 6, np.full(6, -_INF), np.full(6, _INF)), np.zeros(6)

    # ------------------------------------------------------------------ mapping
    @property
    def size(self):
        return self.x0.size

    def coordinate_names(self):
        """A readable name per coordinate (for identifiability reports)."""
        names = []
        for block in self.blocks:
            if block.kind == "direct" and block.size == 1:
                names.append(block.names[0])
            elif block.kind == "log_cholesky":
                names += [f"{block.names[0].rsplit('.', 1)[0]}.log_cholesky[{k}]" for k in range(10)]
            elif block.kind == "payload":
                names += ["payload.mass", "payload.first_moment[0]", "payload.first_moment[1]", "payload.first_moment[2]"]
            else:
                names += [f"{block.names[0]}[{k}]" for k in range(block.size)]
        return names

    def _split(self, x):
        out, start = [], 0
        for block in self.blocks:
            out.append((block, x[start : start + block.size]))
            start += block.size
        return out

    def apply(self, x):
        """Model and camera pose for coordinates ``x`` (tensor (P,), keeps autograd).

        Returns:
            ``(model, camera_pose)``; camera_pose is a (4, 4) tensor or None.
        """
        values, camera = {}, None
        for block, chunk in self._split(x):
            if block.kind == "direct":
                values[block.names[0]] = chunk if block.size > 1 else chunk[0]
            elif block.kind == "payload":
                values["payload.mass"] = chunk[0]
                values["payload.com"] = chunk[1:] / chunk[0].clamp_min(PAYLOAD_MIN_MASS)
            elif block.kind == "log_cholesky":
                mass, com, inertia = inertial_from_log_cholesky(chunk)
                values.update(dict(zip(block.names, (mass, com, inertia))))
            else:
                camera = self._camera_pose(chunk)
        return self.model.with_parameters(values), camera

    def _camera_pose(self, delta):
        guess = self._camera_guess
        rot = guess[:3, :3] @ so3_exp(delta[3:])
        pos = guess[:3, 3] + delta[:3]
        top = torch.cat([rot, pos[:, None]], dim=1)
        return torch.cat([top, guess[3:4]], dim=0)

    def physical(self, x):
        """Named physical values determined by ``x``: dict name -> tensor (keeps autograd)."""
        model, camera = self.apply(x)
        out = {}
        for block in self.blocks:
            for name in block.names:
                out[name] = camera_pose_vector(camera) if name == "camera.pose" else model.get_parameter(name)
        return out
