"""RobotModel: URDF loading, fixed-joint merging, sub-chains, parameters, bad input."""

import math

import numpy as np
import pytest
import torch

from diffsim_ros import dynamics as dyn
from diffsim_ros.model import (
    JointSpring,
    RobotModel,
    RobotModelError,
    inertial_from_log_cholesky,
    load_robot_config,
    log_cholesky_from_inertial,
    pseudo_inertia,
)
from oracles import BAXTER_LEFT, BAXTER_RIGHT, BAXTER_URDF

MERGE_TOL = 1e-12
ROUNDTRIP_TOL = 1e-10

LEFT_JOINTS = ("left_s0", "left_s1", "left_e0", "left_e1", "left_w0", "left_w1", "left_w2")


def _link(name, mass=None, com=(0, 0, 0), inertia=(1e-3, 0, 0, 1e-3, 0, 1e-3), mesh=False):
    inertial = ""
    if mass is not None:
        ixx, ixy, ixz, iyy, iyz, izz = inertia
        inertial = (
            f'<inertial><origin xyz="{com[0]} {com[1]} {com[2]}"/><mass value="{mass}"/>'
            f'<inertia ixx="{ixx}" ixy="{ixy}" ixz="{ixz}" iyy="{iyy}" iyz="{iyz}" izz="{izz}"/></inertial>'
        )
    visual = '<visual><geometry><mesh filename="package://missing_pkg/meshes/nothing.dae"/></geometry></visual>' if mesh else ""
    return f'<link name="{name}">{inertial}{visual}</link>'


def _joint(name, parent, child, kind="revolute", xyz=(0, 0, 0), rpy=(0, 0, 0), axis=(0, 0, 1), extra=""):
    limit = '<limit lower="-1" upper="1" effort="10" velocity="2"/>' if kind in ("revolute", "prismatic") else ""
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{xyz[0]} {xyz[1]} {xyz[2]}" rpy="{rpy[0]} {rpy[1]} {rpy[2]}"/>'
        f'<axis xyz="{axis[0]} {axis[1]} {axis[2]}"/>{limit}{extra}</joint>'
    )


def _robot(*parts):
    return '<?xml version="1.0"?><robot name="test">' + "".join(parts) + "</robot>"


def _two_link(**overrides):
    parts = dict(
        base=_link("base"),
        l1=_link("l1", 1.0, (0.1, 0, 0)),
        l2=_link("l2", 2.0, (0, 0.1, 0)),
        j1=_joint("j1", "base", "l1"),
        j2=_joint("j2", "l1", "l2", xyz=(0.5, 0, 0), axis=(0, 1, 0)),
    )
    parts.update(overrides)
    return _robot(*parts.values())


def test_baxter_arms_load_with_expected_structure():
    for config, side in ((BAXTER_LEFT, "left"), (BAXTER_RIGHT, "right")):
        model = load_robot_config(config).build_model()
        assert model.joint_names == tuple(j.replace("left", side) for j in LEFT_JOINTS)
        assert model.parents == (-1, 0, 1, 2, 3, 4, 5)
        assert model.payload_frame == f"{side}_hand"
        assert model.frame(f"{side}_hand").body == 6
        assert [s.joint for s in model.springs] == [f"{side}_s1"]
        assert model.dtype == torch.float64
        np.testing.assert_allclose(model.effort_limit.numpy(), [50, 100, 50, 50, 15, 15, 15])
        np.testing.assert_allclose(model.params.damping.numpy(), 0.7)


def test_full_baxter_is_a_branched_tree():
    model = RobotModel.from_urdf(BAXTER_URDF)
    assert model.nq == 15
    roots = [name for name, parent in zip(model.joint_names, model.parents) if parent < 0]
    assert sorted(roots) == ["head_pan", "left_s0", "right_s0"]


def test_fixed_joints_merge_mass_com_and_inertia():
    # l2 is welded to l1 at x = 0.5 with a rotation; the body must carry both inertials.
    xml = _two_link(
        j2=_joint("j2", "l1", "l2", kind="fixed", xyz=(0.5, 0, 0), rpy=(0, 0, math.pi / 2)),
        l2=_link("l2", 2.0, (0, 0.1, 0), inertia=(1e-3, 0, 0, 2e-3, 0, 3e-3)),
    )
    model = RobotModel.from_urdf(xml)
    assert model.joint_names == ("j1",)
    mass, com = model.params.mass[0].item(), model.params.com[0].numpy()
    assert mass == pytest.approx(3.0, abs=MERGE_TOL)
    # l2's COM (0, 0.1, 0) rotated by +90 deg about z -> (-0.1, 0, 0), then shifted by 0.5.
    c2 = np.array([0.4, 0.0, 0.0])
    np.testing.assert_allclose(com, (1.0 * np.array([0.1, 0, 0]) + 2.0 * c2) / 3.0, atol=MERGE_TOL)
    rz = np.array([[0, -1, 0], [1, 0, 0], [0, 0, 1.0]])
    i2 = rz @ np.diag([1e-3, 2e-3, 3e-3]) @ rz.T
    expected = np.diag([1e-3] * 3) + i2
    for m_k, c_k in ((1.0, np.array([0.1, 0, 0])), (2.0, c2)):
        d = c_k - com
        expected += m_k * (d @ d * np.eye(3) - np.outer(d, d))
    got = model.params.inertia[0].numpy()
    np.testing.assert_allclose(got, [expected[0, 0], expected[0, 1], expected[0, 2], expected[1, 1], expected[1, 2], expected[2, 2]], atol=MERGE_TOL)
    assert set(model.frame_names) == {"base", "l1", "l2"}


