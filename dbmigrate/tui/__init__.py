"""Interactive cutover session (Textual): the plan with live statuses, lag, latency, warm-up, gates."""
