"""The testbed: stand-ins for the lab, above the library layers and below the pipelines.

* :mod:`~diffsim_ros.testbed.mujoco_plant` — MuJoCo as the "real robot" (hidden true
  parameters, noisy sensors);
* :mod:`~diffsim_ros.testbed.hardware` — what Baxter and a ros2_control effort controller do
  with torque commands (used by sim_robot_node);
* :mod:`~diffsim_ros.testbed.scenarios` — recording scenarios driven on the plant;
* :mod:`~diffsim_ros.testbed.contact_reference` — MuJoCo twins of contact worlds;
* :mod:`~diffsim_ros.testbed.coulomb_box` — exact Coulomb friction of a box sliding and
  spinning on a plane (an ODE, no contact solver).

Only this package imports mujoco (the optional ``[sim]`` extra), and only inside the functions
that need it; nothing in the library layers below imports the testbed.
"""

__all__ = []
