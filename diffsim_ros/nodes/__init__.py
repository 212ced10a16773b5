"""diffsim_ros.nodes."""