def test_missing_meshes_never_matter_and_limits_are_kept():
    xml = _two_link(l1=_link("l1", 1.0, (0.1, 0, 0), mesh=True))
    model = RobotModel.from_urdf(xml)
    np.testing.assert_allclose(model.lower.numpy(), [-1, -1])
    np.testing.assert_allclose(model.velocity_limit.numpy(), [2, 2])
    continuous = RobotModel.from_urdf(_two_link(j1=_joint("j1", "base", "l1", kind="continuous")))
    assert continuous.continuous == (True, False)
    assert math.isinf(continuous.lower[0].item()) and math.isinf(continuous.upper[0].item())


def test_prismatic_joint_and_dynamics_tags():
    xml = _two_link(j2=_joint("j2", "l1", "l2", kind="prismatic", axis=(1, 0, 0), extra='<dynamics damping="0.3" friction="0.2"/>'))
    model = RobotModel.from_urdf(xml)
    assert model.joint_types == (0, 1)
    assert model.params.damping[1].item() == pytest.approx(0.3)
    assert model.params.friction[1].item() == pytest.approx(0.2)


def test_sub_chain_selection_and_locked_branches():
    model = RobotModel.from_urdf(BAXTER_URDF, base_link="base", tip_link="left_lower_elbow")
    assert model.joint_names == LEFT_JOINTS[:4]
    full = RobotModel.from_urdf(BAXTER_URDF, base_link="base", tip_link="left_hand")
    # w0..w2 and everything beyond are locked at 0 and merged into the lower elbow body.
    assert model.params.mass[-1].item() == pytest.approx(full.params.mass[3:].sum().item(), abs=MERGE_TOL)
    q = torch.zeros(4, dtype=torch.float64)
    np.testing.assert_allclose(dyn.gravity_torques(model, q), dyn.gravity_torques(full, torch.zeros(7, dtype=torch.float64))[:4], atol=1e-10)
    assert "right_upper_shoulder" not in model.frames  # branch off the fixed base is dropped


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"path_or_xml": "/nonexistent/robot.urdf"}, "URDF file not found"),
        ({"path_or_xml": "<robot name='x'><link name='a'></robot>"}, "malformed URDF XML"),
        ({"path_or_xml": "<notarobot/>"}, "not a URDF"),
        ({"path_or_xml": str(BAXTER_URDF), "base_link": "nope"}, "unknown base_link 'nope'"),
        ({"path_or_xml": str(BAXTER_URDF), "tip_link": "left_handz"}, "unknown tip_link 'left_handz'"),
        ({"path_or_xml": str(BAXTER_URDF), "base_link": "left_hand", "tip_link": "left_upper_shoulder"}, "is not below base_link"),
    ],
)
def test_file_and_link_errors_are_clear(kwargs, message):
    with pytest.raises(RobotModelError, match=message):
        RobotModel.from_urdf(**kwargs)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"loop": _joint("j3", "base", "l2")}, "closed kinematic loop: link 'l2'"),
        ({"l2": _link("l2", -1.0)}, "link 'l2' has negative mass"),
        ({"l2": _link("l2", 0.0)}, "zero mass but a nonzero inertia"),
        ({"l2": _link("l2", 1.0, inertia=(1e-3, 0, 0, -1e-3, 0, 1e-3))}, "not positive definite"),
        ({"j2": _joint("j2", "l1", "l2", kind="floating")}, "unsupported type 'floating'"),
        ({"j2": _joint("j2", "l1", "l2", extra='<mimic joint="j1"/>')}, "mimic joint"),
        ({"j2": _joint("j2", "l1", "l2", axis=(0, 0, 0))}, "zero axis"),
        ({"l1": _link("l1"), "l2": _link("l2"), "j2": _joint("j2", "l1", "l2", kind="fixed")}, "moves no mass"),
        ({"j2": _joint("j2", "l1", "ghost")}, "unknown link 'ghost'"),
    ],
)
def test_structural_and_inertial_errors_are_clear(override, message):
    with pytest.raises(RobotModelError, match=message):
        RobotModel.from_urdf(_two_link(**override))


