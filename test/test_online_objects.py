"""Online object contact estimation (issue 14, item 2): object_estimator_node on the embedded runtime.

Data: one short slide of test/contact_scenes.py (MuJoCo, a rectangular box pushed 15 deg+
off-axis, elliptic cone, 30 Hz PoseStamped in the camera frame with 1 mm / 0.2 deg noise),
recorded as a live camera sees it: the box lies still before the push and after the stop.
The bag is played into the node in recorded time; the node finds the event in the stream,
fits it with the offline engine and publishes the estimate. Checked:

* the node fits exactly the poses ``estimate-objects`` reads from the bag (its loading, the
  window cut to the event) with ``fit_objects``, and publishes that fit's friction and std,
  within issue 19's slide target of the truth (re-fitting offline costs another ~15 s under
  load: ``benchmarks/bench_online_objects.py`` does it, identical to 3e-16);
* objects.yaml through ``~/save_objects``, in the offline layout;
* a wrong camera calibration (2 cm off) gives a rejected event, nothing published;
* malformed poses are dropped and counted, a fit that raises is counted, nothing crashes,
  poses queued during a fit are bounded;
* the estimator's event logic: a push seen without the rest before it is not fitted; the warm
  start, budgets and plausibility gate; the inverse-variance combination with its Birge-ratio
  inflation.
"""

import dataclasses
import functools
import math

import contact_scenes as scenes
import numpy as np
import pytest
import yaml
from scipy.spatial.transform import Rotation

from diffsim_ros.pipelines.objects import load_inputs
from diffsim_ros.estimation.online_objects import OnlineObjectEstimator, OnlineObjectEstimatorConfig, combine_estimates
from diffsim_ros.io.ros_messages import pose_stamped_msg
from diffsim_ros.io.ros_types import FLOAT64_MULTI_ARRAY, POSE_STAMPED
from diffsim_ros.io.scene import load_scene
from diffsim_ros.nodes.messages import estimates_from_msg
from diffsim_ros.nodes.object_estimator_node import ObjectEstimatorNode, ObjectEstimatorNodeConfig
from diffsim_ros.runtime import LATCHED_QOS, SENSOR_QOS
from diffsim_ros.runtime.embedded import EmbeddedRuntime
from diffsim_ros.runtime.params import parameter_specs
from oracles import REPO

SCENE = 10  # contact_scenes.random_slide(SCENE): the shortest slide of the first dozen (0.38 s)
REST_BEFORE = 0.3  # [s] the box lies still before the push
REST_AFTER = 0.1  # [s] recorded beyond the scene's own 0.15 s after the stop
FRICTION = "box/ground.friction"
SAME_DATA_TOL = 1e-9  # [s], [m], quaternion components: the node fits exactly the poses estimate-objects reads
MU_REL_TOL = 0.02  # issue 19's slide target: mu within 2 % ...
STD_FACTOR = 2.0  # ... or within 2 reported std
# A camera calibration 2 cm too high: the box seems to float above the ground. (A tilted camera
# fails too, but the cone solver needs ~30 s under load for the scan of a box tilted against the ground.)
WRONG_CAMERA_HEIGHT = 0.02  # [m]
WRONG_CAMERA_EVALUATIONS = 2  # the joint fit's budget there: the verdict, not the optimum, is under test
SPIN_MARGIN = 1.0  # [s] of runtime after the bag's end (the fit's completion is the next event)


@functools.lru_cache(maxsize=None)
def _slide():
    scene = scenes.random_slide(SCENE)
    scene = dataclasses.replace(scene, duration=scene.duration + REST_AFTER)
    sim = scenes.simulate(scene)
    return scene, sim, scenes.pose_stream(scene, sim, seed=SCENE, rest_before=REST_BEFORE)


@pytest.fixture(scope="module")
def slide_files(tmp_path_factory):
    scene, sim, samples = _slide()
    return scenes.write_scene_files(scene, sim, tmp_path_factory.mktemp("slide"), seed=SCENE, samples=samples,
                                    unknown=("box.mass", FRICTION))


