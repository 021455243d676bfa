"""The relay (relay/, docs/internals/relay.md) in front of a sandbox's cluster: where the
applications write, on an ephemeral port of 127.0.0.1, driven by promote through
`router: {kind: relay}` in the sandbox's inventory.

- built once with `go build`, the binary cached under $DBMIGRATE_HOME/relay/<hash of the relay's
  sources>/relay (a change of the sources builds again);
- its users file: the mysql_native_password accounts of the writable instance
  (`SELECT User, authentication_string FROM mysql.user WHERE plugin='mysql_native_password'`),
  hashes only, mode 0600, never a password;
- its `-state` file keeps the backend of its last move, so that a restart (`restart`) keeps the
  current writer; its control socket and log live in the sandbox's directory (the socket in a
  short temporary directory when that path is too long for a unix socket).

The relay runs in its own session and is stopped by pid, as the sandbox's HAProxy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from dbmigrate.exceptions import SandboxError
from dbmigrate.home import home
from dbmigrate.rehearsal.sandbox.instance import pid_alive, stop_pid
from dbmigrate.rehearsal.sandbox.ports import free_port
from dbmigrate.routing.base import RouterError
from dbmigrate.routing.relay import RelayControl

RELAY_SOURCES = Path(__file__).resolve().parents[3] / "relay"
MAX_SOCKET_PATH = 100

_children: dict[int, subprocess.Popen[bytes]] = {}


def go_binary() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    if not found:
        raise SandboxError("go is not installed: the relay (relay/, a Go program) cannot be built",
                           hint="install Go 1.22 or later")
    return found


def sources_hash(src: Path = RELAY_SOURCES) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in src.iterdir() if p.suffix == ".go" and not p.name.endswith("_test.go")
                    or p.name in ("go.mod", "go.sum")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def relay_binary(src: Path = RELAY_SOURCES) -> Path:
    """The relay built from `src`, once per version of its sources (cached under $DBMIGRATE_HOME)."""
    out = home() / "relay" / sources_hash(src) / "relay"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"relay.{os.getpid()}.tmp")
    r = subprocess.run(["nice", "-n", "10", go_binary(), "build", "-o", str(tmp), "."], cwd=src,
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise SandboxError(f"go build of the relay failed: {r.stderr.strip()[-800:]}")
    tmp.replace(out)
    return out


def write_users_file(path: Path, accounts: list[tuple[str, str]]) -> int:
    """One `user *HEX` line per mysql_native_password account; mode 0600 from its creation."""
    lines = sorted({f"{user} {h}\n" for user, h in accounts if user and h.startswith("*")})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.writelines(lines)
    os.chmod(path, 0o600)
    return len(lines)


def socket_path(rdir: Path) -> tuple[str, str | None]:
    candidate = rdir / "control.sock"
    if len(str(candidate)) <= MAX_SOCKET_PATH:
        return str(candidate), None
    tmp = tempfile.mkdtemp(prefix="dbmr-", dir="/tmp")
    return f"{tmp}/control.sock", tmp


def launch(r: dict[str, Any]) -> subprocess.Popen[bytes]:
    args = [r["binary"], "-listen", f"127.0.0.1:{r['port']}", "-backend", r["backend"], "-users", r["users_file"],
            "-control", r["control_socket"], "-state", r["state_file"], "-max-hold-s", str(r["max_hold_s"]),
            "-drain-s", str(r["drain_s"])]
    log = open(r["log"], "ab")
    try:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        log.close()
    _children[proc.pid] = proc
    control = RelayControl(r["control_socket"], timeout=2.0)
    deadline = time.monotonic() + 15
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            control.run(["status"])
            return proc
        except RouterError as e:
            last = e.message
        time.sleep(0.05)
    stop_pid_of(proc.pid, r["binary"])
    tail = " | ".join(Path(r["log"]).read_text(errors="replace").strip().splitlines()[-3:])
    raise SandboxError(f"the relay did not start: {last} {tail}", hint=f"see {r['log']}")


def start(boxes: Any, sandbox_name: str, *, max_hold_s: float = 10, drain_s: float = 5) -> dict[str, Any]:
    """Start the relay in front of the sandbox's cluster (backend: its writable instance) and
    make it the cluster's router in the inventory. Returns state.relay. Idempotent while it runs."""
    from dbmigrate.config import load_inventory
    from dbmigrate.db.inspector import Inspector
    from dbmigrate.rehearsal.sandbox.haproxy import writable_instance

    state = boxes.find(sandbox_name)
    if state.relay and state.relay.get("pid") and is_our_relay(state.relay["pid"], state.relay["binary"]):
        return dict(state.relay)
    names = [n for n, i in state.instances.items() if i.cluster == state.name]
    if not names:
        raise SandboxError(f"sandbox {state.name} has no instance in cluster {state.name}")
    writer = writable_instance(boxes, state, names)
    binary = relay_binary()
    rdir = state.path / "relay"
    rdir.mkdir(exist_ok=True)
    users_file = rdir / "users"
    with load_inventory(state.inventory_file).open(writer) as server:
        count = write_users_file(users_file, Inspector(server).native_password_hashes())
    if not count:
        raise SandboxError(f"{writer} has no mysql_native_password account: the relay could log nobody in")
    control, tmp_dir = socket_path(rdir)
    state_file = rdir / "relay.state"
    state_file.unlink(missing_ok=True)  # an earlier run's backend must not pick the writer
    taken = {i.port for i in state.instances.values()}
    r = {"binary": str(binary), "port": free_port(taken), "backend": f"127.0.0.1:{state.instances[writer].port}",
         "users_file": str(users_file), "control_socket": control, "state_file": str(state_file),
         "log": str(rdir / "relay.log"), "socket_tmp_dir": tmp_dir, "max_hold_s": max_hold_s, "drain_s": drain_s}
    proc = launch(r)
    r["pid"] = proc.pid
    state.relay = r
    state.save()
    boxes.write_inventory(state)
    return dict(r)


