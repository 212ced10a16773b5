"""diffsim_ros.control."""
