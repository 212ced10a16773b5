"""Spring elements: laws as energy gradients, damping, compiled kernels, parameters, configs, files.

The model used throughout is Baxter's left arm with, besides its lever shoulder spring, a
torsion spring on w1, an elastic band (tension only) from the upper shoulder to the lower
forearm that goes slack and taut over the sampled states, and a gas spring from the base to
the upper elbow.
"""

import math

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.dynamics.fast import FastDynamics
from diffsim_ros.estimation.parameters import ParameterSpace
from diffsim_ros.io.calibration import Calibration, apply_calibration, load_calibration, write_calibration
from diffsim_ros.io.urdf_export import export_calibrated_urdf
from diffsim_ros.model import (
    LeverSpring,
    PointSpring,
    RobotModel,
    RobotModelError,
    TorsionSpring,
    load_robot_config,
    plausibility_violations,
)
from diffsim_ros.model.plausibility import parameter_kind, scalar_bounds
from diffsim_ros.sim import RigidBodySimulator
from oracles import BAXTER_LEFT, BAXTER_URDF
from test_pbd_references import chain_urdf

GRADIENT_TOL = 1e-10  # [N·m] torques vs -dV/dq by autograd (float64 rounding of sums of ~50 N·m)
FINITE_DIFFERENCE_TOL = 1e-6  # [N·m] torques vs central differences of V with step 1e-6
FD_STEP = 1e-6  # [rad or m]
KERNEL_TOL = 1e-12  # [N·m] compiled kernel vs torch
# The compiled lever law against the torch numbers: a few ulp of sin/cos/sqrt. numba may pick
# vectorized (SVML) or scalar libm transcendental functions depending on the context a kernel is
# first compiled in; 3.4e-15 relative was seen with one cache (4 eps before). A law change is
# orders of magnitude larger.
FAST_LAW_RTOL = 1e-12
SAMPLES = 40  # random states per comparison

TORSION = TorsionSpring("left_w1", stiffness=3.0, offset=0.2, damping=0.05)
BAND = PointSpring("band", "left_upper_shoulder", (0.05, 0.02, 0.1), "left_lower_forearm", (0.0, 0.03, 0.05),
                   stiffness=300.0, rest_length=0.75, damping=20.0, tension_only=True)
GAS = PointSpring("gas", "base", (0.1, 0.2, 0.3), "left_upper_elbow", (0.02, 0.0, 0.1),
                  stiffness=500.0, rest_length=0.3, damping=5.0)


def baxter():
    return load_robot_config(BAXTER_LEFT).build_model()


def sprung_baxter(*extra):
    """Baxter's left arm with its lever spring plus ``extra`` (default: torsion, band, gas spring)."""
    model = baxter()
    return model.with_springs(model.springs + (extra or (TORSION, BAND, GAS)))


def states(model, count, seed, speed=1.0):
    """Random joint positions within 60 % of the limits and velocities, each (count, n)."""
    rng = np.random.default_rng(seed)
    mid, half = 0.5 * (model.lower + model.upper), 0.3 * (model.upper - model.lower)
    q = mid + half * torch.as_tensor(rng.uniform(-1, 1, (count, model.nq)), dtype=model.dtype)
    qd = torch.as_tensor(rng.uniform(-speed, speed, (count, model.nq)), dtype=model.dtype)
    return q, qd


LAWS = {
    "lever": lambda: baxter(),
    "torsion": lambda: baxter().with_springs([TORSION]),
    "band": lambda: baxter().with_springs([BAND]),
    "gas": lambda: baxter().with_springs([GAS]),
    "prismatic": lambda: RobotModel.from_urdf(
        chain_urdf([0.3, 0.4, 0.2], [1.0, 1.0, 0.5], axes=[(0, 0, 1), (1, 0, 0), (0, 1, 0)], kinds=["revolute", "prismatic", "revolute"])
    ).with_springs([
        TorsionSpring("j2", stiffness=40.0, offset=0.05, damping=2.0),
        PointSpring("p", "base", (0.1, 0.2, 0.0), "link3", (0.1, 0.0, 0.05), stiffness=200.0, rest_length=0.2, damping=3.0),
    ]),
}


def test_band_is_slack_and_taut_over_the_samples():
    model = sprung_baxter()
    q, _ = states(model, SAMPLES, 0)
    band = dyn.point_spring_lengths(model, q)[:, 0]
    assert bool((band < BAND.rest_length).any()) and bool((band > BAND.rest_length).any())


