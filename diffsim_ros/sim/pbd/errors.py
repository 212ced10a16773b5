"""Errors and warnings of the PBD simulator."""

__all__ = ["PBDError", "PBDConvergenceWarning"]


class PBDError(ValueError):
    """Invalid input to, or a failure of, the PBD simulator.

    Raised for non-finite states or torques, unsupported models (massless bodies), and
    simulations that diverge; the message names the offending body, joint or argument.
    """


class PBDConvergenceWarning(RuntimeWarning):
    """The joint constraints were left violated beyond the simulator's residual tolerance."""
