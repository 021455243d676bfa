"""HAProxy in front of a sandbox: a writer port and a reader port on 127.0.0.1.

Layout (TCP mode, servers named after the instances):
- frontend/backend `writer`: every instance of the sandbox's cluster; exactly one is
  'ready' (the writable one), the others are put in 'maint' through the runtime API
  right after start. Servers are never marked `disabled` in the file, because the
  admin state HAProxy reports for those can mislead.
- frontend/backend `readers`: every instance too, the replicas 'ready' and the
  primary in 'maint', so that reads do not land on the primary; a sandbox without
  replicas reads from its primary.
- the runtime state is dumped to `server-state` after every change and loaded on
  start (`load-server-state-from-file global`), so a restart keeps the writer.

HAProxy runs in the foreground of its own session (Popen, start_new_session) and
is stopped by pid. The admin socket lives in the sandbox directory unless that
path is too long for a unix socket (~107 bytes), then in a short temporary dir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from dbmigrate.exceptions import SandboxError
from dbmigrate.routing.base import RouterError
from dbmigrate.routing.haproxy import HAProxyRouter, wait_for_socket
from dbmigrate.rehearsal.sandbox.instance import pid_alive, stop_pid
from dbmigrate.rehearsal.sandbox.ports import free_port

MAX_SOCKET_PATH = 100  # sun_path is 108 bytes including the NUL; keep a margin

# Our own HAProxy children, so that they are reaped (no zombies) when stopped.
_children: dict[int, subprocess.Popen] = {}


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if not found:
        raise SandboxError("haproxy is not installed", hint="apt-get install haproxy")
    return found


def render_config(admin_socket: str, state_file: str, writer_port: int, reader_port: int,
                  servers: dict[str, int]) -> str:
    """HAProxy configuration for one cluster; `servers` maps instance name -> port."""
    def server_lines() -> list[str]:
        return [f"    server {name} 127.0.0.1:{port}" for name, port in servers.items()]

    lines = [
        "# written by dbmigrate sandbox",
        "global",
        f"    stats socket {admin_socket} mode 600 level admin",
        "    stats timeout 10s",
        f"    server-state-file {state_file}",
        "    maxconn 4000",
        "",
        "defaults",
        "    mode tcp",
        "    timeout connect 1s",
        # Application pools keep idle connections for a long time; do not cut them.
        "    timeout client 1h",
        "    timeout server 1h",
        "    load-server-state-from-file global",
        "",
        "frontend writer",
        f"    bind 127.0.0.1:{writer_port}",
        "    default_backend writer",
        "",
        "backend writer",
        *server_lines(),
        "",
        "frontend readers",
        f"    bind 127.0.0.1:{reader_port}",
        "    default_backend readers",
        "",
        "backend readers",
        "    balance roundrobin",
        *server_lines(),
        "",
    ]
    return "\n".join(lines)


def _socket_path(hdir: Path) -> tuple[str, str | None]:
    """(socket path, temporary dir to remove at stop or None)."""
    candidate = hdir / "admin.sock"
    if len(str(candidate)) <= MAX_SOCKET_PATH:
        return str(candidate), None
    tmp = tempfile.mkdtemp(prefix="dbmh-", dir="/tmp")
    return f"{tmp}/admin.sock", tmp


def writable_instance(boxes, state, names: list[str]) -> str:
    """The one instance of the cluster that is writable now (asked, not assumed: after a
    switchover the instance created as primary is no longer the writer)."""
    from dbmigrate.config import load_inventory
    from dbmigrate.db.inspector import Inspector

    inv = load_inventory(state.inventory_file)
    writable = []
    for n in names:
        with inv.open(n) as server:
            if not Inspector(server).read_only():
                writable.append(n)
    if len(writable) != 1:
        raise SandboxError(f"sandbox {state.name} has {len(writable)} writable instances ({', '.join(writable) or 'none'}): "
                           "cannot tell HAProxy which one takes writes",
                           hint="set read_only=1 on all but the primary, then retry")
    return writable[0]


def _launch(config: Path, log: Path) -> subprocess.Popen:
    binary = haproxy_binary()
    check = subprocess.run([binary, "-c", "-q", "-f", str(config)], capture_output=True, text=True, timeout=30)
    if check.returncode != 0:
        raise SandboxError(f"HAProxy rejected {config}: {(check.stderr or check.stdout).strip()[-600:]}")
    out = open(log, "ab")
    try:
        # -db: stay in the foreground, so the pid we hold is HAProxy itself.
        proc = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        out.close()
    _children[proc.pid] = proc
    return proc


def _wait_up(proc: subprocess.Popen, admin_socket: str, log: Path) -> None:
    try:
        wait_for_socket(admin_socket, timeout=10, alive=lambda: proc.poll() is None)
    except RouterError as e:
        _stop_pid(proc.pid)
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:]) if log.exists() else ""
        raise SandboxError(f"HAProxy did not start: {e.message} {tail}", hint=f"see {log}") from None


def start(boxes, sandbox_name: str) -> dict[str, Any]:
    """Start HAProxy in front of the sandbox's cluster; record it in the sandbox state and
    inventory (router section). Returns state.haproxy. Idempotent while it runs."""
    state = boxes.find(sandbox_name)
    if state.haproxy and state.haproxy.get("pid") and _is_our_haproxy(state.haproxy["pid"], state.haproxy["config"]):
        return state.haproxy
    names = [n for n, i in state.instances.items() if i.cluster == state.name]
    if not names:
        raise SandboxError(f"sandbox {state.name} has no instance in cluster {state.name}")
    writer = writable_instance(boxes, state, names)
    hdir = state.path / "haproxy"
    hdir.mkdir(exist_ok=True)
    admin_socket, tmp_dir = _socket_path(hdir)
    state_file = hdir / "server-state"
    taken = {i.port for i in state.instances.values()}
    writer_port = free_port(taken)
    reader_port = free_port(taken | {writer_port})
    config = hdir / "haproxy.cfg"
    config.write_text(render_config(admin_socket, str(state_file), writer_port, reader_port,
                                    {n: state.instances[n].port for n in names}))
    state_file.unlink(missing_ok=True)  # a stale state from an earlier run must not pick the writer
    log = hdir / "haproxy.log"
    proc = _launch(config, log)
    _wait_up(proc, admin_socket, log)

    router = HAProxyRouter(state.name, admin_socket, "writer", "readers", str(state_file))
    cmds = [f"set server writer/{n} state maint" for n in names if n != writer]
    replicas = [n for n in names if n != writer]
    if replicas:
        cmds.append(f"set server readers/{writer} state maint")
    try:
        if cmds:
            router.admin.run(cmds)
        router.save_state()
    except RouterError:
        _stop_pid(proc.pid)
        raise
    state.haproxy = {"pid": proc.pid, "config": str(config), "admin_socket": admin_socket,
                     "writer_port": writer_port, "reader_port": reader_port, "state_file": str(state_file),
                     "log": str(log), "socket_tmp_dir": tmp_dir, "writer": writer}
    state.save()
    boxes.write_inventory(state)
    return state.haproxy


def add_server(state, name: str) -> None:
    """Put a new instance of the fronted cluster into both backends of the running HAProxy:
    in the writer backend in 'maint' (a switchover makes it the writer), in the reader
    backend 'ready' when it replicates, else 'maint'. Added through the runtime API, so
    connections already open stay; the configuration file is rewritten too, so a restart
    keeps it."""
    h = state.haproxy or {}
    if not h.get("pid") or not _is_our_haproxy(h["pid"], h.get("config")):
        return
    names = [n for n, i in state.instances.items() if i.cluster == state.name]
    Path(h["config"]).write_text(render_config(h["admin_socket"], h["state_file"], h["writer_port"],
                                               h["reader_port"], {n: state.instances[n].port for n in names}))
    router = HAProxyRouter(state.name, h["admin_socket"], "writer", "readers", h["state_file"])
    address = f"127.0.0.1:{state.instances[name].port}"
    try:
        for backend in ("writer", "readers"):
            # HAProxy answers "New server registered." (anything else is a refusal); the
            # server starts in maintenance.
            reply = router.admin.request([f"add server {backend}/{name} {address}"]).strip()
            if "New server registered" not in reply:
                raise RouterError(f"add server {backend}/{name}: {reply or 'no reply'}")
        if state.instances[name].replica_of:  # only a replica takes reads
            router.admin.run([f"set server readers/{name} state ready"])
        router.save_state()
    except RouterError as e:
        raise SandboxError(f"{name} was added but HAProxy did not take it: {e.message}",
                           hint="restart HAProxy with the rewritten configuration: dbmigrate sandbox down, then up") from None


def restart(boxes, sandbox_name: str) -> dict[str, Any]:
    """Stop and start HAProxy with the same configuration; the server-state-file keeps
    the current writer (what a production reload does)."""
    state = boxes.find(sandbox_name)
    if not state.haproxy:
        raise SandboxError(f"sandbox {sandbox_name} has no HAProxy", hint="start it: dbmigrate sandbox up --haproxy")
    h = state.haproxy
    if h.get("pid"):
        _stop_pid(h["pid"], h["config"])
    config, log = Path(h["config"]), Path(h["log"])
    proc = _launch(config, log)
    _wait_up(proc, h["admin_socket"], log)
    h["pid"] = proc.pid
    state.save()
    return h


def stop(state) -> None:
    """Stop the sandbox's HAProxy by pid (waiting for its exit) and remove its temporary socket dir."""
    h = state.haproxy or {}
    pid = h.get("pid")
    if pid:
        _stop_pid(pid, h.get("config"))
    if h.get("socket_tmp_dir"):
        shutil.rmtree(h["socket_tmp_dir"], ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        Path(h.get("admin_socket", "")).unlink()
    if state.haproxy is not None:
        state.haproxy["pid"] = None
        if state.path.exists():
            state.save()


def _is_our_haproxy(pid: int, config: str | None) -> bool:
    """Guard against pid reuse: the process must be HAProxy started with our config."""
    if not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return False
    args = [a.decode(errors="replace") for a in cmdline if a]
    return bool(args) and os.path.basename(args[0]) == "haproxy" and (config is None or config in args)


def _stop_pid(pid: int, config: str | None = None) -> None:
    if _is_our_haproxy(pid, config):
        stop_pid(pid, timeout=5)
    proc = _children.pop(pid, None)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
