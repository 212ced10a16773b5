"""Object parameter estimation from camera poses (Le Lidec et al.'s identification cases).

The data come from MuJoCo (an independent simulator: soft elliptic-cone contact, its own
solver, a 1 ms or 0.1 ms step) sampled at 100 Hz with 1 mm / 1 mrad Gaussian pose noise,
seeded; our model steps at 10 ms. Cases:

* a cube sliding on a plane: the friction coefficient from initial guesses spanning
  [0.05, 1.0];
* sliding-direction isotropy: the Coulomb cone's estimate does not depend on the direction,
  the 4-sided pyramid baseline (the LCP's boxed friction, facets fixed in the world) drifts
  toward mu/sqrt(2) on the diagonal. The cube is yawed with its sliding direction so that it
  always slides face first: MuJoCo's soft contact otherwise yaws a cube sliding obliquely
  (by 3 degrees at 30 degrees), a geometric effect that is not the friction model's;
* mass, friction and restitution together from a collision with a known cube;
* without a collision, mass is flagged unidentifiable;
* bad input.

Issue 19's independent scenes read from bags are in test_contact_estimation_scenes.py.
"""

import functools
import math

import numpy as np
import pytest

from diffsim_ros.estimation.consistency import CONSISTENCY_P_VALUE
from diffsim_ros.estimation.data import DataError
from diffsim_ros.estimation.object_events import interpolate_poses
from diffsim_ros.estimation.object_fit import fit_objects
from diffsim_ros.estimation.objects import (
    ENGINES,
    QUALITY_LIMIT,
    as_pose_series,
    estimate_in_stages,
    estimate_object_parameters,
    parameter_uncertainty,
    scan_parameters,
)
from diffsim_ros.estimation.streams import PoseSeries
from diffsim_ros.sim.contact import Box, ContactError, ContactWorld, RigidObject
from diffsim_ros.sim.contact.fast import fast_support
from diffsim_ros.testbed.contact_reference import simulate_mujoco

DT = 0.01  # our step [s]
MUJOCO_STEP = 0.001  # MuJoCo's step for the sliding data [s]
CAMERA_PERIOD = 0.01  # [s]
POSITION_NOISE = 1e-3  # [m]
ORIENTATION_NOISE = 1e-3  # [rad]
SKIP = 0.03  # MuJoCo contact transient before recording [s]
SEED = 0
HALF = 0.05  # cube half size [m]
SLIDE_MU = 0.3
SLIDE_MASS = 0.5  # [kg]
SLIDE_SPEED = 1.5  # [m/s]
SLIDE_DURATION = 0.4  # [s]

MU_REL_TOL = 0.02  # Le Lidec's target: mu within 2 %
ISOTROPY_SPREAD_REL = 0.01  # cone estimates across directions agree within 1 %
# The pyramid's estimate on the diagonal vs mu/sqrt(2) (its exact value for a slide along
# the diagonal of the facets): 3 %, the 2 % target plus the discretization of our step.
PYRAMID_DIAGONAL_REL_TOL = 0.03
# The pyramid at 30 degrees must be visibly biased (more than the 2 % target).
PYRAMID_BIAS_MIN = 0.1
POSE_INTERPOLATION_TOL = 1e-12  # float64 rounding of linear interpolation and slerp

