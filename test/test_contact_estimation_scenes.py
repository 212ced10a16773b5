"""Object estimation on issue 19's independent scenes, read from bags as the CLI does.

Scenes of test/contact_scenes.py (rectangular boxes pushed 15 deg+ off-axis, elliptic cones,
a known 0.6 kg box, 30 Hz camera PoseStamped with 1 mm / 0.2 deg noise in an mcap bag). The
whole grid of initial guesses runs in benchmarks/bench_contact.py --parts objects; here the
worst corner of it, the noise and contact-time detection, the CLI and the fit's verdicts.
(Split from test_contact_estimation.py, whose targets it shares, so that its one collision
fit, the suite's longest item, runs on one pytest-xdist worker while the other works on the rest.)
"""

import functools
import math

import contact_scenes as scenes
import numpy as np
import pytest
import yaml
from ctrl_c import python_sigint_handler, swallow_a_ctrl_c
from scipy.spatial.transform import Rotation
from test_contact_estimation import COLLISION_MASS_REL_TOL, COLLISION_MU_REL_TOL, COLLISION_RESTITUTION_TOL, MU_REL_TOL, SEED

from diffsim_ros.cli import main as cli_main
from diffsim_ros.pipelines.objects import load_inputs
from diffsim_ros.cli.exits import BAD_INPUT, INTERRUPTED, OK, UNDETERMINED
from diffsim_ros.estimation.object_events import PoseNoise, contact_events, noisy_poses, pose_noise
from diffsim_ros.estimation.object_fit import DRIFT_LIMIT, STATUSES, FitSettings, bootstrap_std, fit_objects
from diffsim_ros.estimation.objects import MIN_POSES, QUALITY_LIMIT
from diffsim_ros.estimation.streams import PoseSeries
from diffsim_ros.io.bags import write_bag
from diffsim_ros.io.ros_messages import pose_stamped_msg
from diffsim_ros.io.ros_types import TypestoreMessages, default_typestore

SCENE_SLIDE = 0
SCENE_COLLISION = 1
NOISE_REL_TOL = 0.25  # noise estimated from ~60 five-pose windows (sd ~10 %)
SLIDE_STD_FACTOR = 2.0  # issue 19: mu within 2 %, or within 2 reported std
WORST_START = {"box/ground.friction": 1.0, "box/target.restitution": 0.5}  # and 2x the true mass
WRONG_CAMERA_TILT = 0.15  # [rad] about the camera's y axis
# The MuJoCo truth of SCENE_COLLISION replayed through the world a fit uses (the scene file's
# default 5 ms step): the target's spin SPIN_TIMES after the hit (measured -0.07 / -0.20 / -0.01
# rad/s off MuJoCo's 4.41 / 2.88 / 1.54; at 10 ms -0.07 / -0.18 / +0.03; -0.44 / -0.75 / -0.73
# when the bounce correction tilted the target onto three corners) and its tilt (measured
# < 0.001 deg; 0.29 deg then).
SPIN_TIMES = (0.03, 0.10, 0.16)  # [s] after the hit
SPIN_TOL = 0.25  # [rad/s]
TILT_TOL = math.radians(0.05)
CROPPED_EVALUATIONS = 2  # joint fit's budget of the cropped recording (the stages run, not the optimum)
BOOTSTRAP_REFITS = 6
# A slide's linear std matches its spread over noise draws (RESULTS contact-objects); six refits
# estimate a std within ~30 % (1 sd), so the two agree within this factor unless one is wrong.
BOOTSTRAP_SLIDE_RATIO = 2.5
HEAD_ON_MASS = 0.45  # [kg]
HEAD_ON_MU = 0.6
# The freed restitution against MuJoCo's measured one (0.125): the rigid hit's own value differs
# (0.20 measured, compliant and impulsive contacts), far closer than the declared 0.
HEAD_ON_FREED_TOL = 0.1


