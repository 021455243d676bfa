"""HAProxy as the router, driven through its runtime API (the admin socket).

Configuration HAProxy needs (see dbmigrate.rehearsal.sandbox.haproxy for a complete one):

    global
        stats socket /run/haproxy/admin.sock mode 600 level admin
        server-state-file /var/lib/haproxy/server-state
    defaults
        load-server-state-from-file global
    backend writer   # every server of the cluster, exactly one of them not in maint
    backend readers  # the servers that may take reads

Servers are found by address: the router reads `show servers state`, whose rows
carry each server's name *and* its address and port, so the server names in the
configuration are free (the sandbox uses the instance names).

Facts this module relies on (measured with HAProxy 2.6):
- a successful command answers with blank lines only; an error answers with text
  while the socket exchange still "succeeds", so any non-blank reply is a failure;
- `maint` does not close established connections, only `shutdown sessions` does;
- a reload forgets runtime changes unless `show servers state` was dumped to the
  server-state-file: we dump it after every change;
- the admin state column can mislead; the operational state (srv_op_state,
  2 = running) is what tells whether a server gets new connections;
- admin connections are NOT served in the order they were made: with HAProxy frozen
  (SIGSTOP), a request left in its buffer by a client that gave up ran after a later
  connection's `show servers state` was answered in 12 of 40 tries (2 threads);
- of a request whose client is gone, HAProxy runs the first 3 commands and drops the rest
  (6 of 6 tries: a line of 21 commands ran 3).
A change therefore starts with a marker, `set var proc.dbmigrate_route int(SEQ)`: once `get var`
shows it, HAProxy has taken up that line, and one more answer a moment later shows it is past
it (what of it ran has run; the rest never will). A restart drops the variable with the buffers.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from dbmigrate import faultpoint
from dbmigrate.clock import Clock, wait_until
from dbmigrate.exceptions import WaitTimeout
from dbmigrate.routing.base import RouteLog, Gate, RouteIntent, RouterError, RouterGone, RouterNoAnswer, RouteState, Router, \
    ServerLike, ServerRef, as_ref, same_address, split_address
from dbmigrate.routing.dsn_file import write_atomically

OP_RUNNING = 2
ADMIN_MAINT = 0x01 | 0x02 | 0x04 | 0x20 | 0x40  # forced, inherited, config, resolution, hostname maint
ADMIN_DRAIN = 0x08 | 0x10  # forced or inherited drain
# The process-wide variable each change sets last: the number of the last change that ran.
MARKER = "proc.dbmigrate_route"
# Once HAProxy has taken up a request line, one more answer this much later shows it is past it.
LINE_PASSED_S = 0.3


@dataclass(frozen=True)
class ServerRow:
    """One row of `show servers state`."""

    backend: str
    name: str
    addr: str
    port: int
    op_state: int
    admin_state: int
    weight: int

    @property
    def address(self) -> str:
        return f"{self.addr}:{self.port}"

    @property
    def takes_new_connections(self) -> bool:
        return self.op_state == OP_RUNNING and not self.admin_state & ADMIN_DRAIN and self.weight > 0

    @property
    def in_maint(self) -> bool:
        return self.op_state != OP_RUNNING and bool(self.admin_state & ADMIN_MAINT)

    @property
    def ready(self) -> bool:
        return self.op_state == OP_RUNNING and not self.admin_state & ADMIN_DRAIN


def parse_servers_state(text: str) -> list[ServerRow]:
    """Parse `show servers state` (format version 1): a version line, a '# header' naming
    the columns, then one space-separated row per server."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    if lines[0].strip() != "1":
        raise RouterError(f"unexpected 'show servers state' format: {lines[0][:80]!r}",
                          hint="this dbmigrate reads HAProxy's server state format 1 (HAProxy 1.6 to 3.x)")
    header = next((ln for ln in lines if ln.startswith("#")), None)
    if header is None:
        raise RouterError("'show servers state' answered without its column header")
    cols = header.lstrip("#").split()
    need = ("be_name", "srv_name", "srv_addr", "srv_op_state", "srv_admin_state", "srv_uweight", "srv_port")
    missing = [c for c in need if c not in cols]
    if missing:
        raise RouterError(f"'show servers state' lacks columns {', '.join(missing)}")
    idx = {c: i for i, c in enumerate(cols)}
    rows = []
    for ln in lines:
        if ln.startswith("#") or ln.strip() == "1":
            continue
        f = ln.split()
        if len(f) < len(cols):
            raise RouterError(f"cannot parse server state row: {ln[:120]!r}")
        rows.append(ServerRow(backend=f[idx["be_name"]], name=f[idx["srv_name"]], addr=f[idx["srv_addr"]],
                              port=int(f[idx["srv_port"]]), op_state=int(f[idx["srv_op_state"]]),
                              admin_state=int(f[idx["srv_admin_state"]]), weight=int(f[idx["srv_uweight"]])))
    return rows


