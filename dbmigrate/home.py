"""Where dbmigrate keeps its own files: $DBMIGRATE_HOME, else ~/.dbmigrate."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("DBMIGRATE_HOME") or "~/.dbmigrate").expanduser()
