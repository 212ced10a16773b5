"""std_srvs/srv/Trigger responses shared by the estimator nodes (save now, reset)."""

__all__ = ["TRIGGER", "reset_response", "save_response"]

TRIGGER = "std_srvs/srv/Trigger"


def save_response(node, what, busy_message):
    """``~/save_*``: the Trigger response of writing ``node``'s file now.

    Args:
        node: A node with ``busy``, ``save()`` (path or None), ``output_path`` and ``handle``.
        what: The file's name in messages (e.g. "calibration").
        busy_message: The answer while background work runs (its result is not saved yet).
    """
    if node.busy:
        return {"success": False, "message": busy_message}
    try:
        path = node.save()
    except OSError as err:  # an unwritable path must not stop the node
        message = f"{what} not saved to {node.output_path}: {err}"
        node.handle.get_logger().error(message)
        return {"success": False, "message": message}
    if path is None:
        return {"success": False, "message": "no accepted estimates yet: nothing to save"}
    return {"success": True, "message": str(path)}


def reset_response(node, busy_message, done_message):
    """``~/reset``: reset now, or when the running background work ends (its result is discarded)."""
    if node.busy:
        node._reset_requested = True
        return {"success": True, "message": busy_message}
    node._reset()
    return {"success": True, "message": done_message}