def check_reply(commands: Sequence[str], reply: str) -> None:
    """A runtime API change succeeded only when HAProxy answered nothing but blank lines."""
    text = reply.strip()
    if text:
        raise RouterError(f"HAProxy refused '{'; '.join(commands)}': {' / '.join(text.splitlines())[:300]}",
                          hint="the reply names the failing command; check backend and server names "
                               "(show servers state) and that the socket has 'level admin'")


def switch_commands(backend: str, new: str, olds: Sequence[str]) -> list[str]:
    """The writer flip as one request: open NEW, close every OLD and cut its sessions,
    so that pooled connections cannot keep writing to a demoted server."""
    cmds = [f"set server {backend}/{new} state ready"]
    for o in olds:
        if o != new:
            cmds += [f"set server {backend}/{o} state maint", f"shutdown sessions server {backend}/{o}"]
    return cmds


def marker_commands(seq: int) -> list[str]:
    """Set the change marker to `seq` (process variables are set from the CLI in experimental
    mode on HAProxy 2.6; the mode lasts for this request only)."""
    return ["experimental-mode on", f"set var {MARKER} int({int(seq)})"]


def validate_name(name: str) -> str:
    # Names are interpolated into a line-based protocol: refuse separators outright.
    if not name or any(c in name for c in " ;\n\r/"):
        raise RouterError(f"invalid HAProxy backend or server name {name!r}")
    return name


class AdminSocket:
    """HAProxy's runtime API over a unix (or TCP "host:port") socket, one request per connection."""

    def __init__(self, path: str, timeout: float = 3.0):
        self.path = path
        self.timeout = timeout

    def request(self, commands: Sequence[str]) -> str:
        """Send commands as one line (HAProxy runs them in order) and return the whole reply.
        Once the line is sent, no answer raises RouterNoAnswer: HAProxy may still run it."""
        for c in commands:
            if "\n" in c or ";" in c:
                raise RouterError(f"refusing to send a command containing ';' or a newline: {c!r}")
        line = "; ".join(commands) + "\n"
        sent = False
        try:
            if self.path.startswith("/") or not _looks_tcp(self.path):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                target: str | tuple[str, int] = self.path
            else:
                host, port = split_address(self.path)
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                target = (host, port)
            with sock:
                sock.settimeout(self.timeout)
                faultpoint.sending("router haproxy", line)  # no-op unless a fault-injection pause listens
                sock.connect(target)
                sent = True  # from here on, part of the line may be in HAProxy's buffer
                sock.sendall(line.encode())
                chunks = []
                while True:
                    b = sock.recv(65536)
                    if not b:
                        break
                    chunks.append(b)
        except FileNotFoundError:
            raise RouterGone(f"HAProxy admin socket {self.path} does not exist",
                              hint="is HAProxy running, with 'stats socket PATH mode 600 level admin' in its global section?") from None
        except PermissionError:
            raise RouterError(f"no permission on HAProxy admin socket {self.path}",
                              hint="run dbmigrate as the user that owns the socket (mode 600) or adjust 'stats socket ... user/group'") from None
        except ConnectionRefusedError:
            raise RouterGone(f"HAProxy admin socket {self.path} refused the connection (HAProxy not running?)",
                              hint="start or reload HAProxy; the writer flip has not been sent") from None
        except socket.timeout:
            if sent:
                raise RouterNoAnswer(f"HAProxy admin socket {self.path} did not answer '{line.strip()[:200]}' within "
                                     f"{self.timeout:g}s: HAProxy may still run it",
                                     hint="HAProxy may be frozen or overloaded; check it before retrying") from None
            raise RouterError(f"HAProxy admin socket {self.path} did not answer within {self.timeout:g}s",
                              hint="HAProxy may be overloaded or stuck; check it before retrying") from None
        except OSError as e:
            if sent:
                raise RouterNoAnswer(f"HAProxy admin socket {self.path}: {e.strerror or e} after "
                                     f"'{line.strip()[:200]}' was sent: HAProxy may still run it") from None
            raise RouterError(f"HAProxy admin socket {self.path}: {e.strerror or e}") from None
        faultpoint.router_command_sent(line)  # no-op unless a fault-injection pause listens
        return b"".join(chunks).decode(errors="replace")

    def run(self, commands: Sequence[str]) -> None:
        check_reply(commands, self.request(commands))