@pytest.mark.parametrize("law", list(LAWS))
def test_torques_are_minus_the_energy_gradient(law):
    model = LAWS[law]()
    q, _ = states(model, SAMPLES, 1)
    tau = dyn.spring_torques(model, q)
    assert float(tau.abs().max()) > 0.1  # the element acts
    qs = q.clone().requires_grad_()
    (grad,) = torch.autograd.grad(dyn.spring_potential_energy(model, qs).sum(), qs)
    torch.testing.assert_close(tau, -grad, atol=GRADIENT_TOL, rtol=0)
    eye = torch.eye(model.nq, dtype=model.dtype) * FD_STEP
    energy = lambda x: dyn.spring_potential_energy(model, x)  # noqa: E731
    fd = torch.stack([(energy(q + e) - energy(q - e)) / (2 * FD_STEP) for e in eye], dim=-1)
    torch.testing.assert_close(tau, -fd, atol=FINITE_DIFFERENCE_TOL, rtol=0)


@pytest.mark.parametrize("law", ["torsion", "band", "gas", "prismatic"])
def test_damping_is_the_rayleigh_dissipation_gradient_and_dissipates(law):
    # Rayleigh dissipation R = 1/2 qd^T C(q) qd: the damping torque is -dR/dqd, linear in qd
    # with a symmetric positive semi-definite C, and the split reproduces it exactly.
    model = LAWS[law]()
    q, qd = states(model, SAMPLES, 2)
    damping = dyn.spring_torques(model, q, qd) - dyn.spring_torques(model, q)
    assert float(damping.abs().max()) > 1e-3
    assert bool(((damping * qd).sum(-1) <= 1e-12).all())
    jacobian = torch.autograd.functional.jacobian
    matrix = torch.stack([jacobian(lambda v: dyn.spring_torques(model, a, v), v) for a, v in zip(q, qd)])
    torch.testing.assert_close(matrix, matrix.transpose(-1, -2), atol=GRADIENT_TOL, rtol=0)
    torch.testing.assert_close(damping, (matrix @ qd[..., None])[..., 0], atol=GRADIENT_TOL, rtol=0)
    explicit, slope = dyn.spring_damping_split(model, q, qd)
    torch.testing.assert_close(explicit - slope * qd, damping, atol=GRADIENT_TOL, rtol=0)
    torch.testing.assert_close(slope, -torch.diagonal(matrix, dim1=-2, dim2=-1), atol=GRADIENT_TOL, rtol=0)


def test_slack_cable_exerts_nothing():
    model = baxter().with_springs([BAND])
    q, qd = states(model, SAMPLES, 3)
    slack = dyn.point_spring_lengths(model, q)[:, 0] <= BAND.rest_length
    assert bool(slack.any())
    assert float(dyn.spring_torques(model, q[slack], qd[slack]).abs().max()) == 0.0
    assert float(dyn.spring_potential_energy(model, q[slack]).abs().max()) == 0.0


def test_lever_law_numbers_are_unchanged():
    # Baxter's spring exactly as the law was implemented before the spring elements existed.
    model = baxter()
    q, qd = states(model, SAMPLES, 4)
    p = model.params
    phi = math.pi - p.spring_alpha1 - p.spring_offset + q[:, 1:2]
    length = torch.sqrt(p.spring_l1**2 + p.spring_l2**2 - 2.0 * p.spring_l1 * p.spring_l2 * torch.cos(phi))
    expected = torch.zeros_like(q)
    expected[:, 1:2] = -p.spring_stiffness * (length - p.spring_rest_length) * (p.spring_l1 * p.spring_l2 * torch.sin(phi) / length)
    assert torch.equal(dyn.spring_torques(model, q), expected)
    assert torch.equal(dyn.spring_torques(model, q, qd), expected)
    # The compiled kernel keeps its own (unchanged) association of the same products.
    fast = FastDynamics.from_model(model)
    for a, b in zip(q, expected):
        np.testing.assert_allclose(fast.spring_torques(a.numpy()), b.numpy(), rtol=FAST_LAW_RTOL, atol=0)


@pytest.mark.parametrize("law", ["all", "prismatic"])
def test_fast_kernel_equals_torch(law):
    model = sprung_baxter() if law == "all" else LAWS[law]()
    fast = FastDynamics.from_model(model)
    q, qd = states(model, SAMPLES, 5)
    for a, b in zip(q, qd):
        elastic = fast.spring_torques(a.numpy())
        np.testing.assert_allclose(elastic, dyn.spring_torques(model, a).numpy(), atol=KERNEL_TOL, rtol=0)
        total = fast.spring_torques(a.numpy(), b.numpy())
        np.testing.assert_allclose(total, dyn.spring_torques(model, a, b).numpy(), atol=KERNEL_TOL, rtol=0)


