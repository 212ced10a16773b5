"""diffsim_ros.runtime."""