def test_bad_joint_inputs_are_rejected_with_names():
    model = load_robot_config(BAXTER_LEFT).build_model()
    q = torch.zeros(7, dtype=torch.float64)
    q[2] = float("nan")
    with pytest.raises(RobotModelError, match=r"q contains NaN or inf for joint\(s\) \['left_e0'\]"):
        dyn.rnea(model, q, torch.zeros(7, dtype=torch.float64), torch.zeros(7, dtype=torch.float64))
    with pytest.raises(RobotModelError, match=r"shape \(\.\.\., 7\)"):
        dyn.gravity_torques(model, torch.zeros(6, dtype=torch.float64))
    with pytest.raises(RobotModelError, match="dtype torch.float32"):
        dyn.mass_matrix(model, torch.zeros(7, dtype=torch.float32))
    # Lists and numpy arrays are converted to the model's dtype.
    assert dyn.gravity_torques(model, [0.0] * 7).dtype == torch.float64


def test_input_checks_do_not_split_compiled_graphs():
    # Dynamo tracing only (no inductor compile): the eager NaN check is skipped while
    # compiling, so dynamics functions compile into one graph.
    model = load_robot_config(BAXTER_LEFT).build_model()
    explanation = torch._dynamo.explain(lambda q: dyn.spring_torques(model, q) + dyn.gravity_torques(model, q))(
        torch.zeros(7, dtype=torch.float64)
    )
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1


def test_named_parameters_are_differentiable():
    model = load_robot_config(BAXTER_LEFT).build_model()
    names = model.parameter_names()
    assert "left_lower_shoulder.mass" in names and "left_s1.spring.stiffness" in names
    assert "left_s0.origin.xyz" in names and "payload.com" in names
    stiffness = torch.tensor(9000.0, dtype=torch.float64, requires_grad=True)
    payload = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    updated = model.with_parameters({"left_s1.spring.stiffness": stiffness, "payload.mass": payload})
    assert model.get_parameter("left_s1.spring.stiffness").item() == 8000.0  # original untouched
    q = torch.full((7,), -0.3, dtype=torch.float64)
    (dyn.gravity_torques(updated, q) - dyn.spring_torques(updated, q)).sum().backward()
    assert stiffness.grad is not None and stiffness.grad.abs() > 0
    assert payload.grad is not None and payload.grad.abs() > 0
    with pytest.raises(RobotModelError, match="unknown parameter"):
        model.with_parameters({"left_s1.spring.stifness": 1.0})
    with pytest.raises(RobotModelError, match=r"needs shape \(3,\)"):
        model.with_parameters({"payload.com": [0.0, 0.0]})


def test_model_conversion_follows_dtype():
    model = load_robot_config(BAXTER_LEFT).build_model().to(dtype=torch.float32)
    assert model.dtype == torch.float32 and model.frame("left_hand").placement.dtype == torch.float32
    tau = dyn.rnea(model, torch.zeros(7), torch.zeros(7), torch.zeros(7))
    assert tau.dtype == torch.float32


def test_log_cholesky_round_trip_and_consistency():
    model = load_robot_config(BAXTER_LEFT).build_model()
    p = model.params
    theta = log_cholesky_from_inertial(p.mass, p.com, p.inertia)
    mass, com, inertia = inertial_from_log_cholesky(theta)
    np.testing.assert_allclose(mass, p.mass, rtol=ROUNDTRIP_TOL)
    np.testing.assert_allclose(com, p.com, atol=ROUNDTRIP_TOL)
    np.testing.assert_allclose(inertia, p.inertia, atol=ROUNDTRIP_TOL)
    # Any parameter vector gives a physically consistent inertial.
    random = torch.randn(200, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    mass, com, inertia = inertial_from_log_cholesky(random)
    assert bool((mass > 0).all())
    assert bool((torch.linalg.eigvalsh(pseudo_inertia(mass, com, inertia)) > 0).all())
    assert torch.autograd.gradcheck(lambda t: inertial_from_log_cholesky(t), (theta[:2].clone().requires_grad_(),))
    with pytest.raises(ValueError, match="not physically consistent"):
        log_cholesky_from_inertial(torch.tensor(1.0, dtype=torch.float64), torch.zeros(3, dtype=torch.float64),
                                   torch.tensor([1.0, 0, 0, 1.0, 0, 3.0], dtype=torch.float64))


def test_robot_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("robot:\n  base_link: base\n")
    with pytest.raises(RobotModelError, match="missing 'urdf'"):
        load_robot_config(bad)
    mismatch = tmp_path / "mismatch.yaml"
    mismatch.write_text(
        f"robot:\n  urdf: {BAXTER_URDF}\n  base_link: base\n  tip_link: left_hand\n  joints: [left_s0, left_s1]\n"
    )
    with pytest.raises(RobotModelError, match="do not match the actuated joints"):
        load_robot_config(mismatch).build_model()
    with pytest.raises(RobotModelError, match="robot config not found"):
        load_robot_config(tmp_path / "none.yaml")
    with pytest.raises(RobotModelError, match="spring on unknown joint"):
        RobotModel.from_urdf(BAXTER_URDF, base_link="base", tip_link="left_hand", springs=[JointSpring("right_s1")])
