"""The names a user chooses from: models, parameter groups, torque holds, losses, bag storages.

Each tuple is defined here once, and imports nothing, so that the command line can offer the
choices (``--help``, argument errors) without loading torch, numba or rosbags: the libraries
that implement them import these names from here.
"""

__all__ = ["GROUPS", "HOLDS", "MODELS", "ONLINE_METHODS", "STORAGES", "TORQUE_SOURCES", "TRAJECTORY_LOSSES"]

MODELS = ("rigid", "pbd")
"""Differentiable models: exact rigid-body dynamics, or the articulated PBD simulator."""

ONLINE_METHODS = ("batch", "streaming")
"""Online estimators: a windowed batch refit per update, or streaming statistics (rigid model)."""

GROUPS = ("payload", "spring", "damping", "friction", "armature", "inertia", "camera", "link_lengths", "effort_bias", "effort_delay")
"""Parameter groups identification can estimate (``--estimate``)."""

HOLDS = ("zoh", "linear", "cubic")
"""How torques act between their samples: held from each stamp on (``"zoh"``: what a robot
does with the commands it receives), or interpolated (``"linear"``, ``"cubic"``: samples of a
continuously varying torque, e.g. measured efforts)."""

TORQUE_SOURCES = ("auto", "commanded", "effort")
"""Torques of the motion: commanded, measured efforts, or commanded when the bag has them."""

TRAJECTORY_LOSSES = ("auto", "inverse_dynamics", "simulator_dynamics", "rollout")
"""Losses on motion: torques through inverse dynamics, one-step simulator residuals, or rollouts."""

STORAGES = ("sqlite3", "mcap")
"""rosbag2 storage plugins read and written."""
