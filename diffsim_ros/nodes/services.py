"""std_srvs/srv/Trigger responses shared by the estimator nodes (save now, reset)."""

__all__ = ["TRIGGER", "reset_response", "save_response", "trigger_services"]

TRIGGER = "std_srvs/srv/Trigger"


def save_response(node, what, busy_message):
    """``~/save_*``: the Trigger response of writing ``node``'s file now.

    Args:
        node: A node with ``busy``, ``save()`` (path or None), ``output_path`` and ``handle``.
        what: The file's name in messages (e.g. "calibration").
        busy_message: The answer while background work runs (its result is not saved yet);
            None: the node's ``save()`` writes what it had accepted before the work started,
            so the save is answered at once while the work runs.
    """
    if node.busy and busy_message is not None:
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


def trigger_services(node, save_service, what, save_busy, reset_busy, reset_done):
    """Create ``~/<save_service>`` and ``~/reset`` (std_srvs/srv/Trigger) on ``node.handle``.

    Args:
        node: As :func:`save_response` and :func:`reset_response` (also ``_reset()``).
        save_service: Name of the save service (e.g. "save_calibration").
        what, save_busy: :func:`save_response`'s ``what`` and ``busy_message`` (None: saves while busy).
        reset_busy, reset_done: :func:`reset_response`'s messages.

    Returns:
        The save handler, ``handler(request) -> response`` (for other ways to ask for a save).
    """
    def save(request):
        return save_response(node, what, save_busy)

    node.handle.create_service(TRIGGER, f"~/{save_service}", save)
    node.handle.create_service(TRIGGER, "~/reset", lambda request: reset_response(node, reset_busy, reset_done))
    return save
