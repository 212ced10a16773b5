"""Bad input to the PBD simulator: clear errors or flagged results, never silent NaN output."""

import warnings

import pytest
import torch

from diffsim_ros.model import RobotModel, RobotModelError
from diffsim_ros.sim import PBDControl, PBDConvergenceWarning, PBDError, PBDSimulator
from diffsim_ros.sim.pbd import build_system
from test_pbd_references import baxter, chain_urdf, random_state

RESIDUAL_TOLERANCE = 1e-6  # [m or rad] a tolerance the paper's one-step Jacobi cannot meet


@pytest.fixture(scope="module")
def sim():
    return PBDSimulator(baxter(), dt=0.01, substeps=2)


def _zeros(sim):
    return torch.zeros(sim.model.nq, dtype=sim.model.dtype)


@pytest.mark.parametrize("argument", ["q", "qd", "tau"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_joint_inputs_name_the_joint(sim, argument, bad):
    values = {"q": _zeros(sim), "qd": _zeros(sim), "tau": _zeros(sim)}
    values[argument][2] = bad
    with pytest.raises(RobotModelError, match="left_e0"):
        sim.joint_step(values["q"], values["qd"], values["tau"])


@pytest.mark.parametrize("field", ["pos", "quat", "vel", "omega"])
def test_non_finite_particle_state_is_refused(sim, field):
    state = sim.initial_state(_zeros(sim), _zeros(sim))
    broken = getattr(state, field).clone()
    broken[3, 0] = float("nan")
    with pytest.raises(PBDError, match=f"state.{field}.*row"):
        sim.step(state.replace(**{field: broken}), _zeros(sim))


def test_non_finite_wrench_is_refused(sim):
    state = sim.initial_state(_zeros(sim), _zeros(sim))
    wrench = torch.zeros(sim.model.nq, 6, dtype=sim.model.dtype)
    wrench[-1, 4] = float("inf")
    with pytest.raises(PBDError, match="wrench"):
        sim.step(state, PBDControl(tau=_zeros(sim), wrench=wrench))


def test_bad_drives_are_refused(sim):
    state = sim.initial_state(_zeros(sim), _zeros(sim))
    with pytest.raises(PBDError, match="without a drive target"):
        sim.step(state, PBDControl(tau=_zeros(sim), stiffness=_zeros(sim) + 1.0))
    with pytest.raises(PBDError, match="stiffness must be >= 0"):
        sim.step(state, PBDControl(tau=_zeros(sim), target=_zeros(sim), stiffness=_zeros(sim) - 1.0))
    target = _zeros(sim)
    target[1] = float("nan")
    with pytest.raises(RobotModelError, match="left_s1"):
        sim.joint_step(_zeros(sim), _zeros(sim), PBDControl(tau=_zeros(sim), target=target))


def test_wrong_dtype_and_shape_are_refused(sim):
    state = sim.initial_state(_zeros(sim), _zeros(sim))
    with pytest.raises(RobotModelError, match="dtype"):
        sim.joint_step(_zeros(sim).float(), _zeros(sim), _zeros(sim))
    with pytest.raises(PBDError, match="shape"):
        sim.step(state.replace(pos=state.pos[:-1]), _zeros(sim))


def test_step_never_modifies_its_input(sim):
    q, qd = random_state(sim.model, 0)
    state = sim.initial_state(q, qd)
    copies = [t.clone() for t in (state.pos, state.quat, state.vel, state.omega)]
    new = sim.step(state, _zeros(sim))
    for before, after in zip(copies, (state.pos, state.quat, state.vel, state.omega)):
        assert torch.equal(before, after)
    assert not torch.equal(new.pos, state.pos)


def test_divergence_raises_instead_of_returning_nan(sim):
    tau = _zeros(sim)
    tau[-1] = 1e300  # overflows to inf inside the step
    with pytest.raises(PBDError, match="diverged"):
        sim.joint_step(_zeros(sim), _zeros(sim), tau)


def test_non_converged_constraints_are_reported():
    model = baxter()
    q, qd = random_state(model, 1, speed=2.0)
    lax = PBDSimulator.paper(model, iterations=1, residual_tolerance=RESIDUAL_TOLERANCE)
    with pytest.warns(PBDConvergenceWarning, match="residual .* at joint"):
        lax.joint_step(q, qd, _zeros(lax))
    strict = PBDSimulator.paper(model, iterations=1, residual_tolerance=RESIDUAL_TOLERANCE, on_residual="raise")
    with pytest.raises(PBDError, match="not converged"):
        strict.joint_step(q, qd, _zeros(strict))
    pos_err, ang_err = lax.residuals(lax.step(lax.initial_state(q, qd), _zeros(lax)))
    assert float(torch.maximum(pos_err, ang_err).max()) > RESIDUAL_TOLERANCE
    with warnings.catch_warnings():
        warnings.simplefilter("error", PBDConvergenceWarning)
        PBDSimulator(model, dt=0.01, substeps=4).joint_step(q, qd, _zeros(lax))  # the direct solver converges


def test_unsupported_models_and_settings_are_refused():
    massless = chain_urdf([0.3, 0.3], [1.0, 1.0]).replace('<mass value="1.0"/>', '<mass value="0.0"/>', 1)
    with pytest.raises((PBDError, RobotModelError), match="mass"):
        PBDSimulator(RobotModel.from_urdf(massless))
    model = baxter()
    with pytest.raises(PBDError, match="unsupported type"):
        PBDSimulator(model.replace(joint_types=(7,) + model.joint_types[1:]))
    for kwargs in ({"solver": "newton"}, {"substeps": 0}, {"iterations": 0}, {"on_residual": "ignore_all"}, {"compliance": -1.0}):
        with pytest.raises(ValueError):
            PBDSimulator(model, **kwargs)


def test_checks_stay_outside_the_integrator_so_it_compiles_into_one_graph():
    # Dynamo tracing only (no inductor compile). PBDSimulator.step/joint_step check inputs
    # and outputs around the integrator; inside it nothing may branch on tensor data.
    from diffsim_ros.sim.pbd.solver import integrate

    sim = PBDSimulator(baxter(), dt=0.01, substeps=1, iterations=1, limits=False)
    model = sim.model
    system = build_system(model)
    q = torch.zeros(2, model.nq, dtype=model.dtype)
    state = sim.initial_state(q, q)

    def advance(pos, quat, vel, omega, tau):
        new = integrate(model, system, state.replace(pos=pos, quat=quat, vel=vel, omega=omega), PBDControl(tau=tau), sim.dt, sim.settings)
        return new.pos, new.quat, new.vel, new.omega

    explanation = torch._dynamo.explain(advance)(state.pos, state.quat, state.vel, state.omega, q)
    assert explanation.graph_break_count == 0
    assert explanation.graph_count == 1