@functools.lru_cache(maxsize=None)
def _scene(kind, index):
    scene = scenes.random_slide(index) if kind == "slide" else scenes.random_collision(index)
    return scene, scenes.simulate(scene)


def _files(tmp_path, kind, index, **document):
    scene, sim = _scene(kind, index)
    if kind == "slide":
        document.setdefault("unknown", ("box.mass", "box/ground.friction"))
    return scenes.write_scene_files(scene, sim, tmp_path / f"{kind}{index}", seed=index, **document)


def test_camera_noise_and_contact_time_come_from_the_data(tmp_path):
    observations = []
    for index in range(3):
        bag, scene_path, calibration = _files(tmp_path, "slide", index)
        observations += list(load_inputs(scene_path, bag, calibration)[1].values())
    noise = pose_noise(observations)
    assert noise.position == pytest.approx(scenes.POSITION_NOISE, rel=NOISE_REL_TOL)
    assert noise.orientation == pytest.approx(scenes.ORIENTATION_NOISE, rel=NOISE_REL_TOL)
    bag, scene_path, calibration = _files(tmp_path, "collision", SCENE_COLLISION)
    parsed, series, _ = load_inputs(scene_path, bag, calibration)
    events = contact_events(parsed.world(), series, pose_noise(list(series.values())), at_rest=("target",))
    hit = _scene("collision", SCENE_COLLISION)[1]["restitution"]["time"]
    assert [e.pair for e in events] == [("box", "target")]
    # The contact begins after the last frame seen apart and at most one frame after the first seen touching.
    assert events[0].last_apart < hit <= events[0].time + 1 / scenes.CAMERA_RATE


def test_target_spin_after_a_hit_tracks_mujoco_at_the_model_step(tmp_path):
    """Model error, not fit error: the scene's truth (parameters and MuJoCo's state at the push)
    replayed through the world the fit uses."""
    import torch

    scene, sim = _scene("collision", SCENE_COLLISION)
    bag, scene_path, calibration = _files(tmp_path, "collision", SCENE_COLLISION)
    parsed = load_inputs(scene_path, bag, calibration)[0]
    world = parsed.world(scenes.truth_values(scene, sim))
    names = [box.name for box in scene.boxes]
    state = world.initial_state(position=np.array([sim[n]["position"][0] for n in names]),
                                orientation=np.array([sim[n]["quaternion"][0] for n in names]),
                                linear_velocity=np.array([sim[n]["velocity"][0, :3] for n in names]),
                                angular_velocity=np.array([sim[n]["velocity"][0, 3:] for n in names]))
    steps = int(round(sim["times"][-1] / world.dt))
    with torch.no_grad():
        states, _ = world.rollout(state, steps, check_start=False)
    times = world.dt * np.arange(1, steps + 1)
    hit = sim["restitution"]["time"]
    for t in SPIN_TIMES:
        ours = float(states.angular_velocity[np.argmin(abs(times - hit - t)), 1, 2])
        theirs = float(sim["target"]["velocity"][np.searchsorted(sim["times"], hit + t), 5])
        assert abs(ours - theirs) < SPIN_TOL, (t, ours, theirs)
    up = Rotation.from_quat(states.orientation[:, 1].numpy()[:, [1, 2, 3, 0]]).apply([0.0, 0.0, 1.0])
    assert float(np.arccos(np.clip(up[:, 2], -1.0, 1.0)).max()) < TILT_TOL