def reload_users(boxes: Any, sandbox_name: str) -> int:
    """Accounts created on the writer after the relay started (a shape's) made known to it.
    Returns the count."""
    from dbmigrate.config import load_inventory
    from dbmigrate.rehearsal.sandbox.haproxy import writable_instance

    state = boxes.find(sandbox_name)
    if not state.relay:
        raise SandboxError(f"sandbox {sandbox_name} has no relay")
    names = [n for n, i in state.instances.items() if i.cluster == state.name]
    with load_inventory(state.inventory_file).open(writable_instance(boxes, state, names)) as server:
        return refresh_users(state.relay, server)


def refresh_users(r: dict[str, Any], server: Any) -> int:
    """Relay `r`'s users file written again from `server`'s accounts, then `reload`: accounts
    created after it started can log in through it. Returns the count."""
    from dbmigrate.db.inspector import Inspector

    count = write_users_file(Path(r["users_file"]), Inspector(server).native_password_hashes())
    RelayControl(r["control_socket"], timeout=5.0).run(["reload"])
    return count


def restart(boxes: Any, sandbox_name: str) -> dict[str, Any]:
    """Start the relay again with the same settings (after a kill): its -state file gives it the
    backend of its last move."""
    state = boxes.find(sandbox_name)
    if not state.relay:
        raise SandboxError(f"sandbox {sandbox_name} has no relay")
    r = state.relay
    if r.get("pid"):
        stop_pid_of(r["pid"], r["binary"])
    proc = launch(r)
    r["pid"] = proc.pid
    state.save()
    return dict(r)


def kill(boxes: Any, sandbox_name: str) -> None:
    """kill -9 the sandbox's relay (a fault): its control socket stays, nothing listens."""
    state = boxes.find(sandbox_name)
    r = state.relay or {}
    if r.get("pid") and is_our_relay(r["pid"], r["binary"]):
        os.kill(r["pid"], 9)
        proc = _children.pop(r["pid"], None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


def stop(state: Any) -> None:
    r = state.relay or {}
    if r.get("pid"):
        stop_pid_of(r["pid"], r.get("binary"))
    if r.get("socket_tmp_dir"):
        shutil.rmtree(r["socket_tmp_dir"], ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        Path(r.get("control_socket", "")).unlink()
    if state.relay is not None:
        state.relay["pid"] = None
        if state.path.exists():
            state.save()


def is_our_relay(pid: int, binary: str | None) -> bool:
    if not pid_alive(pid):
        return False
    try:
        args = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except FileNotFoundError:
        return False
    return bool(args) and (binary is None or args[0] == binary)


def stop_pid_of(pid: int, binary: str | None = None) -> None:
    if is_our_relay(pid, binary):
        stop_pid(pid, timeout=5)
    proc = _children.pop(pid, None)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