# Collision scene: a cube slides into a known target cube at rest. MuJoCo has no restitution
# coefficient, so the true restitution is measured from its own velocities (see
# measured_restitution). Our collision is verified exact (test_contact_world: momentum
# conserved, e exact head on); the remaining fit bias is MuJoCo's soft, convex contact, which
# the fit absorbs by trading the three parameters (the standard deviations, ~1 %, are far
# below it). Two parts, measured (staged fit, seed 0; mass / friction / restitution errors):
# * the collision's length: at a 5 ms collision time constant (0.5 ms step, 4.5 ms contact)
#   +9.2 % / +6.7 % / -0.0 %; at 1 ms (0.1 ms step, 0.9 ms contact, used here)
#   +4.3 % / +1.0 % / +2.6 %;
# * the target hops: the hit makes it slide at once, and MuJoCo's convex contact model
#   (Anitescu's relaxation: a sliding contact separates at a rate proportional to mu times
#   the slip) pushes it off the ground (81 N ground normal force for its 4.9 N weight during
#   the hit, 0.3-0.4 mm lift, ~10 ms airborne without friction) at every collision stiffness;
#   our rigid ground does not. The target travels further and the fit raises the mass. With a
#   target friction of 0.05 instead of 0.3 the hop is 0.04 mm and the mass error at 5 ms
#   drops from +9.2 % to +4.9 %, at 1 ms from +4.3 % to +1.3 % (friction +1.0 -> +0.0 %,
#   restitution +2.6 -> -1.6 %): about three quarters of the remaining mass bias.
# The tolerances bound the bias at the setting below; they are not noise.
COLLISION_MASS = 0.8  # [kg]
COLLISION_MU = 0.25
TARGET_MASS = 0.5  # [kg]
TARGET_MU = 0.3
COLLISION_SPEED = 2.0  # [m/s]
COLLISION_DURATION = 0.4  # [s]
COLLISION_MUJOCO_STEP = 0.0001  # [s]
GROUND_SOLREF = (0.005, 1.0)
COLLISION_SOLREF = (0.001, 0.3)  # 1 ms time constant, 0.3 damping ratio
# Monte Carlo check of the reported std: 2000 noise draws for the spread of the fit (~1.6 %
# sampling error), 400 for the mean of the estimated variances (~3 %).
MONTE_CARLO_DRAWS = 2000
VARIANCE_DRAWS = 400
STD_MONTE_CARLO_REL_TOL = 0.06
COLLISION_MASS_REL_TOL = 0.06
COLLISION_MU_REL_TOL = 0.03
COLLISION_RESTITUTION_TOL = 0.02
COLLISION_BUDGET = 30  # residual evaluations per stage
COLLISION_PARAMETERS = ("cube.mass", "cube.friction", "cube.restitution")
COLLISION_START = {"cube.mass": 0.5, "cube.friction": 0.5, "cube.restitution": 0.2}
# Stage 1 fits friction to the poses up to this many camera periods before the target is seen
# to move: 13 poses (0.03-0.15 s; the faces are 28 mm apart at the last). Half a period off
# the sample grid: at a stamp, float rounding of MuJoCo's clock decided whether that pose was
# in (at a 0.5 ms step it was; 14 poses give -16 % instead of the -4.5 % below).
# Stage 1 is only a start and is noisy, inherently: over 0.12 s friction moves the cube by
# 1/2 mu g T^2 = 18 mm against 1 mm noise and trades with the initial velocity (correlation
# 0.96), std ~18 % (Jacobian and a parabola fit agree). Measured: -0.07 % without noise (no
# settling transient or pre-contact in the window; the known target does not change it);
# seeds 0-11 mean -1.5 %, sd 13.6 % (seed 0: -4.5 %). The final fit does not inherit it:
# started at the true friction, the same estimate to 3 digits; seeds 0, 1, 3, 11 (stage 1 -5,
# -21, +26, -26 %) end at mass +4.3, +3.0, +5.5, +3.8 % and friction +1.0, -0.2, +0.6, +1.4 %
# (the ~1 % spread of their std around the model bias above). Stage 1's evaluation limit is
# a flat valley of two nuisances (an upward initial vertical velocity below g dt only lowers
# the first step's friction, like a lower initial horizontal velocity): 200 evaluations move
# mu by 0.04 %.
STAGE1_END_PERIODS = 2.5
# Mass without a collision: flagged, or a relative standard deviation above this.
UNIDENTIFIED_REL_STD = 0.5
# The compiled engine against torch's (the reference) on the collision: scan costs (the two
# steps agree to ~1e-11 per step; over a 0.4 s rollout through the hit, 1.8e-9 of the cost was
# measured), and a short fit (same evaluations) whose Jacobians agree to ~1e-10.
ENGINE_COST_REL_TOL = 1e-7
ENGINE_VALUE_REL_TOL = 1e-6
ENGINE_EVALUATIONS = 3
# Consistency checks on the slide: after SPLIT_TIME the data are changed as if the friction
# rose by SHIFTED_MU. The joint fit absorbs the change (measured: mu 0.375, +25 %, with the
# residuals at 1.18x the camera noise, within QUALITY_LIMIT): only the disagreement between
# the data before and after shows it (p 2.4e-6; at a rise of 0.1 it was 6.9e-4, at 0.03
# 0.59: the later data alone fix the friction to ~0.02). CONSISTENT_P: unchanged data must
# pass far from the 1e-3 threshold.
# A resting object's place is a least-squares fit of all its poses: their mean across gravity
# and about it, up to the second order of the 1 mrad noise and the nuisances' weak prior.
PLACEMENT_TOL = 1e-6  # [m]
TURN_TOL = 1e-5  # [rad]
SPLIT_TIME = 0.2  # [s] since the first pose
SHIFTED_MU = 0.15
CONSISTENT_P = 0.01