def test_slide_friction_from_a_bag_through_the_cli(tmp_path, capsys):
    bag, scene_path, calibration = _files(tmp_path, "slide", SCENE_SLIDE)
    out = tmp_path / "out"
    code = cli_main(["estimate-objects", "--bag", str(bag), "--scene", str(scene_path), "--calibration", str(calibration), "--out", str(out)])
    assert code == OK, capsys.readouterr()
    result = yaml.safe_load((out / "objects.yaml").read_text())
    truth = _scene("slide", SCENE_SLIDE)[0].ground_mu["box"]
    mu, std = result["estimates"]["box/ground.friction"]["value"], result["estimates"]["box/ground.friction"]["std"]
    assert abs(mu / truth - 1) < MU_REL_TOL or abs(mu - truth) < SLIDE_STD_FACTOR * std, (mu, std, truth)
    assert "box.mass" in result["not_estimated"] and "box.mass" not in result["estimates"]  # a slide does not involve the mass
    assert result["status"] == "ok" and (out / "trajectories.png").stat().st_size > 0 and (out / "summary.txt").exists()


def test_stamps_out_of_order_are_sorted_on_request_and_dropped_poses_are_reported(tmp_path, capsys):
    """Two poses delivered in the wrong order and one NaN pose: refused with advice this command
    can follow; with --order-policy sort fitted, the dropped pose named."""
    scene, sim = _scene("slide", SCENE_SLIDE)
    times, position, quat = scenes.camera_samples(scene, sim, SCENE_SLIDE)["box"]
    position = position.copy()
    position[9] = np.nan
    _, scene_path, calibration = scenes.write_scene_files(scene, sim, tmp_path, seed=SCENE_SLIDE, unknown=("box.mass", "box/ground.friction"))
    factory = TypestoreMessages(default_typestore())
    stamps = [scenes.START_STAMP_NS + int(round(t * 1e9)) for t in times]
    poses = [pose_stamped_msg(factory, h, "camera", p, q) for h, p, q in zip(stamps, position, quat)]
    poses[5], poses[6] = poses[6], poses[5]  # delivered out of order: logged before the pose stamped before it
    bag = write_bag(tmp_path / "swapped", ((scenes.TOPICS["box"], msg, ns) for msg, ns in zip(poses, stamps)))
    args = ["estimate-objects", "--bag", str(bag), "--scene", str(scene_path), "--calibration", str(calibration),
            "--out", str(tmp_path / "out"), "--bootstrap", "0"]
    assert cli_main(args) == BAD_INPUT
    err = capsys.readouterr().err
    assert "non-monotonic header stamps" in err and "the command's --order-policy sort" in err
    assert cli_main(args + ["--order-policy", "sort"]) == OK
    assert f"note: poses of 'box': 1 of {len(times)} samples with NaN/inf dropped" in capsys.readouterr().err
    result = yaml.safe_load((tmp_path / "out" / "objects.yaml").read_text())
    assert result["data"]["box"]["poses"] == len(times) - 1 and result["data"]["box"]["notes"] == [
        f"1 of {len(times)} samples with NaN/inf dropped", f"1 of {len(times)} samples out of order (sorted)"]


@pytest.mark.parametrize("pose, reason", [([0.5, -0.4, 0.9], "expected [x, y, z, qx, qy, qz, qw], got 3 values"),
                                          ([0.5, -0.4, 0.9, 0, 0, 0, 0], "quaternion norm 0 is not 1"),
                                          ([0.5, -0.4, 0.9, 0, 0, 0, 3], "quaternion norm 3 is not 1")])
def test_a_camera_pose_that_is_no_pose_is_named(tmp_path, capsys, pose, reason):
    bag, scene_path, calibration = _files(tmp_path, "slide", SCENE_SLIDE)
    calibration.write_text(yaml.safe_dump({"parameters": {"camera.pose": pose}}))
    args = ["estimate-objects", "--bag", str(bag), "--scene", str(scene_path), "--calibration", str(calibration), "--out", str(tmp_path / "o")]
    assert cli_main(args) == BAD_INPUT
    err = capsys.readouterr().err
    assert f"{calibration}: camera.pose: {reason}" in err and "[x, y, z, qx, qy, qz, qw]: the camera frame in the base frame" in err


