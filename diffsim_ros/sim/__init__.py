"""diffsim_ros.sim."""
