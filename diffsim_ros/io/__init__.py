"""diffsim_ros.io."""