def slide_world(solver, theta=0.0):
    """The sliding cube's world and start state, sliding at ``theta`` [rad] from x, yawed by theta."""
    cube = RigidObject("cube", Box((HALF, HALF, HALF)), mass=SLIDE_MASS, friction=SLIDE_MU)
    world = ContactWorld.create([cube], solver=solver, dt=DT)
    state = world.initial_state(
        position=[[0.0, 0.0, HALF]],
        orientation=[[math.cos(theta / 2), 0.0, 0.0, math.sin(theta / 2)]],
        linear_velocity=[[SLIDE_SPEED * math.cos(theta), SLIDE_SPEED * math.sin(theta), 0.0]],
    )
    return world, state


@functools.lru_cache(maxsize=None)
def slide_observations(theta_deg):
    """MuJoCo's noisy camera poses of the sliding cube, {"cube": PoseSeries}."""
    world, state = slide_world("cone", math.radians(theta_deg))
    observations, _ = simulate_mujoco(
        world, state, duration=SLIDE_DURATION, timestep=MUJOCO_STEP, sample_period=CAMERA_PERIOD, skip=SKIP,
        position_noise=POSITION_NOISE, orientation_noise=ORIENTATION_NOISE, seed=SEED,
    )
    return {name: PoseSeries(**fields) for name, fields in observations.items()}


@functools.lru_cache(maxsize=None)
def slide_fit(solver, theta_deg, mu0):
    """Friction fit of the sliding data with ``solver``'s model from the initial guess ``mu0``."""
    world, _ = slide_world(solver)
    return estimate_object_parameters(world, slide_observations(theta_deg), ["cube.friction"], initial={"cube.friction": mu0})


@pytest.mark.parametrize("mu0", [0.05, 0.3, 1.0])
def test_sliding_cube_friction_within_two_percent_from_any_start(mu0):
    estimate = slide_fit("cone", 0, mu0)
    mu = estimate.values["cube.friction"]
    assert abs(mu / SLIDE_MU - 1) < MU_REL_TOL, (mu0, mu, estimate.message)
    assert estimate.identifiable["cube.friction"]
    assert estimate.std["cube.friction"] < MU_REL_TOL * SLIDE_MU


@pytest.mark.parametrize("theta_deg", [0, 30, 45])
def test_cone_estimate_does_not_depend_on_the_sliding_direction(theta_deg):
    mu = slide_fit("cone", theta_deg, SLIDE_MU).values["cube.friction"]
    reference = slide_fit("cone", 0, SLIDE_MU).values["cube.friction"]
    assert abs(mu / SLIDE_MU - 1) < MU_REL_TOL, (theta_deg, mu)
    assert abs(mu / reference - 1) < ISOTROPY_SPREAD_REL, (theta_deg, mu, reference)


