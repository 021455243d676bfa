r"""Credentials from MySQL option files or the environment, never from argv.

An inventory names a *reference* (defaults file + group, or an environment
variable); this module resolves it to user/password/TLS settings. Child programs
(pt-*, mariadb client) receive them through a private defaults file that only
the current user can read and that is removed afterwards, also when the tool is
stopped by a signal (`remove_private_files`, called by the command line's
signal handlers).

Option files are read and written by the MySQL client's own rules (mysys
`my_default.c`): a value may be quoted, `#` outside quotes starts a comment,
and `\\`, `\"`, `\'`, `\n`, `\t`, `\r`, `\b`, `\s` are escapes. Every value
written is double-quoted and escaped, so a password holding `"`, `\` or a
newline reaches the server intact and cannot inject another option.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from dbmigrate.exceptions import CredentialsError
from dbmigrate.redact import register_secret

DEFAULT_GROUPS = ("client", "dbmigrate")

# mysys escapes, both ways.
_UNESCAPE = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "s": " ", '"': '"', "'": "'", "\\": "\\"}
_ESCAPE = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b"}

_live_lock = threading.Lock()
_live_files: set[str] = set()  # private defaults files not yet removed
_env_secrets: dict[str, str] = {}  # password_env values, taken out of os.environ


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
    _refuse_world_writable(path)
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise CredentialsError(f"option file {path} does not exist",
                               hint="create it or point the inventory's credentials.defaults_file elsewhere")
    except PermissionError:
        raise CredentialsError(f"option file {path} is not readable by this user")
    except IsADirectoryError:
        raise CredentialsError(f"option file {path} is a directory", hint="name a file, e.g. credentials.cnf")
    except OSError as e:
        raise CredentialsError(f"option file {path} cannot be read: {e.strerror}")
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
        line = _remove_end_comment(line).strip()
        if line.startswith("[") and line.endswith("]"):
            current = groups.setdefault(line[1:-1].strip().lower(), {})
            continue
        if current is None:
            raise CredentialsError(f"{path}:{lineno}: option outside of a [group]")
        key, sep, value = line.partition("=")
        key = key.strip().replace("-", "_").lower()
        current[key] = _option_value(value.strip()) if sep else ""
    return groups


def _refuse_world_writable(path: Path) -> None:
    """The mysql client ignores a world-writable option file (anyone could have put a
    user or host in it); using it silently would be worse, so it is refused."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # reading it reports what is wrong
    if stat.S_ISREG(mode) and mode & stat.S_IWOTH:
        raise CredentialsError(f"option file {path} is world-writable: any local user could change the "
                               "credentials in it (the mysql client ignores such a file)",
                               hint=f"chmod 600 {path}")


def _remove_end_comment(line: str) -> str:
    """Cut a `#` comment that is outside quotes, as mysys does."""
    quote, escape = "", False
    for i, ch in enumerate(line):
        if ch in "'\"" and not escape:
            if not quote:
                quote = ch
            elif quote == ch:
                quote = ""
        if not quote and ch == "#":
            return line[:i]
        escape = bool(quote) and ch == "\\" and not escape
    return line


def _option_value(value: str) -> str:
    """An option value as the client sees it: outer quotes dropped, escapes applied."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append(_UNESCAPE.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def quote_option_value(value: str) -> str:
    """`value` double-quoted and escaped so that the client reads back exactly `value`."""
    if "\0" in value:
        raise CredentialsError("a credential holds a NUL byte, which no MySQL option file can carry")
    return '"' + "".join(_ESCAPE.get(ch, ch) for ch in value) + '"'


def native_password_hash(password: str) -> str:
    """The mysql_native_password hash (`*` + SHA1(SHA1(password))), for
    `IDENTIFIED BY PASSWORD '<hash>'`: no cleartext in binlogs or the general log."""
    return "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()


def from_option_file(path: str | os.PathLike[str] | None, group: str | None = None) -> Credentials:
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
    password = _take_env_secret(password_env)
    if password is None:
        raise CredentialsError(f"environment variable {password_env} is not set",
                               hint="export the password there, or use a defaults_file")
    return _build({"user": u, "password": password}, f"env:{password_env}")


def _take_env_secret(name: str) -> str | None:
    """The value of a password_env variable, removed from this process's environment.

    Child programs (pt-*, ssh, hooks, mariadb-dump, sysbench) inherit os.environ;
    taking the secret out when it is first read keeps it out of every one of them,
    whichever module starts it. Later reads get the remembered value; a variable
    set again (a test, an embedding program) wins over the remembered one.
    """
    with _live_lock:
        if name in os.environ:
            _env_secrets[name] = os.environ.pop(name)
        return _env_secrets.get(name)


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
    lines = ["[client]", f"user={quote_option_value(creds.user)}"]
    if creds.password is not None:
        lines.append(f"password={quote_option_value(creds.password)}")
    if host:
        lines.append(f"host={quote_option_value(host)}")
    if port:
        lines.append(f"port={int(port)}")
    for key in ("ssl_ca", "ssl_cert", "ssl_key"):
        if getattr(creds, key):
            lines.append(f"{key.replace('_', '-')}={quote_option_value(getattr(creds, key))}")
    if creds.ssl_mode == "DISABLED":
        lines.append("skip-ssl")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def private_defaults_file(creds: Credentials, host: str | None = None, port: int | None = None) -> Iterator[str]:
    """A 0600 option file for a child program (`--defaults-file=PATH`), removed afterwards."""
    text = option_file_text(creds, host, port)
    fd, path = tempfile.mkstemp(prefix="dbmigrate-", suffix=".cnf")
    with _live_lock:
        _live_files.add(path)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        yield path
    finally:
        with _live_lock:
            _live_files.discard(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def remove_private_files() -> None:
    """Remove every private defaults file still on disk (a signal is ending the process)."""
    with _live_lock:
        paths = list(_live_files)
        _live_files.clear()
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)
