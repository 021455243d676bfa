"""Credentials from MySQL option files or the environment, never from argv.

An inventory names a *reference* (defaults file + group, or an environment
variable); this module resolves it to user/password/TLS settings. Child programs
(pt-*, mariadb client) receive them through a private defaults file that only
the current user can read and that is removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from dbmigrate.exceptions import CredentialsError
from dbmigrate.redact import register_secret

DEFAULT_GROUPS = ("client", "dbmigrate")


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str | None = field(default=None, repr=False)
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    ssl_mode: str | None = None  # DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY
    source: str = ""  # where they came from, for error messages (never the secret)

    def __repr__(self) -> str:
        return f"Credentials(user={self.user!r}, password=***, source={self.source!r})"


def parse_option_file(path: Path, _seen: set[Path] | None = None) -> dict[str, dict[str, str]]:
    """Parse a MySQL option file into {group: {key: value}} (with !include/!includedir)."""
    seen = _seen if _seen is not None else set()
    path = Path(path).expanduser()
    if path.resolve() in seen:
        return {}
    seen.add(path.resolve())
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CredentialsError(f"option file {path} does not exist",
                               hint="create it or point the inventory's credentials.defaults_file elsewhere")
    except PermissionError:
        raise CredentialsError(f"option file {path} is not readable by this user")
    groups: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("!include "):
            for g, kv in parse_option_file(path.parent / line.split(None, 1)[1].strip(), seen).items():
                groups.setdefault(g, {}).update(kv)
            continue
        if line.startswith("!includedir "):
            d = path.parent / line.split(None, 1)[1].strip()
            for f in sorted(Path(d).glob("*.cnf")):
                for g, kv in parse_option_file(f, seen).items():
                    groups.setdefault(g, {}).update(kv)
            continue
        if line.startswith("[") and line.endswith("]"):
            current = groups.setdefault(line[1:-1].strip().lower(), {})
            continue
        if current is None:
            raise CredentialsError(f"{path}:{lineno}: option outside of a [group]")
        key, sep, value = line.partition("=")
        key = key.strip().replace("-", "_").lower()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        current[key] = value if sep else ""
    return groups


def from_option_file(path: str | os.PathLike | None, group: str | None = None) -> Credentials:
    """Read credentials from an option file; later groups override earlier ones, as mysql does."""
    p = Path(path).expanduser() if path else Path("~/.my.cnf").expanduser()
    groups = parse_option_file(p)
    wanted = [*DEFAULT_GROUPS, group] if group else list(DEFAULT_GROUPS)
    merged: dict[str, str] = {}
    for g in wanted:
        merged.update(groups.get(g.lower(), {}))
    if group and group.lower() not in groups:
        raise CredentialsError(f"option file {p} has no [{group}] group",
                               hint=f"groups present: {', '.join(sorted(groups)) or 'none'}")
    if "user" not in merged:
        raise CredentialsError(f"no user in option file {p} (groups {', '.join(wanted)})",
                               hint="add user=... (and password=...) to that group")
    return _build(merged, f"{p}[{group or 'client'}]")


def from_environment(user_env: str, password_env: str, user: str | None = None) -> Credentials:
    u = user or os.environ.get(user_env)
    if not u:
        raise CredentialsError(f"environment variable {user_env} is not set", hint="export it or name a user in the inventory")
    if password_env not in os.environ:
        raise CredentialsError(f"environment variable {password_env} is not set",
                               hint="export the password there, or use a defaults_file")
    return _build({"user": u, "password": os.environ[password_env]}, f"env:{password_env}")


def _build(opts: dict[str, str], source: str) -> Credentials:
    password = opts.get("password")
    register_secret(password)
    ssl_mode = opts.get("ssl_mode")
    if "skip_ssl" in opts or opts.get("ssl") in ("0", "OFF", "off"):
        ssl_mode = "DISABLED"
    return Credentials(user=opts["user"], password=password, ssl_ca=opts.get("ssl_ca"),
                       ssl_cert=opts.get("ssl_cert"), ssl_key=opts.get("ssl_key"),
                       ssl_mode=ssl_mode.upper() if ssl_mode else None, source=source)


def option_file_text(creds: Credentials, host: str | None = None, port: int | None = None) -> str:
    lines = ["[client]", f"user={creds.user}"]
    if creds.password is not None:
        lines.append(f'password="{creds.password}"')
    if host:
        lines.append(f"host={host}")
    if port:
        lines.append(f"port={port}")
    for key in ("ssl_ca", "ssl_cert", "ssl_key"):
        if getattr(creds, key):
            lines.append(f"{key.replace('_', '-')}={getattr(creds, key)}")
    if creds.ssl_mode == "DISABLED":
        lines.append("skip-ssl")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def private_defaults_file(creds: Credentials, host: str | None = None, port: int | None = None) -> Iterator[str]:
    """A 0600 option file for a child program (`--defaults-file=PATH`), removed afterwards."""
    fd, path = tempfile.mkstemp(prefix="dbmigrate-", suffix=".cnf")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(option_file_text(creds, host, port))
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