def test_pyramid_estimate_drifts_toward_mu_over_sqrt2_on_the_diagonal():
    along_facet = slide_fit("lcp", 0, SLIDE_MU).values["cube.friction"]
    oblique = slide_fit("lcp", 30, SLIDE_MU).values["cube.friction"]
    diagonal = slide_fit("lcp", 45, SLIDE_MU).values["cube.friction"]
    # Along a facet normal the pyramid is exact...
    assert abs(along_facet / SLIDE_MU - 1) < MU_REL_TOL, along_facet
    # ...and it is biased low elsewhere, down to mu/sqrt(2) on the diagonal.
    assert oblique < (1 - PYRAMID_BIAS_MIN) * SLIDE_MU, oblique
    assert abs(diagonal / (SLIDE_MU / math.sqrt(2)) - 1) < PYRAMID_DIAGONAL_REL_TOL, diagonal


def _braked(series, start, extra_mu):
    """A PoseSeries changed after ``start`` [s] as if the friction rose by ``extra_mu``."""
    dt = np.clip(series.times - start, 0.0, None)
    direction = series.position[-1] - series.position[0]
    direction[2] = 0.0
    shift = -0.5 * extra_mu * 9.81 * dt[:, None] ** 2 * direction / np.linalg.norm(direction)
    return PoseSeries(times=series.times, position=series.position + shift, orientation=series.orientation)


@pytest.mark.parametrize("extra_mu", [0.0, SHIFTED_MU])
def test_data_that_disagree_before_and_after_a_time_are_found(extra_mu):
    world, _ = slide_world("cone")
    series = slide_observations(0)["cube"]
    split = series.times[0] + SPLIT_TIME
    estimate = estimate_object_parameters(world, {"cube": _braked(series, split, extra_mu)}, ["cube.friction"], split_time=split)
    assert set(estimate.consistency) == {"position/orientation", "before/after"}
    before_after = estimate.consistency["before/after"]
    assert before_after.dof == 1 and estimate.consistency["position/orientation"].p_value > CONSISTENT_P
    if extra_mu == 0.0:
        assert before_after.p_value > CONSISTENT_P
        return
    assert before_after.p_value < CONSISTENCY_P_VALUE / 2  # fit_objects tests two splits
    assert estimate.worst_ratio < QUALITY_LIMIT and estimate.success  # the rms check alone misses it
    by = before_after.by_channel
    assert by["after"]["cube.friction"] - by["before"]["cube.friction"] > 0.5 * SHIFTED_MU
    assert abs(by["before"]["cube.friction"] / SLIDE_MU - 1) < MU_REL_TOL


def test_a_fit_whose_halves_disagree_is_poor_not_a_result():
    """fit_objects splits a slide midway; the braked slide's joint fit is within the noise
    but its halves disagree: poor_fit, naming the split, the parameter and both values."""
    world, _ = slide_world("cone")
    series = slide_observations(0)["cube"]
    braked = _braked(series, 0.5 * (series.times[0] + series.times[-1]), SHIFTED_MU)
    fit = fit_objects(world, {"cube": braked}, ["cube.friction"])
    assert fit.status == "poor_fit" and fit.estimate.worst_ratio < QUALITY_LIMIT
    assert "before and after data disagree" in fit.message and "'cube.friction'" in fit.message
    assert fit_objects(world, slide_observations(0), ["cube.friction"]).status == "ok"


def test_mass_is_unidentifiable_without_a_collision():
    world, _ = slide_world("cone")
    estimate = estimate_object_parameters(
        world.with_parameters({"cube.mass": 2.0}), slide_observations(0), ["cube.mass", "cube.friction"],
        initial={"cube.friction": 0.5},
    )
    assert not estimate.identifiable["cube.mass"]
    assert estimate.std["cube.mass"] > UNIDENTIFIED_REL_STD * estimate.values["cube.mass"]
    # Friction stays identified alongside.
    assert estimate.identifiable["cube.friction"]
    assert abs(estimate.values["cube.friction"] / SLIDE_MU - 1) < MU_REL_TOL