def _looks_tcp(path: str) -> bool:
    host, _, port = path.rpartition(":")
    return bool(host) and port.isdigit() and "/" not in path


class HAProxyRouter(Router):
    kind = "haproxy"

    def __init__(self, cluster: str, admin_socket: str, writer_backend: str = "writer",
                 reader_backend: str | None = "readers", state_file: str | None = None, timeout: float = 3.0,
                 clock: Clock | None = None, writer_address: str | None = None):
        super().__init__(cluster)
        self.clock = clock or Clock()
        # Where applications connect to write ("host:port"): a switchover's hold of new
        # connections (routing/haproxy_hold.py) needs it; None: no hold, as before.
        self.writer_address = writer_address
        self.admin = AdminSocket(admin_socket, timeout)
        self.writer_backend = validate_name(writer_backend)
        self.reader_backend = validate_name(reader_backend) if reader_backend else None
        self.state_file = Path(state_file) if state_file else None
        self._prepared: tuple[str, str | None, list[str], list[str]] | None = None
        self._marker_ok: bool | None = None  # HAProxy keeps the change marker (get/set var)

    def describe(self) -> str:
        return f"HAProxy at {self.admin.path} (backend {self.writer_backend}, cluster {self.cluster})"

    # -- reading -------------------------------------------------------------
    def servers(self, backend: str | None = None) -> list[ServerRow]:
        cmd = f"show servers state {validate_name(backend)}" if backend else "show servers state"
        reply = self.admin.request([cmd])
        if reply.strip() and not reply.lstrip().startswith("1"):
            raise RouterError(f"HAProxy answered '{cmd}' with: {reply.strip()[:200]}",
                              hint=f"does backend '{backend}' exist in the HAProxy configuration?")
        return parse_servers_state(reply)

    def current(self) -> RouteState:
        rows = self.servers()
        wrows = [r for r in rows if r.backend == self.writer_backend]
        if not wrows:
            raise RouterError(f"HAProxy at {self.admin.path} has no backend '{self.writer_backend}' (or it has no servers)",
                              hint="set writer_backend in the inventory's router section to the backend applications write through")
        writers = [r.address for r in wrows if r.takes_new_connections]
        rrows = [r for r in rows if r.backend == self.reader_backend] if self.reader_backend else []
        readers = [r.address for r in rrows if r.takes_new_connections]
        return RouteState(writer=writers[0] if len(writers) == 1 else None, writers=writers, readers=readers,
                          reader_weights={r.address: r.weight for r in rrows if r.ready},
                          details={"servers": {f"{r.backend}/{r.name}": {"address": r.address, "op_state": r.op_state,
                                                                          "admin_state": r.admin_state, "weight": r.weight}
                                               for r in wrows + rrows}})

    def _name_for(self, rows: list[ServerRow], backend: str, server: ServerRef) -> str:
        for r in rows:
            if r.backend == backend and same_address(r.address, server.address):
                return r.name
        known = ", ".join(f"{r.name}={r.address}" for r in rows if r.backend == backend) or "none"
        raise RouterError(f"{server} is not a server of HAProxy backend '{backend}'",
                          hint=f"servers there: {known}; add it to the HAProxy configuration and reload first")

    # -- changing ------------------------------------------------------------
    def _plan(self, new: ServerLike, old: ServerLike | None) -> tuple[list[str], list[str], list[ServerRow]]:
        """(the flip's commands, the commands that send writes back to the writer it leaves, rows)."""
        rows = [r for r in self.servers(self.writer_backend)]
        new_ref = as_ref(new)
        new_name = self._name_for(rows, self.writer_backend, new_ref)
        live = [r for r in rows if r.takes_new_connections]
        if [r.name for r in live] == [new_name]:
            return [], [], rows  # already switched
        if old is not None:
            old_ref = as_ref(old)
            old_name = self._name_for(rows, self.writer_backend, old_ref)
            # A change given up on may have left both ready (HAProxy ran the start of its line).
            if live and {r.name for r in live} - {old_name, new_name}:
                raise RouterError(
                    f"HAProxy sends writes to {', '.join(r.address for r in live)}, not to {old_ref}: refusing to switch",
                    hint="someone else changed the route; inspect 'show servers state' before retrying")
        # The expected old writer first, then every other server that is not in maint
        # already (one a human left 'ready' by mistake must not keep taking writes).
        olds = [self._name_for(rows, self.writer_backend, as_ref(old))] if old is not None else []
        olds += [r.name for r in rows if r.name not in olds and not r.in_maint]
        back = switch_commands(self.writer_backend, olds[0], [new_name]) if olds else []
        return switch_commands(self.writer_backend, new_name, olds), back, rows

    def prepare_switch(self, new: ServerLike, old: ServerLike | None = None) -> None:
        """Read the backend and build the request now: inside a fenced window the switch
        is then one request on the admin socket, not a read followed by a write."""
        cmds, back, _ = self._plan(new, old)
        self._marker_usable()
        self._prepared = (as_ref(new).address, as_ref(old).address if old is not None else None, cmds, back)

    def _planned(self, new: ServerLike, old: ServerLike | None) -> tuple[list[str], list[str]]:
        prepared, self._prepared = getattr(self, "_prepared", None), None
        key = (as_ref(new).address, as_ref(old).address if old is not None else None)
        if prepared is not None and prepared[:2] == key and prepared[2]:
            return prepared[2], prepared[3]  # the state read back after the flip still checks the result
        cmds, back, _ = self._plan(new, old)
        return cmds, back

    # -- changes in doubt ----------------------------------------------------
    def _marker_usable(self) -> bool:
        """Does this HAProxy keep the change marker? Read once; where the variable is missing
        it is set to 0 now (before any change), so that a later "not found" means a restart."""
        if self._marker_ok is None:
            reply = self.admin.request([f"get var {MARKER}"]).strip()
            if reply.startswith(MARKER):
                self._marker_ok = True
            elif "not found" in reply.lower():
                check_reply(["set var"], self.admin.request(marker_commands(0)))
                self._marker_ok = True
            else:  # an HAProxy without process variables on its CLI (before 2.4)
                self._marker_ok = False
        return self._marker_ok

    def marker(self) -> int | None:
        """The number of the last change that ran; None when the variable is gone (restarted)."""
        reply = self.admin.request([f"get var {MARKER}"]).strip()
        if "not found" in reply.lower():
            return None
        if not reply.startswith(MARKER):
            raise RouterError(f"HAProxy answered 'get var {MARKER}' with: {reply[:200]}")
        value = reply.rsplit("<", 1)[-1].rstrip(">")
        return int(value) if value.lstrip("-").isdigit() else None

    def settled(self, seq: int) -> bool:
        """The change `seq` ran (the marker reached it), or can no longer run (HAProxy restarted:
        the marker is gone with the buffers that held the change). Without the marker (HAProxy
        before 2.4) an answer is all there is to go by."""
        if not self._marker_usable():
            self.current()
            return True
        seen = self.marker()
        if seen is not None and seen < seq:
            return False
        if seen is not None:
            # The line was taken up: it runs on at once, or not at all (its client gone).
            self.clock.sleep(LINE_PASSED_S)
            self.marker()
        return True

    def by_hand(self) -> str:
        """How an operator sends a request to this HAProxy ({request} stands for it)."""
        target = f"UNIX-CONNECT:{self.admin.path}" if not _looks_tcp(self.admin.path) else f"TCP:{self.admin.path}"
        return f"echo '{{request}}' | socat stdio {target}"

    def switch_writer(self, new: ServerLike, old: ServerLike | None = None, *, persist: bool = True,
                      log: RouteLog | None = None, seq: int | None = None) -> RouteState:
        """With persist=False the flip is the only request (inside a fenced window): the
        read-back and the server-state-file are the next switch_writer(new, old)'s."""
        cmds, back = self._planned(new, old)
        if cmds:
            self.send_change(cmds, back, log=log, seq=seq)
            if not persist:
                address = as_ref(new).address
                return RouteState(writer=address, writers=[address], details={"note": "not read back yet"})
        if persist:
            # Also when nothing was to switch: the flip may have been made with persist=False.
            self.save_state()
        st = self.current()
        if st.writers != [st.writer] or st.writer is None or not same_address(st.writer, as_ref(new).address):
            raise RouterError(f"after the switch HAProxy sends writes to {', '.join(st.writers) or 'no server'}, "
                              f"not only to {as_ref(new)}", hint="inspect 'show servers state' on the admin socket")
        return st

    def send_change(self, cmds: Sequence[str], back: Sequence[str] = (), *, log: RouteLog | None = None,
                    seq: int | None = None) -> None:
        """One change request, as the flip sends it: the marker first (when `seq` is given), the
        intent to `log` before it is sent and its answer after. Also the hold's maxconn changes
        (routing/haproxy_hold.py), so that they are journaled and settled like the flip."""
        cmds = list(cmds)
        if seq is not None and self._marker_usable():
            cmds = [*marker_commands(seq), *cmds]
        intent = RouteIntent(seq if seq is not None else 0, "; ".join(cmds), "; ".join(back), self.by_hand())
        if log is not None:
            log.sent(intent)
        reply = self.admin.request(cmds)  # RouterNoAnswer: in doubt, the caller's journal says so
        if log is not None:
            log.answered(intent)
        check_reply(cmds, reply)

    def describe_switch(self, new: ServerLike, old: ServerLike | None = None) -> list[str]:
        cmds, _, _ = self._plan(new, old)
        if not cmds:
            return [f"HAProxy {self.admin.path}: backend {self.writer_backend} already sends writes to {as_ref(new)} only"]
        lines = [f"HAProxy {self.admin.path}: {'; '.join(cmds)}"]
        lines.append(f"dump 'show servers state' to {self.state_file}" if self.state_file
                     else "no server-state-file configured: a reload of HAProxy would forget this switch")
        return lines

    def set_readers(self, readers: Sequence[str], *, gentle: bool = True) -> RouteState:
        """Readers listed go 'ready'; the others 'drain' (existing reads finish) or, with
        gentle=False, 'maint' plus 'shutdown sessions'."""
        backend = self._require_reader_backend()
        rows = self.servers(backend)
        wanted = {self._name_for(rows, backend, as_ref(a)) for a in readers}
        cmds = []
        for r in rows:
            if r.name in wanted:
                cmds.append(f"set server {backend}/{r.name} state ready")
            elif gentle:
                cmds.append(f"set server {backend}/{r.name} state drain")
            else:
                cmds += [f"set server {backend}/{r.name} state maint", f"shutdown sessions server {backend}/{r.name}"]
        self.admin.run(cmds)
        self.save_state()
        return self.current()

    def set_reader_weights(self, weights: Mapping[str, int]) -> RouteState:
        backend = self._require_reader_backend()
        rows = self.servers(backend)
        cmds = []
        for addr, w in weights.items():
            if not 0 <= int(w) <= 256:
                raise RouterError(f"weight {w} for {addr} is out of range", hint="HAProxy weights are 0..256 (0 takes no new reads)")
            cmds.append(f"set server {backend}/{self._name_for(rows, backend, as_ref(addr))} weight {int(w)}")
        if cmds:
            self.admin.run(cmds)
            self.save_state()
        return self.current()

    def _require_reader_backend(self) -> str:
        if not self.reader_backend:
            raise RouterError(f"the HAProxy router of {self.cluster} has no reader backend",
                              hint="set reader_backend in the inventory's router section")
        return self.reader_backend

    def set_server_state(self, backend: str, address: str, state: str) -> None:
        """Low-level: one server of any backend to ready, drain or maint (maint also cuts its sessions)."""
        if state not in ("ready", "drain", "maint"):
            raise RouterError(f"unknown server state {state!r}", hint="use ready, drain or maint")
        rows = self.servers(backend)
        name = self._name_for(rows, backend, as_ref(address))
        cmds = [f"set server {backend}/{name} state {state}"]
        if state == "maint":
            cmds.append(f"shutdown sessions server {backend}/{name}")
        self.admin.run(cmds)
        self.save_state()

    def save_state(self) -> None:
        """Dump the runtime state to the server-state-file, so a reload keeps the writer."""
        if self.state_file is None:
            return
        text = self.admin.request(["show servers state"])
        parse_servers_state(text)  # never write an error message where HAProxy expects state
        try:
            write_atomically(self.state_file, text, mode=0o600)
        except OSError as e:
            raise RouterError(f"the route changed but the HAProxy state file {self.state_file} could not be written: "
                              f"{e.strerror or e}", hint="fix the path/permissions and do not reload HAProxy until it is written")

    def verify(self, expected_writer: ServerLike) -> Gate:
        ok, reason, details = super().verify(expected_writer)
        if not ok or self.state_file is None:
            if ok:
                details["state_file"] = None
                reason += " (no server-state-file: a reload would forget it)"
            return ok, reason, details
        try:
            saved = [r for r in parse_servers_state(self.state_file.read_text()) if r.backend == self.writer_backend]
        except (OSError, RouterError) as e:
            return False, f"state file {self.state_file} unreadable: {e}", details
        saved_writers = [r.address for r in saved if r.takes_new_connections]
        details["state_file_writers"] = saved_writers
        if len(saved_writers) != 1 or not same_address(saved_writers[0], as_ref(expected_writer).address):
            return False, (f"state file {self.state_file} would send writes to {', '.join(saved_writers) or 'no server'} "
                           "after a reload"), details
        return True, reason, details


def wait_for_socket(path: str, timeout: float = 5.0, alive: Callable[[], bool] = lambda: True,
                    clock: Clock | None = None) -> None:
    """Block until HAProxy answers on its admin socket (bounded)."""
    admin = AdminSocket(path, timeout=1.0)
    last = ""

    def answers() -> bool:
        nonlocal last
        if not alive():
            raise RouterError("HAProxy exited during startup")
        try:
            return "Name:" in admin.request(["show info"])
        except RouterError as e:
            last = e.message
            return False

    try:
        wait_until(answers, timeout=timeout, interval=0.02, clock=clock, what=f"HAProxy admin socket {path}")
    except WaitTimeout:
        raise RouterError(f"HAProxy admin socket {path} did not answer within {timeout:g}s ({last})") from None