def test_noisy_poses_carry_the_noise_pose_noise_estimates():
    times = np.arange(300) / scenes.CAMERA_RATE
    path = PoseSeries(times, np.stack([0.5 * times, 0.1 * times**2, np.zeros_like(times)], 1),
                      np.stack([np.cos(0.2 * times), 0 * times, 0 * times, np.sin(0.2 * times)], 1))
    truth = PoseNoise(scenes.POSITION_NOISE, scenes.ORIENTATION_NOISE, 0)
    noise = pose_noise(noisy_poses(path, truth, np.random.default_rng(SEED)))
    assert noise.position == pytest.approx(truth.position, rel=NOISE_REL_TOL)
    assert noise.orientation == pytest.approx(truth.orientation, rel=NOISE_REL_TOL)


def test_slide_bootstrap_through_the_cli_agrees_with_the_linear_std(tmp_path, capsys):
    """Refits of the fitted poses under fresh noise: their spread is reported next to the linear
    std, ``std`` is the larger, and on a slide (linear std calibrated) the two agree."""
    bag, scene_path, calibration = _files(tmp_path, "slide", SCENE_SLIDE)
    out = tmp_path / "out"
    code = cli_main(["estimate-objects", "--bag", str(bag), "--scene", str(scene_path), "--calibration", str(calibration),
                     "--out", str(out), "--bootstrap", str(BOOTSTRAP_REFITS)])
    assert code == OK, capsys.readouterr()
    entry = yaml.safe_load((out / "objects.yaml").read_text())["estimates"]["box/ground.friction"]
    assert entry["std"] == max(entry["std_linear"], entry["std_bootstrap"])
    assert 1 / BOOTSTRAP_SLIDE_RATIO < entry["std_bootstrap"] / entry["std_linear"] < BOOTSTRAP_SLIDE_RATIO, entry
    assert "bootstrap refits" in (out / "summary.txt").read_text()


def test_bootstrap_is_seeded_and_refuses_a_single_refit(tmp_path, capsys):
    bag, scene_path, calibration = _files(tmp_path, "slide", SCENE_SLIDE)
    parsed, observations, _ = load_inputs(scene_path, bag, calibration)
    fit = fit_objects(parsed.world(), observations, parsed.unknowns)
    settings = FitSettings(bootstrap=2, bootstrap_seed=3)
    first, again = (bootstrap_std(parsed.world(), parsed.unknowns, None, fit, settings) for _ in range(2))
    assert first == again and all(math.isfinite(v) and v > 0 for v in first.values())
    with pytest.raises(ValueError, match="bootstrap"):
        fit_objects(parsed.world(), observations, parsed.unknowns, settings=FitSettings(bootstrap=1))
    out = tmp_path / "out"
    code = cli_main(["estimate-objects", "--bag", str(bag), "--scene", str(scene_path), "--calibration", str(calibration),
                     "--out", str(out), "--bootstrap", "1"])
    assert code == BAD_INPUT and "--bootstrap" in capsys.readouterr().err and not out.exists()


@pytest.fixture(scope="module")
def worst_start_collision(tmp_path_factory):
    """``(ObjectFit, truth)`` of collision scene SCENE_COLLISION from the worst start of the
    grid, read from its bag as the CLI does. One joint fit, no restarts (they only add joint
    fits from other scanned points; the verdict is the property under test)."""
    bag, scene_path, calibration = _files(tmp_path_factory.mktemp("collision"), "collision", SCENE_COLLISION)
    parsed, observations, _ = load_inputs(scene_path, bag, calibration)
    scene, sim = _scene("collision", SCENE_COLLISION)
    truth = scenes.truth_values(scene, sim)
    fit = fit_objects(parsed.world(), observations, parsed.unknowns, initial={**WORST_START, "box.mass": 2 * truth["box.mass"]},
                      settings=FitSettings(restarts=0))
    return fit, truth