def test_a_resting_object_is_placed_by_all_its_poses():
    # A resting object keeps zero velocity, but its place across gravity and its turn about it
    # are estimated from every pose, not fixed at the mean of its first few noisy ones.
    cube = RigidObject("cube", Box((HALF, HALF, HALF)), mass=SLIDE_MASS, friction=SLIDE_MU)
    block = RigidObject("block", Box((HALF, HALF, HALF)), mass=1.0, friction=0.5)
    world = ContactWorld.create([cube, block], solver="cone", dt=DT)
    slide = slide_observations(0)["cube"]
    rng = np.random.default_rng(SEED)
    count = len(slide.times)
    position = np.array([0.0, 0.5, HALF]) + rng.normal(0.0, POSITION_NOISE, (count, 3))
    yaw = 0.3 + rng.normal(0.0, ORIENTATION_NOISE, count)
    quat = np.stack([np.cos(yaw / 2), np.zeros(count), np.zeros(count), np.sin(yaw / 2)], 1)
    observations = {"cube": slide, "block": PoseSeries(slide.times, position, quat)}
    estimate = estimate_object_parameters(world, observations, ["cube.friction"], at_rest=("block",))
    placed = estimate.initial_state
    np.testing.assert_allclose(placed.position[1, :2].numpy(), position[:, :2].mean(0), rtol=0, atol=PLACEMENT_TOL)
    w, _, _, z = placed.orientation[1].tolist()
    assert abs(2.0 * math.atan2(z, w) - yaw.mean()) < TURN_TOL
    assert float(placed.linear_velocity[1].abs().max()) == 0.0 and float(placed.angular_velocity[1].abs().max()) == 0.0
    # The first poses alone (as the place was taken before) are off by far more.
    assert np.abs(position[:5, :2].mean(0) - position[:, :2].mean(0)).max() > 100 * PLACEMENT_TOL
    assert abs(np.mean(yaw[:5]) - yaw.mean()) > 10 * TURN_TOL


def collision_world():
    """Cube sliding into a known target cube at rest: world (true parameters) and start state."""
    cube = RigidObject("cube", Box((HALF, HALF, HALF)), mass=COLLISION_MASS, friction=COLLISION_MU)
    target = RigidObject("target", Box((HALF, HALF, HALF)), mass=TARGET_MASS, friction=TARGET_MU)
    # The cubes' faces meet head on: no friction between them, in MuJoCo as here.
    world = ContactWorld.create([cube, target], solver="cone", dt=DT, pair_friction={("cube", "target"): 0.0})
    state = world.initial_state(
        position=[[0.0, 0.0, HALF], [0.4, 0.002, HALF]], linear_velocity=[[COLLISION_SPEED, 0.0, 0.0], [0.0, 0.0, 0.0]]
    )
    return world, state


def measured_restitution(truth):
    """MuJoCo's effective restitution: relative x velocity just after / just before the collision.

    Read from the noise-free velocities at the MuJoCo steps just before the faces touch and
    just after they separate (4.5 ms apart; the ground friction in between changes the ratio
    by < 0.3 %). Not from line fits around the contact: the target is airborne for ~10 ms
    after the hit (see COLLISION_* above), so a line fitted after it and extrapolated back
    overstated its velocity (0.448 instead of 0.436).
    """
    v_cube, v_target = truth["cube"]["linear_velocity"][:, 0], truth["target"]["linear_velocity"][:, 0]
    gap = truth["target"]["position"][:, 0] - truth["cube"]["position"][:, 0] - 2 * HALF
    first = np.argmax(gap < 0)
    last = first + np.argmax(gap[first:] >= 0)
    return -(v_cube[last] - v_target[last]) / (v_cube[first - 1] - v_target[first - 1])