def test_torques_are_differentiable_in_every_spring_parameter():
    model = sprung_baxter()
    q, qd = states(model, 6, 6)
    names = [n for n in model.parameter_names() if ".spring." in n and not n.startswith("left_s1")]
    assert {"band.spring.rest_length", "gas.spring.damping", "left_w1.spring.damping", "gas.spring.point_b"} <= set(names)
    values = [model.get_parameter(n).detach().clone().requires_grad_() for n in names]

    def torques(*x):
        candidate = model.with_parameters(dict(zip(names, x)))
        return dyn.spring_torques(candidate, q, qd), dyn.spring_potential_energy(candidate, q)

    assert torch.autograd.gradcheck(torques, values)
    lever = [model.get_parameter(f"left_s1.spring.{k}").detach().clone().requires_grad_() for k in ("stiffness", "offset")]
    check = lambda k, o: dyn.spring_torques(model.with_parameters({"left_s1.spring.stiffness": k, "left_s1.spring.offset": o}), q)  # noqa: E731
    assert torch.autograd.gradcheck(check, lever)


def test_rigid_simulator_takes_spring_damping_implicitly():
    # A very stiff dashpot on a light wrist joint: explicit damping would diverge at this
    # step (h c / I >> 2); the implicit diagonal keeps the step stable and dissipative.
    stiff = TorsionSpring("left_w2", stiffness=0.0, damping=50.0)
    model = baxter().with_springs([stiff]).replace(gravity=torch.zeros(3, dtype=torch.float64))
    q0, qd0 = torch.zeros(7, dtype=torch.float64), torch.zeros(7, dtype=torch.float64)
    qd0[6] = 1.0
    with torch.no_grad():
        _, qd = RigidBodySimulator(model, 0.01).rollout(q0, qd0, torch.zeros(20, 7, dtype=torch.float64))
    assert float(qd[:, 6].abs().max()) < 1.0 and float(qd[-1, 6].abs()) < 1e-3


# ---------------------------------------------------------------- names, groups, files


def test_parameter_names_and_values_round_trip():
    model = sprung_baxter()
    names = model.parameter_names()
    for name in ("left_w1.spring.offset", "band.spring.stiffness", "band.spring.point_a", "gas.spring.rest_length"):
        assert name in names
    assert "left_w1.spring.alpha1" not in names and "band.spring.offset" not in names
    assert [s.name for s in model.springs] == ["left_s1", "left_w1", "band", "gas"]
    assert model.springs[2] == BAND and model.springs[1] == TORSION
    updated = model.with_parameters({"gas.spring.point_a": [0.1, 0.2, 0.35], "left_w1.spring.damping": 0.2})
    assert updated.springs[3].point_a == (0.1, 0.2, 0.35) and updated.springs[1].damping == 0.2
    with pytest.raises(RobotModelError, match="needs shape"):
        model.with_parameters({"gas.spring.point_a": 0.1})


def test_spring_names_are_classified_by_plausibility():
    assert parameter_kind("gas.spring.damping") == "spring.damping"
    assert parameter_kind("left_w1.spring.damping") == "spring.damping"
    assert parameter_kind("left_w1.damping") == "damping"
    assert scalar_bounds("gas.spring.damping")[0] == 0.0
    assert scalar_bounds("band.spring.rest_length")[0] == 0.0
    reasons = plausibility_violations({"gas.spring.damping": -1.0, "band.spring.point_a": [9.0, 0.0, 0.0], "gas.spring.point_b": [0.0, 0.1]})
    assert "outside" in reasons["gas.spring.damping"] and "beyond" in reasons["band.spring.point_a"]
    assert "3 values" in reasons["gas.spring.point_b"]
    assert plausibility_violations({f"gas.spring.{k}": v for k, v in (("stiffness", 500.0), ("damping", 5.0), ("point_a", [0.1, 0.2, 0.3]))}) == {}


def test_spring_group_covers_every_element_with_plausibility_bounds():
    model = sprung_baxter()
    space = ParameterSpace(model, ("spring",))
    names = [b.names[0] for b in space.blocks]
    assert names == [
        "left_s1.spring.stiffness", "left_s1.spring.offset",
        "left_w1.spring.stiffness", "left_w1.spring.offset", "left_w1.spring.damping",
        "band.spring.stiffness", "band.spring.rest_length", "band.spring.damping",
        "gas.spring.stiffness", "gas.spring.rest_length", "gas.spring.damping",
    ]
    lower = dict(zip(names, space.lower))
    assert lower["left_s1.spring.offset"] == -math.pi and lower["gas.spring.damping"] == 0.0
    assert lower["band.spring.rest_length"] == 0.0 and lower["left_w1.spring.stiffness"] == 0.0
    # The torsion dashpot is the joint's damping: with that group it is not a second coordinate.
    both = [n for b in ParameterSpace(model, ("spring", "damping")).blocks for n in b.names]
    assert "left_w1.spring.damping" not in both and "left_w1.damping" in both
    geometry = [n for b in ParameterSpace(model, ("spring",), spring_geometry=True).blocks for n in b.names]
    assert {"left_s1.spring.l1", "band.spring.point_a", "gas.spring.point_b"} <= set(geometry)
    with pytest.raises(ValueError, match="no spring elements"):
        ParameterSpace(baxter().with_springs([]), ("spring",))


