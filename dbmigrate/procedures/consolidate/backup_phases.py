"""Which phase a running mariadb-backup is in, read from the lines it writes to stderr.

What the old server feels of a physical copy is decided at its end. Measured on
MariaDB 10.11 (a writer committing every 5 ms, the stream paced at 10 MB/s):

    Starting BACKUP STAGE FLUSH           non-InnoDB files, DDL blocked from BLOCK_DDL on
    Starting BACKUP STAGE BLOCK_COMMIT    every commit on the server waits from here
    Waiting for log copy thread ...       up to --log-copy-interval (default 1 s) under the lock
    Executing FLUSH ... ENGINE LOGS       the redo copied since the start (kept in a temporary
                                          file while streaming) is written to the stream now
    All tables unlocked                   commits go on

The writer's longest stall was the time between BLOCK_COMMIT and "All tables
unlocked": 1.6 s with the redo tail (8 MB) streamed through the paced relay and the
log copy thread's 1 s poll; 80 ms with the relay unpaced from FLUSH on and a 10 ms
poll. A copy paced or paused while the server holds the commit lock stretches the
lock by the time the tail spends in the valve: a long copy under writes has a large
redo tail. So from the first locking stage to the unlock the copy is never paced.
What is left under the lock is the tail crossing at the link's full speed: the redo
written since the last checkpoint before the copy began, plus during it; each seed
records how many bytes that was (bytes_under_commit_lock).
Older servers (and --no-backup-locks) take the global read lock (FTWRL) instead,
which blocks every write until the same unlock line.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

FTWRL = "the global read lock (FTWRL)"

COMMIT_LOCKS = ("BACKUP STAGE BLOCK_COMMIT", FTWRL)  # every commit on the source waits in these

# (text in the line, phase it starts, does the server block writes or commits from here)
_MARKS: tuple[tuple[str, str, bool], ...] = (
    ("Starting BACKUP STAGE FLUSH", "BACKUP STAGE FLUSH", True),
    ("Started BACKUP STAGE BLOCK_DDL", "BACKUP STAGE BLOCK_DDL", True),
    ("Starting BACKUP STAGE BLOCK_DDL", "BACKUP STAGE BLOCK_DDL", True),
    ("Starting BACKUP STAGE BLOCK_COMMIT", "BACKUP STAGE BLOCK_COMMIT", True),
    # Older servers' global read lock (FTWRL), as the backup logs it before it takes it.
    ("TABLES WITH READ LOCK", FTWRL, True),
    ("All tables unlocked", "unlocked", False),
    ("completed OK!", "completed", False),
)

# The log copy thread's poll, in ms: under the commit lock the backup waits for it to
# reach the lock's LSN, so its interval (1 s by default) is a stall the application feels.
LOG_COPY_INTERVAL_MS = 10


class BackupPhases:
    """Fed mariadb-backup's stderr lines; says whether the server is in the backup's locking
    stages now, and for how long it was (the stall those stages can cause at most)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 on_change: Optional[Callable[["BackupPhases"], None]] = None):
        self.clock = clock
        self.on_change = on_change
        self.phase = "copying"
        self.locked_since: Optional[float] = None
        self.locked_s = 0.0  # the locking stages' whole duration (start of FLUSH to the unlock)
        self.commit_lock_s = 0.0  # BLOCK_COMMIT / FTWRL to the unlock: every commit waited
        self._commit_since: Optional[float] = None
        self._lock = threading.Lock()

    @property
    def locking(self) -> bool:
        return self.locked_since is not None

    def reason(self) -> Optional[str]:
        """Why the copy must not be paced now (None: it may be)."""
        if self.locked_since is None:
            return None
        return f"not paced: the backup holds {self.phase} on the source"

    def feed(self, line: str) -> None:
        for text, phase, locks in _MARKS:
            if text in line:
                self._enter(phase, locks)
                return

    def _enter(self, phase: str, locks: bool) -> None:
        with self._lock:
            now = self.clock()
            if phase == self.phase:
                return
            if locks and self.locked_since is None:
                self.locked_since = now
            if locks and self._commit_since is None and phase in COMMIT_LOCKS:
                self._commit_since = now
            if not locks:
                if self.locked_since is not None:
                    self.locked_s += now - self.locked_since
                if self._commit_since is not None:
                    self.commit_lock_s += now - self._commit_since
                self.locked_since = self._commit_since = None
            self.phase = phase
        if self.on_change is not None:
            self.on_change(self)