@functools.lru_cache(maxsize=None)
def collision_data():
    """MuJoCo collision data: ``(world (true parameters), observations, measured restitution)``."""
    world, state = collision_world()
    observations, truth = simulate_mujoco(
        world, state, duration=COLLISION_DURATION, timestep=COLLISION_MUJOCO_STEP, sample_period=CAMERA_PERIOD,
        skip=SKIP, position_noise=POSITION_NOISE, orientation_noise=ORIENTATION_NOISE, seed=SEED,
        solref=GROUND_SOLREF, object_solref=COLLISION_SOLREF, object_friction=0.0,
    )
    return world, {name: PoseSeries(**fields) for name, fields in observations.items()}, measured_restitution(truth)


def collision_fit():
    """The staged fit of the MuJoCo collision data: ``(final ObjectEstimate, measured restitution)``."""
    world, observations, restitution = collision_data()
    target = observations["target"]
    moved = np.linalg.norm(target.position - target.position[:3].mean(0), axis=1) > 5 * POSITION_NOISE
    t_moved = target.times[np.argmax(moved)]
    # Friction from the slide before the hit, then mass and restitution, then all three (a
    # joint fit from a poor start stalls: the collision moves in time with the parameters).
    stages = [
        (["cube.friction"], t_moved - STAGE1_END_PERIODS * CAMERA_PERIOD),
        (["cube.mass", "cube.restitution"], None),
        (list(COLLISION_PARAMETERS), None),
    ]
    start = world.with_parameters(COLLISION_START)
    estimate = estimate_in_stages(start, observations, stages, at_rest=("target",), max_evaluations=COLLISION_BUDGET)[-1]
    return estimate, restitution


def test_mass_friction_and_restitution_from_a_collision_with_a_known_cube():
    estimate, restitution = collision_fit()
    names, values = COLLISION_PARAMETERS, estimate.values
    assert all(estimate.identifiable[name] for name in names), estimate.std
    assert abs(values["cube.mass"] / COLLISION_MASS - 1) < COLLISION_MASS_REL_TOL, values
    assert abs(values["cube.friction"] / COLLISION_MU - 1) < COLLISION_MU_REL_TOL, values
    assert abs(values["cube.restitution"] - restitution) < COLLISION_RESTITUTION_TOL, (values, restitution)


def test_the_compiled_engine_fits_as_torch_does():
    """Rollouts and their sensitivities by the compiled step (the default wherever it covers the
    world, as here: two boxes on the ground) give the torch step's costs and fit."""
    world, observations, _ = collision_data()
    start = world.with_parameters(COLLISION_START)
    assert fast_support(start) is None
    grid = {"cube.mass": np.array([0.5, 0.8, 1.2]), "cube.restitution": np.array([0.2, 0.4, 0.6])}
    costs = {engine: scan_parameters(start, observations, grid, at_rest=("target",), engine=engine) for engine in ENGINES}
    np.testing.assert_allclose(costs["auto"], costs["torch"], rtol=ENGINE_COST_REL_TOL)
    fits = {engine: estimate_object_parameters(start, observations, COLLISION_PARAMETERS, at_rest=("target",),
                                               max_evaluations=ENGINE_EVALUATIONS, engine=engine) for engine in ENGINES}
    for name in COLLISION_PARAMETERS:
        assert fits["auto"].values[name] == pytest.approx(fits["torch"].values[name], rel=ENGINE_VALUE_REL_TOL), name
        assert fits["auto"].std[name] == pytest.approx(fits["torch"].std[name], rel=ENGINE_VALUE_REL_TOL), name
    assert fits["auto"].cost == pytest.approx(fits["torch"].cost, rel=ENGINE_VALUE_REL_TOL)
    with pytest.raises(ContactError, match="engine must be one of"):
        scan_parameters(start, observations, grid, at_rest=("target",), engine="numba")


# ---------------------------------------------------------------- bad input
def _series(count=10):
    times = np.arange(count) * CAMERA_PERIOD
    position = np.stack([0.1 * times, np.zeros(count), np.full(count, HALF)], 1)
    orientation = np.tile([1.0, 0.0, 0.0, 0.0], (count, 1))
    return times, position, orientation