def _within_targets(values, truth):
    return (abs(values["box.mass"] / truth["box.mass"] - 1) < COLLISION_MASS_REL_TOL
            and abs(values["box/ground.friction"] / truth["box/ground.friction"] - 1) < COLLISION_MU_REL_TOL
            and abs(values["box/target.restitution"] - truth["box/target.restitution"]) < COLLISION_RESTITUTION_TOL)


def test_collision_fit_is_never_ok_outside_the_targets(worst_start_collision):
    """Never a silent wrong result: this scene once ended 'ok' at mass +20 %, mu +12 %."""
    fit, truth = worst_start_collision
    assert fit.status in ("ok", "poor_fit", "undetermined")
    if fit.ok:
        assert _within_targets(fit.values, truth), (fit.values, truth, fit.message)
    else:
        assert fit.message.startswith(("poor fit", "the data do not determine")), fit.message


@pytest.mark.xfail(strict=True, reason=(
    "issue 19 accuracy target not met (measured 2026-11-28, 5 ms model step): from the worst start, without restarts, scene 1 "
    "ends at mass +14.8 %, mu +9.5 %, restitution -0.014, poor_fit (10 ms: +9.5 % / +5.6 %). Over camera-noise seeds 21-28 "
    "its mass spreads by 6.7 % (sd) around +5.6 % at 5 ms (11.9 % at 10 ms); noise-free, the 5 ms fit ends at +5.2 % / +3.0 %, "
    "the model's own bias. The truth replayed at 0.5 ms still ends the box 1.05 deg and "
    "the target 1.44 deg off in yaw (camera noise 0.2 deg), our rigid impulsive hit against MuJoCo's soft 1.4 ms contact. "
    "The joint fit moves mu from the pre-hit slide's +0.3 % to +5.6 % to absorb it; holding that friction (commit 6a8d541, "
    "not kept) gives +2.8 % / +0.3 % here, but over camera-noise seeds 11-13 of scenes 0-2 a 13 % rms mu error against "
    "6.6 % refitted; fitting the box/target friction too ends ok at +14.5 % / +10.2 %. Needs a compliant contact model: "
    "MuJoCo's soft ground also rocks a sliding box and yaws it with no initial spin (slide 3: -18 deg), which rigid "
    "Coulomb friction cannot (a translating box's centre of pressure lies on its velocity line). "
    "See benchmarks/RESULTS.md, contact-objects"))
def test_collision_from_the_worst_initial_guess_meets_the_targets(worst_start_collision):
    fit, truth = worst_start_collision
    assert fit.status == "ok", fit.message
    assert _within_targets(fit.values, truth), (fit.values, truth)


def test_a_contact_within_the_first_poses_skips_the_stage_before_it(tmp_path):
    """A recording that starts MIN_POSES - 1 frames before the hit leaves too few poses for the
    friction stage before the contact: that stage is skipped (it raised DataError) and the
    collision is fitted. One scanned point and a short joint fit: the path, not the optimum."""
    bag, scene_path, calibration = _files(tmp_path, "collision", SCENE_COLLISION)
    parsed, observations, _ = load_inputs(scene_path, bag, calibration)
    hit = _scene("collision", SCENE_COLLISION)[1]["restitution"]["time"]
    times = observations["box"].times
    start = times[times < hit][-(MIN_POSES - 1)]
    cropped = {name: series.between(start=start) for name, series in observations.items()}
    settings = FitSettings(mass_ratios=(1.0,), restitution_grid=(0.3,), max_evaluations=CROPPED_EVALUATIONS, restarts=0)
    fit = fit_objects(parsed.world(), cropped, parsed.unknowns, at_rest=("target",), settings=settings)
    assert [e.pair for e in fit.events] == [("box", "target")] and fit.events[0].last_apart < hit
    assert [stage.name for stage in fit.stages] == ["scan of the box-target contact", "joint fit"]
    assert fit.status in STATUSES and set(fit.values) == set(parsed.unknowns)


