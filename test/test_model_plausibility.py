"""Plausibility bounds: the one definition identification and control share."""

import math

import numpy as np
import pytest
import torch

from diffsim_ros.model import DEFAULT_BOUNDS, PlausibilityBounds, plausibility_violations
from diffsim_ros.model.plausibility import parameter_kind, scalar_bounds


def test_plausible_values_pass():
    values = {
        "payload.mass": 1.3, "payload.com": [0.0, 0.0, 0.08], "left_s1.spring.stiffness": 9600.0,
        "left_s1.spring.offset": 0.1, "left_e0.damping": 0.0, "left_e0.friction": torch.tensor(0.4, dtype=torch.float64),
        "left_upper_shoulder.mass": 5.7, "left_upper_shoulder.inertia": [0.05, 0.0, 0.0, 0.04, 0.0, 0.02],
        "camera.pose": [1.0, 0.5, 1.2, 0.0, 0.0, 0.0, 1.0], "left_e0.origin.xyz": [0.1, 0.0, 0.3],
    }
    assert plausibility_violations(values) == {}


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("payload.mass", -50.0, "outside"),
        ("payload.mass", 1e6, "outside"),
        ("payload.com", [-3.2e6, 3.2e6, 1.1e7], "beyond 0.5 m"),
        ("left_s1.spring.stiffness", -1e6, "outside"),
        ("left_s1.spring.stiffness", 0.0, "> 0"),
        ("left_e0.damping", -100.0, "outside"),
        ("left_e0.friction", math.nan, "not finite"),
        ("left_e0.damping", math.inf, "not finite"),
        ("left_upper_shoulder.mass", 0.0, "> 0"),
        ("left_upper_shoulder.inertia", [1.0, 0.0, 0.0, 1.0, 0.0, 3.0], "triangle"),
        ("left_upper_shoulder.inertia", [1.0, 0.0, 0.0, -1.0, 0.0, 1.0], "positive"),
        ("camera.pose", [1e300, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], "beyond"),
        ("camera.pose", [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0], "quaternion"),
        ("payload.mass", "heavy", "not a number"),
    ],
)
def test_implausible_values_are_named(name, value, words):
    reasons = plausibility_violations({name: value})
    assert list(reasons) == [name]
    assert words in reasons[name]


def test_bounds_from_mapping_validates():
    bounds = PlausibilityBounds.from_mapping({"payload_mass_max": 5})
    assert bounds.payload_mass_max == 5.0
    assert "outside" in plausibility_violations({"payload.mass": 6.0}, bounds)["payload.mass"]
    with pytest.raises(ValueError, match="unknown bounds"):
        PlausibilityBounds.from_mapping({"payload_mass": 5})
    with pytest.raises(ValueError, match="must be a number"):
        PlausibilityBounds.from_mapping({"payload_mass_max": "five"})
    with pytest.raises(ValueError, match="positive finite"):
        PlausibilityBounds(damping_max=-1.0)


def test_scalar_bounds_and_kinds():
    assert parameter_kind("left_s1.spring.stiffness") == "spring.stiffness"
    assert parameter_kind("left_hand.com") == "com"
    assert parameter_kind("camera.pose") == "camera.pose"
    assert parameter_kind("something") is None
    assert scalar_bounds("payload.mass") == (0.0, DEFAULT_BOUNDS.payload_mass_max)
    assert scalar_bounds("left_s1.spring.offset") == (-math.pi, math.pi)
    assert scalar_bounds("payload.com") is None
    assert np.isfinite(scalar_bounds("left_e0.friction")).all()