def test_pose_series_rejects_too_few_poses_nan_and_unordered_stamps():
    times, position, orientation = _series()
    with pytest.raises(DataError, match="at least 3 poses"):
        as_pose_series("cube", PoseSeries(times[:2], position[:2], orientation[:2]))
    bad = position.copy()
    bad[4, 1] = np.nan
    with pytest.raises(DataError, match="NaN"):
        PoseSeries(times, bad, orientation)
    with pytest.raises(DataError, match="strictly increasing"):
        PoseSeries(times[::-1], position, orientation)
    with pytest.raises(DataError, match="position \\(T, 3\\)"):
        PoseSeries(times, position[:, :2], orientation)
    with pytest.raises(DataError, match="zero quaternion"):
        PoseSeries(times, position, np.zeros_like(orientation))


def test_interpolate_poses_slerps_between_stamps_and_holds_the_end_poses():
    """An object's pose at another object's stamps: a constant-rate rotation about z is exact
    (slerp; normalized lerp is 7 mrad off at a quarter of these 1.2 rad steps), positions are
    linear, and outside its stamps an object stands at its first or last pose."""
    times = np.array([0.0, 0.1, 0.2])
    angles = np.array([0.0, 1.2, 2.4])
    quats = np.stack([np.cos(angles / 2), np.zeros(3), np.zeros(3), np.sin(angles / 2)], 1)
    position = np.stack([times, 2.0 * times, np.full(3, HALF)], 1)
    query = np.array([-0.1, 0.025, 0.175, 0.3])
    p, q = interpolate_poses(PoseSeries(times, position, quats), query)
    clamped = np.clip(query, 0.0, 0.2)
    expected = clamped * 12.0
    np.testing.assert_allclose(np.abs(np.sum(q * np.stack([np.cos(expected / 2), 0 * expected, 0 * expected, np.sin(expected / 2)], 1), 1)),
                               1.0, atol=POSE_INTERPOLATION_TOL)
    np.testing.assert_allclose(p, np.stack([clamped, 2.0 * clamped, np.full(4, HALF)], 1), atol=POSE_INTERPOLATION_TOL)


def test_estimation_rejects_unknown_names_and_too_few_poses():
    world, _ = slide_world("cone")
    observations = {"cube": PoseSeries(*_series())}
    with pytest.raises(ContactError, match="unknown object parameter 'cube.stiffness'"):
        estimate_object_parameters(world, observations, ["cube.stiffness"])
    with pytest.raises(ContactError, match="unknown object parameter 'box.friction'"):
        estimate_object_parameters(world, observations, ["box.friction"])
    with pytest.raises(ContactError, match="unknown objects \\['box'\\]"):
        estimate_object_parameters(world, {**observations, "box": observations["cube"]}, ["cube.friction"])
    with pytest.raises(ContactError, match="missing \\['cube'\\]"):
        estimate_object_parameters(world, {}, ["cube.friction"])
    with pytest.raises(ContactError, match="more than once"):
        estimate_object_parameters(world, observations, ["cube.friction", "cube.friction"])
    with pytest.raises(ContactError, match="no parameters"):
        estimate_object_parameters(world, observations, [])
    with pytest.raises(ContactError, match="at_rest names unknown objects"):
        estimate_object_parameters(world, observations, ["cube.friction"], at_rest=("box",))
    with pytest.raises(DataError, match="too few poses"):
        estimate_object_parameters(world, {"cube": PoseSeries(*[a[:4] for a in _series()])}, ["cube.friction"])
    with pytest.raises(DataError, match="observations of 'cube'"):
        estimate_object_parameters(world, {"cube": [1.0, 2.0]}, ["cube.friction"])
    with pytest.raises(ContactError, match="nothing is unknown: mark the values to estimate 'unknown'"):
        fit_objects(world, observations, [])
    with pytest.raises(DataError, match=r"too few poses \('cube' 4\): noise estimation needs"):
        fit_objects(world, {"cube": PoseSeries(*[a[:4] for a in _series()])}, ["cube.friction"])