def _run_node(bag, scene_path, calibration, out_dir, **overrides):
    """Play the bag into object_estimator_node, then call ~/save_objects.

    Returns:
        ``(node, decoded estimates messages, log records, save response)``.
    """
    received = []
    parameters = {"scene_file": str(scene_path), "calibration_file": str(calibration),
                  "objects_output": str(out_dir / "objects.yaml"), "save_on_shutdown": False, **overrides}
    with EmbeddedRuntime() as runtime:
        node = runtime.add_node(ObjectEstimatorNode, "object_estimator", parameter_overrides=parameters)
        listener = runtime.create_node("listener")
        listener.create_subscription(FLOAT64_MULTI_ARRAY, "/object_estimator/estimates",
                                     lambda msg: received.append(estimates_from_msg(msg)), LATCHED_QOS)
        player = runtime.play_bag(bag, publish_clock=False)
        runtime.spin_until_condition(lambda: player.done, timeout_s=30.0)
        runtime.spin_for(SPIN_MARGIN)
        save = runtime.call_service("/object_estimator/save_objects")
        return node, received, list(runtime.log_records), save


@pytest.fixture(scope="module")
def slide_run(slide_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    return (*_run_node(*slide_files, out), out)


def test_the_node_fits_the_poses_estimate_objects_reads_and_publishes_the_fit(slide_files, slide_run, tmp_path):
    bag, scene_path, calibration = slide_files
    node, received, logs, _, _ = slide_run
    assert not [r for r in logs if r.level in ("error", "fatal")], logs
    (outcome,) = [o for o in node.estimator.outcomes if o.status != "skipped"]
    assert outcome.accepted, outcome.reason
    # The same poses as offline: estimate-objects' loading (bag, camera calibration, window cut
    # to the event; times from the bag's first pose, the node's from its first pose).
    start, end, fitted = node.estimator.last_event
    document = yaml.safe_load(scene_path.read_text())
    document["window"] = {"start": start - 1e-4, "end": end + 1e-4}
    windowed = tmp_path / "scene_window.yaml"
    windowed.write_text(yaml.safe_dump(document))
    _, offline, _ = load_inputs(windowed, bag, calibration)
    assert list(offline) == list(fitted) == ["box"]
    for name, series in offline.items():
        mine = fitted[name]
        assert len(mine) == len(series) == outcome.poses[name]
        np.testing.assert_allclose(mine.times, series.times - series.times[0], atol=SAME_DATA_TOL)
        np.testing.assert_allclose(mine.position, series.position, atol=SAME_DATA_TOL)
        np.testing.assert_allclose(mine.orientation, series.orientation, atol=SAME_DATA_TOL)
    # ... fitted by fit_objects (the offline engine), published as it came out
    fit = node.estimator.last_fit
    assert fit.status == "ok" and "box.mass" in fit.not_estimated  # a slide does not involve the mass
    assert len(received) == 1 and received[0][0] == {FRICTION: fit.values[FRICTION]}
    assert received[0][1] == {FRICTION: fit.std[FRICTION]}
    truth = _slide()[0].ground_mu["box"]
    mu, std = fit.values[FRICTION], fit.std[FRICTION]
    assert abs(mu / truth - 1) < MU_REL_TOL or abs(mu - truth) < STD_FACTOR * std, (mu, std, truth)


def test_objects_yaml_is_written_on_request_in_the_offline_layout(slide_run):
    node, received, _, save, out = slide_run
    assert save == {"success": True, "message": str(out / "objects.yaml")}
    saved = yaml.safe_load((out / "objects.yaml").read_text())
    values, std = received[-1]
    assert saved["estimates"] == {FRICTION: {"value": values[FRICTION], "std": std[FRICTION]}}
    assert saved["status"] == "undetermined" and saved["unidentifiable"] == {}
    assert list(saved["not_estimated"]) == ["box.mass"] and "does not depend on its mass" in saved["not_estimated"]["box.mass"]
    assert saved["online"]["counts"] == {"accepted": 1, "rejected": 0, "skipped": 0}
    assert saved["online"]["events"][0]["poses"] == node.estimator.outcomes[-1].poses


def test_wrong_camera_gives_no_accepted_estimate(slide_files, tmp_path):
    bag, scene_path, calibration = slide_files
    document = yaml.safe_load(calibration.read_text())
    document["parameters"]["camera.pose"][2] += WRONG_CAMERA_HEIGHT
    wrong = tmp_path / "wrong_camera.yaml"
    wrong.write_text(yaml.safe_dump(document))
    node, received, logs, save = _run_node(bag, scene_path, wrong, tmp_path, max_evaluations=WRONG_CAMERA_EVALUATIONS)
    assert received == [] and node.published == 0 and not node.estimator.values
    (outcome,) = [o for o in node.estimator.outcomes if o.status != "skipped"]
    assert outcome.status == "rejected" and outcome.fit_status == "poor_fit" and outcome.reason.startswith("poor fit")
    assert any("rejected: poor fit" in r.message for r in logs if r.level == "warning")
    assert not save["success"] and not (tmp_path / "objects.yaml").exists()


def test_malformed_poses_are_dropped_and_counted(slide_files, tmp_path):
    _, scene_path, calibration = slide_files
    base = scenes.START_STAMP_NS
    with EmbeddedRuntime() as runtime:
        node = runtime.add_node(ObjectEstimatorNode, "object_estimator", parameter_overrides={
            "scene_file": str(scene_path), "calibration_file": str(calibration), "pose_frame": "camera",
            "save_on_shutdown": False})
        publisher = runtime.create_node("camera").create_publisher(POSE_STAMPED, scenes.TOPICS["box"], SENSOR_QOS)
        factory, good = runtime.messages, ([0.1, 0.2, 1.0], [1.0, 0.0, 0.0, 0.0])
        sent = [
            (base + 10_000_000, "camera", *good),
            (base + 20_000_000, "camera", [math.nan, 0.2, 1.0], good[1]),  # non-finite
            (base + 5_000_000, "camera", *good),  # out of order
            (base + 30_000_000, "world", *good),  # unknown frame
            (base + 40_000_000, "camera", good[0], [0.0, 0.0, 0.0, 0.0]),  # zero quaternion
            (base + 50_000_000, "camera", [1e6, 0.0, 0.0], good[1]),  # outside the camera's reach
            (base + 60_000_000, "camera", *good),
        ]
        for stamp, frame, position, quaternion in sent:
            msg = pose_stamped_msg(factory, stamp, frame, [0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0])
            msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = position
            msg.pose.orientation.w, msg.pose.orientation.x, msg.pose.orientation.y, msg.pose.orientation.z = quaternion
            publisher.publish(msg)
            runtime.spin_for(0.05)
        runtime.spin_for(1.5)  # diagnostics and update checks run on the malformed window
        counters = node.inputs["box"].counters
        assert (counters.received, counters.accepted) == (7, 2)
        assert (counters.dropped_nonfinite, counters.dropped_out_of_order, counters.dropped_invalid) == (1, 1, 3)
        assert node.estimator.pose_count == {"box": 2}
        logs = [r for r in runtime.log_records if r.node == "object_estimator"]
        assert any("expected 'camera'" in r.message for r in logs)
        assert not [r for r in logs if r.level in ("error", "fatal") and "Traceback" in r.message]


def test_start_up_errors_name_the_problem(slide_files, tmp_path):
    _, scene_path, _ = slide_files
    with EmbeddedRuntime() as runtime:
        with pytest.raises(ValueError, match="scene_file is required"):
            runtime.add_node(ObjectEstimatorNode, "a", parameter_overrides={"save_on_shutdown": False})
        with pytest.raises(ValueError, match="one topic per scene object"):
            runtime.add_node(ObjectEstimatorNode, "b", parameter_overrides={
                "scene_file": str(scene_path), "pose_topics": ["/x", "/y"], "save_on_shutdown": False})
        calibration = tmp_path / "no_camera.yaml"
        calibration.write_text(yaml.safe_dump({"parameters": {}}))
        with pytest.raises(ValueError, match="no camera.pose"):
            runtime.add_node(ObjectEstimatorNode, "c", parameter_overrides={
                "scene_file": str(scene_path), "calibration_file": str(calibration), "save_on_shutdown": False})


def _world_stream(samples):
    """contact_scenes camera samples -> time-ordered (name, t, position, quaternion) in the base frame."""
    from diffsim_ros.io.object_poses import camera_to_base

    (x, y, z), (w, qx, qy, qz) = scenes.CAMERA_POSE
    camera = np.eye(4)
    camera[:3, :3] = Rotation.from_quat([qx, qy, qz, w]).as_matrix()
    camera[:3, 3] = (x, y, z)
    rows = []
    for name, (times, position, quat) in samples.items():
        position, quat = camera_to_base(camera, position, quat)
        rows += [(name, float(t), p, q) for t, p, q in zip(times, position, quat)]
    return sorted(rows, key=lambda row: row[1])


def test_a_push_without_the_rest_before_it_is_not_fitted(slide_files):
    """The stream starting mid-slide: the push and the start of the free motion are unknown."""
    _, scene_path, _ = slide_files
    scene = load_scene(scene_path)
    estimator = OnlineObjectEstimator(scene.world(), scene.unknowns, OnlineObjectEstimatorConfig())
    for row in _world_stream(_slide()[2]):
        if row[1] > 0.05:  # from the second frame after the push on
            estimator.add_pose(*row)
    outcome = estimator.update()
    assert outcome is not None and outcome.status == "skipped" and "lying still before the motion" in outcome.reason
    assert estimator.update() is None and not estimator.values  # reported once, never fitted


def test_combination_weights_by_inverse_variance_and_inflates_disagreement():
    mean, std, birge = combine_estimates([0.30, 0.32], [0.01, 0.02])
    assert mean == pytest.approx((0.30 / 1e-4 + 0.32 / 4e-4) / (1 / 1e-4 + 1 / 4e-4))
    assert std == pytest.approx(1 / math.sqrt(1 / 1e-4 + 1 / 4e-4)) and birge < 1
    mean, std, birge = combine_estimates([0.30, 0.40], [0.01, 0.01])  # 7 sigma apart
    assert mean == pytest.approx(0.35) and birge == pytest.approx(0.05 / 0.01 * math.sqrt(2))
    assert std == pytest.approx(0.01 / math.sqrt(2) * birge)
    assert combine_estimates([0.3], [0.0])[0] == 0.3  # a zero std keeps a finite weight


def test_the_node_parameters_are_documented_with_their_defaults():
    from test_nodes_docs import documented_parameters

    documented = documented_parameters("object_estimator_node")
    specs = parameter_specs(ObjectEstimatorNodeConfig)
    assert list(documented) == [spec.name for spec in specs]
    for spec in specs:
        default = list(spec.default) if spec.element is not None else spec.default
        assert documented[spec.name] == ("" if default == "" else default), spec.name
    assert "object_estimator_node = diffsim_ros.nodes.object_estimator_node:main" in (REPO / "setup.py").read_text()


def test_fits_are_warm_started_from_the_current_estimates_within_their_budgets(slide_files):
    _, scene_path, _ = slide_files
    scene = load_scene(scene_path)
    config = OnlineObjectEstimatorConfig(max_evaluations=7, stage_evaluations=5, restarts=1)
    estimator = OnlineObjectEstimator(scene.world(), scene.unknowns, config)
    cold = estimator.fit_settings()
    estimator.values, estimator.std = {FRICTION: 0.4321}, {FRICTION: 0.01}
    warm = estimator.fit_settings()
    assert 0.4321 in warm.friction_grid and 0.4321 not in cold.friction_grid
    assert set(cold.friction_grid) <= set(warm.friction_grid)  # the global scan stays: a changed surface is found
    assert (warm.max_evaluations, warm.stage_evaluations, warm.restarts) == (7, 5, 1)
    assert estimator.implausible({FRICTION: 2.5, "box.mass": 0.0}) == \
        "box/ground.friction = 2.5 outside [0, 2]; box.mass = 0 outside (0, 50]"


def test_a_failing_fit_is_logged_and_counted_and_the_node_goes_on(slide_files):
    _, scene_path, calibration = slide_files
    with EmbeddedRuntime() as runtime:
        node = runtime.add_node(ObjectEstimatorNode, "object_estimator", parameter_overrides={
            "scene_file": str(scene_path), "calibration_file": str(calibration), "save_on_shutdown": False})
        events = iter([(1.0, 2.0, {})])
        node.estimator.next_event = lambda: next(events, None)

        def broken(*event):
            raise RuntimeError("solver exploded")

        node.estimator.fit_event = broken
        runtime.spin_for(1.5)
        assert not node.busy and node.published == 0
        assert node.estimator.counts == {"accepted": 0, "rejected": 1, "skipped": 0}
        assert node.last_outcome.reason == "fit failed: RuntimeError: solver exploded"
        errors = [r.message for r in runtime.log_records if r.level == "error"]
        assert errors == ["object fit failed: RuntimeError: solver exploded"]


def test_poses_queued_during_a_fit_are_bounded(slide_files):
    _, scene_path, calibration = slide_files
    with EmbeddedRuntime() as runtime:
        node = runtime.add_node(ObjectEstimatorNode, "object_estimator", parameter_overrides={
            "scene_file": str(scene_path), "calibration_file": str(calibration), "save_on_shutdown": False,
            "max_poses": 20, "update_check_period": 100.0})
        publisher = runtime.create_node("camera").create_publisher(POSE_STAMPED, scenes.TOPICS["box"], SENSOR_QOS)
        node.busy = True  # as while a (minutes-long) collision fit runs
        for k in range(50):
            publisher.publish(pose_stamped_msg(runtime.messages, scenes.START_STAMP_NS + k * 33_000_000, "camera",
                                               [0.1, 0.2, 1.0 + 1e-3 * k], [1.0, 0.0, 0.0, 0.0]))
            runtime.spin_for(0.033)
        assert node.inputs["box"].counters.accepted == 50 and len(node._pending) == 20
        assert node._pending[-1][1] == pytest.approx(49 * 0.033)  # the newest kept
