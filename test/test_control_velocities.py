"""control.loop.JointVelocities: the velocities a control cycle uses (measured, else differenced)."""

import numpy as np

from diffsim_ros.control import JointVelocities


def test_measured_velocities_are_used_as_they_are():
    velocities = JointVelocities()
    qd = np.array([0.3, -0.2])
    assert velocities(0.0, np.zeros(2), qd) is qd
    assert velocities(0.01, np.ones(2), qd) is qd


def test_without_measured_velocities_the_last_two_samples_are_differenced():
    velocities = JointVelocities()
    np.testing.assert_array_equal(velocities(1.0, np.array([0.1, 0.2])), [0.0, 0.0])  # nothing to difference yet
    np.testing.assert_allclose(velocities(1.01, np.array([0.12, 0.17])), [2.0, -3.0], rtol=1e-9)


def test_no_difference_across_a_clock_jump():
    velocities = JointVelocities()
    velocities(5.0, np.array([0.0]), epoch=0)
    np.testing.assert_array_equal(velocities(0.5, np.array([1.0]), epoch=1), [0.0])  # the clock jumped back
    np.testing.assert_allclose(velocities(0.6, np.array([1.1]), epoch=1), [1.0], rtol=1e-9)