def test_estimation_rejects_invalid_initial_guesses():
    world, _ = slide_world("cone")
    with pytest.raises(ContactError, match="must be > 0"):
        estimate_object_parameters(world.with_parameters({"cube.mass": 0.0}), {"cube": PoseSeries(*_series())}, ["cube.friction"])
    with pytest.raises(ContactError, match="outside"):
        estimate_object_parameters(world, {"cube": PoseSeries(*_series())}, ["cube.friction"], initial={"cube.friction": -0.1})
    with pytest.raises(ContactError, match="not estimated"):
        estimate_object_parameters(world, {"cube": PoseSeries(*_series())}, ["cube.friction"], initial={"cube.mass": 1.0})


def test_parameter_std_follows_per_channel_noise():
    """A camera's position and orientation residuals have different noise: the reported std
    is the sandwich covariance of the unweighted fit with per-channel noise variances."""
    rng = np.random.default_rng(SEED)
    rows = 300
    loud, quiet = 1e-3, 4e-5  # [m]: position noise, orientation noise x bounding radius
    jac = np.zeros((2 * rows, 3))
    jac[:rows, 1] = rng.normal(size=rows)  # parameter 1: position rows only
    jac[rows:, 0] = rng.normal(size=rows)  # parameter 0: orientation rows only
    jac[:, 2] = rng.normal(size=2 * rows)  # parameter 2: both, so the fit mixes the channels
    channels = np.repeat([0, 1], rows)
    sigma = np.where(channels == 0, loud, quiet)
    pinv = np.linalg.pinv(jac)
    exact = np.sqrt(((pinv * sigma) ** 2).sum(1))
    noise = rng.normal(size=(MONTE_CARLO_DRAWS, 2 * rows)) * sigma
    residuals = noise - noise @ pinv.T @ jac.T
    np.testing.assert_allclose((noise @ pinv.T).std(0), exact, rtol=STD_MONTE_CARLO_REL_TOL)

    known, seen = parameter_uncertainty(jac, residuals[0], channels, {0: loud, 1: quiet})
    assert seen.all()
    np.testing.assert_allclose(known, exact, rtol=1e-9)
    # Variances estimated per channel are unbiased although the shared parameter moves the
    # loud channel's noise into the quiet channel's residuals.
    variances = np.array([parameter_uncertainty(jac, r, channels)[0] ** 2 for r in residuals[:VARIANCE_DRAWS]])
    np.testing.assert_allclose(variances.mean(0), exact**2, rtol=STD_MONTE_CARLO_REL_TOL)
    pooled, _ = parameter_uncertainty(jac, residuals[0])
    assert pooled[0] > 5 * exact[0] and pooled[1] < 0.8 * exact[1]  # one variance misstates both
    with pytest.raises(ValueError, match="channels must have shape"):
        parameter_uncertainty(jac, residuals[0], channels[:-1])


def test_an_estimated_mass_says_which_declared_mass_it_is_measured_against():
    # Camera poses hold the ratio of two colliding masses: a wrong declared mass scales the
    # estimate by the same factor and no fit quality can show it, so the outputs say so.
    from types import SimpleNamespace

    from diffsim_ros.io.object_report import mass_notes

    fit = SimpleNamespace(identifiable={"box.mass": True, "box/ground.friction": True},
                          events=(SimpleNamespace(pair=("box", "target")),))
    scene = SimpleNamespace(known={"target.mass": 0.6, "target/ground.friction": 0.3})
    (note,) = mass_notes(fit, scene)
    assert note.startswith("box.mass is measured against the declared target.mass = 0.6 kg") and "ratio" in note
    assert mass_notes(SimpleNamespace(identifiable=fit.identifiable, events=()), scene) == []