def test_a_fit_that_does_not_explain_the_data_is_not_a_success(tmp_path, capsys):
    """A wrong camera calibration tilts gravity by 8.6 deg: no friction explains the slide.
    Exit 3, nothing written; with --allow-partial the diagnostics, never the values."""
    bag, scene_path, calibration = _files(tmp_path, "slide", SCENE_SLIDE)
    document = yaml.safe_load(calibration.read_text())
    x, y, z, qx, qy, qz, qw = document["parameters"]["camera.pose"]
    tilted = Rotation.from_quat([qx, qy, qz, qw]) * Rotation.from_rotvec([0.0, WRONG_CAMERA_TILT, 0.0])
    document["parameters"]["camera.pose"] = [x, y, z, *tilted.as_quat().tolist()]
    calibration.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    args = ["estimate-objects", "--bag", str(bag), "--scene", str(scene_path), "--calibration", str(calibration), "--out", str(out)]
    assert cli_main(args + ["--allow-partial"]) == UNDETERMINED
    err = capsys.readouterr().err
    assert "poor fit" in err and "camera noise" in err
    result = yaml.safe_load((out / "objects.yaml").read_text())
    assert result["status"] == "poor_fit" and result["estimates"] == {}
    assert "box/ground.friction" in result["unidentifiable"]


def _head_on_collision():
    """A box pushed at 2.4 m/s straight into the known box, 0.19 m away (3 poses before the hit);
    MuJoCo's box-box contact critically damped (it bounces back at restitution ~0.13)."""
    half = (0.06, 0.04, 0.025)
    box = scenes.Box("box", half, HEAD_ON_MASS, (0.0, 0.0, half[2]), 0.0, (2.4, 0.0, 0.0))
    centre = 0.19 + half[0] + scenes.TARGET_HALF[0]
    target = scenes.Box("target", scenes.TARGET_HALF, scenes.TARGET_MASS, (centre, 0.0, scenes.TARGET_HALF[2]), 0.0)
    scene = scenes.Scene("collision", (box, target), {"box": HEAD_ON_MU, "target": scenes.TARGET_MU}, damping=1.0, duration=1.4)
    return scene, scenes.simulate(scene)


def test_a_known_restitution_the_data_reject_makes_the_fit_poor(tmp_path):
    """Declared 0, the head-on hit's restitution is absorbed by the mass and friction (mass 4.7x,
    friction 2x the truth) with residuals at the camera noise, no drift and consistent data
    splits: every other check passes. Freed, it fits near MuJoCo's, and the fit is poor."""
    scene, sim = _head_on_collision()
    truth = scenes.truth_values(scene, sim)
    bag, scene_path, calibration = scenes.write_scene_files(scene, sim, tmp_path, seed=3, unknown=("box.mass", "box/ground.friction"),
                                                            override={"box/target.restitution": 0.0})
    parsed, observations, _ = load_inputs(scene_path, bag, calibration)
    fit = fit_objects(parsed.world(), observations, parsed.unknowns, initial=parsed.initial_guess, settings=FitSettings(restarts=0))
    assert fit.status == "poor_fit", fit.message
    assert fit.message.startswith("poor fit: the data disagree with the known box/target.restitution = 0"), fit.message
    assert fit.estimate.worst_ratio < QUALITY_LIMIT and max(max(r.values()) for r in fit.drift.values()) < DRIFT_LIMIT
    assert all(c.agrees(FitSettings().consistency_p_value / 2) for c in fit.estimate.consistency.values())
    assert fit.values["box.mass"] > 2 * truth["box.mass"]  # what an 'ok' would have reported
    freed = fit.stages[-1]
    assert freed.name == "check: box/target.restitution freed"
    assert abs(freed.values["box/target.restitution"] - truth["box/target.restitution"]) < HEAD_ON_FREED_TOL


