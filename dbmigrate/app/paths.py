"""Checks of the tool's own paths ($DBMIGRATE_HOME, the journal) before anything
opens them, so that a wrong path is one line (exit 2), not a traceback from
SQLite or mkdir."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from dbmigrate.engine.journal import foreign_sqlite_tables
from dbmigrate.exceptions import UsageError

_SQLITE_MAGIC = b"SQLite format 3\x00"
_PATH_MAX = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096
_NAME_MAX = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255


def check_length(path: Path, what: str) -> None:
    if len(os.fsencode(str(path))) >= _PATH_MAX or any(len(os.fsencode(p)) > _NAME_MAX for p in path.parts):
        raise UsageError(f"{what} path is too long ({len(str(path))} characters; names at most {_NAME_MAX}, "
                         f"paths under {_PATH_MAX})", hint="use a shorter path")


def check_home(path: Path, variable: str = "DBMIGRATE_HOME") -> Path:
    """The directory the tool keeps its files in: absent (created later) or a directory."""
    check_length(path, variable)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{variable}={path} is not a directory",
                         hint=f"point {variable} at a directory (it is created when missing), e.g. ~/.dbmigrate")
    return path


def check_journal(path: Path) -> Path:
    """A journal path: a new file in a directory that is (or can be) one, or an existing dbmigrate journal."""
    if str(path) == ":memory:":
        return path
    check_length(path, "journal")
    if path.is_dir():
        raise UsageError(f"journal {path} is a directory",
                         hint=f"name a file, e.g. --journal {path / 'journal.sqlite'}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"journal {path}: {parent} is not a directory", hint="name a journal file in a directory")
            break
    if not path.exists():
        return path
    if not path.is_file():
        raise UsageError(f"journal {path} is not a regular file", hint="name a journal file (journal.sqlite)")
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise UsageError(f"journal {path} cannot be read: {e.strerror}") from None
    if head and head != _SQLITE_MAGIC:
        raise UsageError(f"journal {path} is not a dbmigrate journal (not an SQLite database)",
                         hint="name the journal file dbmigrate wrote (default ~/.dbmigrate/journal.sqlite), or a new file")
    if head:
        try:
            foreign = foreign_sqlite_tables(path)
        except sqlite3.DatabaseError as e:
            raise UsageError(f"journal {path} cannot be opened: {e}") from None
        if foreign:
            raise UsageError(f"journal {path} is an SQLite database of another program, not a dbmigrate journal",
                             hint="name the journal file dbmigrate wrote, or a new file")
    return path


def check_home_if_set() -> None:
    """$DBMIGRATE_HOME, when the environment names one, is usable (else one clear line)."""
    if os.environ.get("DBMIGRATE_HOME"):
        from dbmigrate.home import home

        check_home(home())


def remove_secret_files() -> None:
    """Remove the private defaults files handed to child programs (they hold passwords): on a
    signal that ends the tool, before anything else."""
    from dbmigrate.db.credentials import remove_private_files

    remove_private_files()