def test_calibration_file_and_urdf_export_carry_every_spring(tmp_path):
    nominal = sprung_baxter()
    values = {"band.spring.rest_length": 0.7, "gas.spring.damping": 7.5, "left_w1.spring.offset": 0.1,
              "gas.spring.point_a": [0.1, 0.2, 0.31]}
    path = write_calibration(tmp_path / "calibration.yaml", Calibration("baxter_left", values, groups=("spring",)))
    calibrated = apply_calibration(nominal, load_calibration(path))
    for name, value in values.items():
        np.testing.assert_allclose(calibrated.get_parameter(name).numpy(), value)
    out = export_calibrated_urdf(calibrated, nominal, BAXTER_URDF, tmp_path / "calibrated.urdf")
    text = out.read_text()
    assert "not expressible in URDF" in text
    assert "band: point cable (tension only) from left_upper_shoulder" in text and "rest_length=0.7 m" in text
    assert "left_w1: torsion stiffness=3 offset=0.1" in text and "gas: point spring from base" in text
    RobotModel.from_urdf(out, base_link="base", tip_link="left_hand")  # still a valid URDF


# ---------------------------------------------------------------- configs

CONFIG = """robot:
  urdf: {urdf}
  base_link: base
  tip_link: left_hand
springs:
  left_s1:
    stiffness: 8000.0
  left_w1:
    law: torsion
    stiffness: 3.0
    offset: 0.2
    damping: 0.05
  band:
    law: point
    link_a: left_upper_shoulder
    point_a: [0.05, 0.02, 0.1]
    link_b: left_lower_forearm
    point_b: [0.0, 0.03, 0.05]
    stiffness: 300.0
    rest_length: 0.75
    damping: 20.0
    tension_only: true
"""


def _config(tmp_path, text):
    path = tmp_path / "robot.yaml"
    path.write_text(text.format(urdf=BAXTER_URDF))
    return load_robot_config(path)


def test_config_declares_every_law(tmp_path):
    model = _config(tmp_path, CONFIG).build_model()
    assert model.springs == (LeverSpring("left_s1"), TORSION, BAND)
    assert load_robot_config(BAXTER_LEFT).springs == (LeverSpring("left_s1"),)


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("law: torsion", "law: helical", "unknown spring law 'helical'"),
        ("link_b: left_lower_forearm", "link_b: left_tentacle", "unknown link 'left_tentacle'"),
        ("  left_w1:\n    law: torsion", "  left_w9:\n    law: torsion", "spring on unknown joint 'left_w9'"),
        ("stiffness: 300.0", "stiffness: -300.0", "implausible stiffness"),
        ("damping: 20.0", "damping: -1.0", "implausible damping"),
        ("rest_length: 0.75", "rest_length: long", "'rest_length' must be a finite number"),
        ("point_a: [0.05, 0.02, 0.1]", "point_a: [0.05, 0.02]", "'point_a' must have 3 numbers"),
        ("tension_only: true", "tension_only: 1", "'tension_only' must be true or false"),
        ("    stiffness: 3.0\n", "    stiffness: 3.0\n    alpha1: 0.2\n", "unknown keys ['alpha1'] for law 'torsion'"),
        ("    link_a: left_upper_shoulder\n", "", "law 'point' needs ['link_a']"),
        ("  band:\n", "  left_e1:\n", "the name is a joint's"),
        ("link_b: left_lower_forearm", "link_b: left_upper_shoulder", "move as one body"),
        ("  left_w1:\n    law: torsion\n", "  left_w1:\n    law: torsion\n    joint: left_s1\n", "defined twice"),
        ("    stiffness: 8000.0\n", "    stiffness: true\n", "'stiffness' must be a finite number"),
    ],
)
def test_config_errors_are_named(tmp_path, old, new, words):
    assert old in CONFIG
    with pytest.raises(RobotModelError) as error:
        _config(tmp_path, CONFIG.replace(old, new, 1)).build_model()
    assert words in str(error.value)


def test_direct_construction_errors_are_named():
    with pytest.raises(RobotModelError, match="spring 'x': stiffness must be a finite number"):
        baxter().with_springs([PointSpring("x", "base", (0, 0, 0), "left_hand", (0, 0, 0), float("nan"), 0.1)])
    with pytest.raises(RobotModelError, match="a name needs letters"):
        baxter().with_springs([PointSpring("my band", "base", (0, 0, 0), "left_hand", (0, 0, 0), 1.0, 0.1)])
    with pytest.raises(RobotModelError, match="unknown spring element"):
        baxter().with_springs(["left_s1"])
