"""Scene files for object estimation, camera-only calibrations, and the CLI's bad-input paths.

The scene file names every object, its size and topic, the known masses and every pair's
coefficients explicitly; ``unknown`` marks what to estimate and carries no value.
"""

import copy

import pytest
import yaml

from diffsim_ros.cli import main
from diffsim_ros.cli.exits import BAD_INPUT
from diffsim_ros.io.calibration import load_calibration
from diffsim_ros.io.scene import SceneError, load_scene, parse_scene
from diffsim_ros.sim.contact import Box, Plane

SCENE = {
    "objects": [
        {"name": "box", "box": [0.12, 0.08, 0.06], "mass": "unknown", "topic": "/camera/box_pose"},
        {"name": "target", "box": [0.1, 0.1, 0.06], "mass": 0.6, "topic": "/camera/target_pose"},
    ],
    "pairs": [
        {"between": ["box", "ground"], "friction": "unknown", "restitution": 0.0},
        {"between": ["target", "ground"], "friction": 0.3, "restitution": 0.0},
        {"between": ["target", "box"], "friction": 0.2, "restitution": "unknown"},
    ],
    "initial_guess": {"box.mass": 0.8},
}


def _scene(**changes):
    raw = copy.deepcopy(SCENE)
    raw.update(changes)
    return raw


def test_scene_names_unknowns_per_pair_and_builds_the_world():
    scene = parse_scene(copy.deepcopy(SCENE))
    assert scene.unknowns == ("box.mass", "box/ground.friction", "target/box.restitution")
    assert scene.known == {"target.mass": 0.6, "box/ground.restitution": 0.0, "target/ground.friction": 0.3,
                           "target/ground.restitution": 0.0, "target/box.friction": 0.2}
    assert scene.topics == {"box": "/camera/box_pose", "target": "/camera/target_pose"}
    assert isinstance(scene.objects[0].shape, Box) and scene.objects[0].shape.half_extents == (0.06, 0.04, 0.03)
    assert isinstance(scene.static[0].shape, Plane)  # default ground
    world = scene.world({"target/box.restitution": 0.4})
    # Every pair has its own coefficients: the box-box restitution does not touch the ground pairs.
    assert float(world.get_parameter("box/target.restitution")) == pytest.approx(0.4)
    assert float(world.get_parameter("box/ground.restitution")) == 0.0
    assert float(world.get_parameter("box/target.friction")) == pytest.approx(0.2)
    assert float(world.get_parameter("box.mass")) == pytest.approx(0.8)  # the initial guess
    assert float(world.get_parameter("target.mass")) == pytest.approx(0.6)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"pairs": SCENE["pairs"][:2]}, r"pairs without coefficients: \['box/target'\]"),
        ({"colour": "red"}, r"unknown keys \['colour'\]"),
        ({"objects": [{**SCENE["objects"][0], "mass": -1.0}, SCENE["objects"][1]]}, r"objects.box.mass \[kg\]: -1.0 is outside"),
        ({"objects": [{**SCENE["objects"][0], "mass": "heavy"}, SCENE["objects"][1]]}, "expected a number, got 'heavy'"),
        ({"objects": [{**SCENE["objects"][0], "mass": None}, SCENE["objects"][1]]}, "missing; give a number or 'unknown'"),
        ({"objects": [SCENE["objects"][0], {**SCENE["objects"][1], "name": "box"}]}, "the name 'box' is used twice"),
        ({"objects": [{**SCENE["objects"][0], "name": "a/b"}]}, "without '/' or '.'"),
        ({"objects": [{**SCENE["objects"][0], "box": [0.1, 0.1]}, SCENE["objects"][1]]}, "list of 3 numbers"),
        ({"objects": [{**SCENE["objects"][0], "sphere": 0.1}, SCENE["objects"][1]]}, "exactly one shape"),
        ({"objects": [{**SCENE["objects"][0], "topic": "box_pose"}, SCENE["objects"][1]]}, "PoseStamped topic"),
        ({"pairs": SCENE["pairs"] + [SCENE["pairs"][0]]}, "listed twice"),
        ({"pairs": [{**SCENE["pairs"][0], "restitution": 1.5}] + SCENE["pairs"][1:]}, r"restitution: 1.5 is outside"),
        ({"pairs": [{**SCENE["pairs"][0], "between": ["box", "table"]}] + SCENE["pairs"][1:]}, "two different names"),
        ({"initial_guess": {"target.mass": 1.0}}, "initial_guess.target.mass: not an unknown"),
        ({"model": {"solver": "pgs"}}, "one of"),
        ({"window": {"start": 1.0, "end": 0.5}}, r"window.end \[s\]: 0.5 is outside"),
    ],
)
def test_bad_scenes_are_refused_naming_the_entry(change, message):
    with pytest.raises(SceneError, match=message):
        parse_scene(_scene(**change), "scene.yaml")


def test_scene_file_errors(tmp_path):
    with pytest.raises(SceneError, match="scene file not found"):
        load_scene(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("objects: [")
    with pytest.raises(SceneError, match="invalid YAML"):
        load_scene(bad)
    good = tmp_path / "scene.yaml"
    good.write_text(yaml.safe_dump(SCENE))
    assert load_scene(good).path == str(good)


def test_camera_only_calibration_loads_without_a_robot_name(tmp_path):
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump({"parameters": {"camera.pose": [1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0]}}))
    calibration = load_calibration(path)
    assert calibration.robot == ""
    assert calibration.camera_pose[:3, 3].tolist() == [1.0, 0.0, 0.5]


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    scene = tmp_path / "scene.yaml"
    scene.write_text(yaml.safe_dump(_scene(pairs=SCENE["pairs"][:2])))
    out = tmp_path / "out"
    code = main(["estimate-objects", "--bag", str(tmp_path / "bag"), "--scene", str(scene), "--out", str(out)])
    assert code == BAD_INPUT
    assert "pairs without coefficients" in capsys.readouterr().err
    assert not out.exists()
    scene.write_text(yaml.safe_dump(SCENE))
    code = main(["estimate-objects", "--bag", str(tmp_path / "bag"), "--scene", str(scene), "--out", str(out)])
    assert code == BAD_INPUT
    assert "bag" in capsys.readouterr().err
    assert not out.exists()
