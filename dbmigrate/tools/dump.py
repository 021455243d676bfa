"""mariadb-dump and the mariadb client, run as child processes for a logical copy of schemas.

Credentials reach them through a private defaults file (never argv); the caller builds it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from dbmigrate.exceptions import DbmigrateError


class DumpFailed(DbmigrateError):
    """mariadb-dump or the load of its output failed."""


def dump_command(defaults_file: str, schemas: list[str]) -> list[str]:
    # --master-data=2 takes a brief global read lock to read the coordinates that
    # match the consistent snapshot; no password ever reaches argv.
    return ["mariadb-dump", f"--defaults-file={defaults_file}", "--single-transaction", "--master-data=2",
            "--routines", "--triggers", "--events", "--hex-blob", "--default-character-set=utf8mb4",
            "--databases", *schemas]


def import_command(defaults_file: str) -> list[str]:
    # The copy is a restore: kept out of the target's binlog, so the first events
    # there are the ones replicated from the old servers.
    return ["mariadb", f"--defaults-file={defaults_file}", "--init-command=SET SESSION sql_log_bin=0",
            "--default-character-set=utf8mb4"]


def dump_schemas(defaults_file: str, schemas: list[str], out: Path, timeout_s: float, source: str) -> None:
    with open(out, "wb") as f:
        p = subprocess.run(dump_command(defaults_file, schemas), stdout=f, stderr=subprocess.PIPE, timeout=timeout_s)
    if p.returncode != 0:
        raise DumpFailed(f"mariadb-dump of {', '.join(schemas)} on {source} failed: "
                         f"{p.stderr.decode(errors='replace').strip()[-400:]}")


def load_dump(defaults_file: str, dump: Path, timeout_s: float, target: str) -> None:
    with open(dump, "rb") as inp:
        p = subprocess.run(import_command(defaults_file), stdin=inp, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=timeout_s)
    if p.returncode != 0:
        raise DumpFailed(f"loading the dump into {target} failed: {p.stderr.decode(errors='replace').strip()[-400:]}")
