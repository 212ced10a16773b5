"""diffsim_ros: differentiable robot physics for real-to-sim on ROS 2."""

__version__ = "0.1.0"