def test_a_ctrl_c_that_a_library_swallows_stops_the_write(tmp_path, capsys, monkeypatch):
    """A real SIGINT while the fit runs, caught and dropped (as some libraries do): the fit goes on,
    but the command exits 130 and writes nothing, although --allow-partial writes any fit's outputs."""
    from diffsim_ros.cli import estimate_objects as command

    def progress_swallowing_a_ctrl_c(stage):
        if not swallowed:
            swallowed.append(stage)
            swallow_a_ctrl_c()
        progress(stage)

    swallowed, progress = [], command._progress
    monkeypatch.setattr(command, "_progress", progress_swallowing_a_ctrl_c)
    bag, scene_path, calibration = _files(tmp_path, "slide", SCENE_SLIDE)
    out = tmp_path / "out"
    args = ["estimate-objects", "--bag", str(bag), "--scene", str(scene_path), "--calibration", str(calibration),
            "--out", str(out), "--allow-partial", "--max-evaluations", str(CROPPED_EVALUATIONS)]
    with python_sigint_handler():  # as in a terminal (a pytest-xdist worker ignores SIGINT)
        code = cli_main(args)
    err = capsys.readouterr().err
    assert code == INTERRUPTED and swallowed, err
    assert "Traceback" not in err and err.splitlines()[-1] == "diffsim-ros estimate-objects: interrupted; nothing written"
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_quality_verdict_names_the_worst_residual():
    from diffsim_ros.estimation.object_events import PoseNoise
    from diffsim_ros.estimation.objects import QUALITY_LIMIT, quality_verdict

    noise = PoseNoise(position=1e-3, orientation=math.radians(0.2), windows=40)
    good = {"box": {"position": 1.1, "orientation": 0.9}, "target": {"position": 1.7, "orientation": 1.2}}
    assert quality_verdict(good, noise) is None
    bad = {**good, "target": {"position": 1.0, "orientation": QUALITY_LIMIT + 0.5}}
    message = quality_verdict(bad, noise)
    assert message.startswith("poor fit: the orientation residual of 'target' is 3.5x") and "0.7 deg per axis vs 0.2 deg" in message
    assert quality_verdict({}, None) is None  # too few poses to estimate the noise: no verdict


def test_residual_drift_separates_noise_from_a_model_that_departs_slowly():
    """White camera noise leaves block means at ~1x; a model departing steadily to two noise
    sigmas (as the 10 ms model's target yaw did), which raises the plain rms only to ~1.5x
    (within QUALITY_LIMIT), is far above the drift limit."""
    from diffsim_ros.estimation.object_events import PoseNoise
    from diffsim_ros.estimation.object_fit import DRIFT_LIMIT, residual_drift
    from diffsim_ros.estimation.objects import QUALITY_LIMIT

    rng = np.random.default_rng(SEED)
    sigma, count = 1e-3, 24
    noise = PoseNoise(position=sigma, orientation=math.radians(0.2), windows=40)
    times = np.arange(count) / 30.0
    identity = np.tile([1.0, 0.0, 0.0, 0.0], (count, 1))
    model = {"box": PoseSeries(times, np.zeros((count, 3)), identity)}
    worst_white = 0.0
    for _ in range(50):
        white = {"box": PoseSeries(times, rng.normal(0.0, sigma, (count, 3)), identity)}
        worst_white = max(worst_white, residual_drift(white, model, noise)["box"]["position"])
    assert worst_white < DRIFT_LIMIT
    departure = np.linspace(0.0, 2.0 * sigma, count)[:, None] * np.ones(3)
    drifting = {"box": PoseSeries(times, rng.normal(0.0, sigma, (count, 3)) + departure, identity)}
    rms_ratio = float(np.sqrt(np.mean(drifting["box"].position ** 2))) / sigma
    assert rms_ratio < QUALITY_LIMIT
    assert residual_drift(drifting, model, noise)["box"]["position"] > DRIFT_LIMIT
