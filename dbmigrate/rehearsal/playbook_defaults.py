"""What every rehearsal's playbook sets beyond the procedure's defaults, and why."""

# Under the rehearsal's sysbench load about 3 fences in 100 meet two application transactions
# waiting on each other's row locks; the fence's watchdog then gives that fence up (nothing
# changed). A production playbook decides for itself; a rehearsal tries again after writes
# flowed for a moment, as the fault matrix does, so that it rehearses the cutover rather than
# failing on that chance.
REHEARSAL_FENCE = {"fence_attempts": 3, "fence_retry_pause_s": 0.5}
