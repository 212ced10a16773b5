"""diffsim_ros.estimation."""
