"""The relay (relay/, docs/internals/relay.md) as the router: writes go to its one backend.

Inventory:

    router: {kind: relay, address: HOST:PORT, control_socket: PATH}

`address` is where the applications connect (the relay's listener); `control_socket` its
control API (a unix socket, one line per request, one JSON line per answer, with the relay's
status in every answer). A line may carry several commands separated by ";", run in order
until one fails; `seq N` last on a line is the change marker: once the relay's status shows a
seq >= N, every command before it on that line has run (see `settled`).

The writer switch is `move NEW; release; seq N`: every idle or held session moves to NEW with
its state, and held commands go on there. Its `back` is the move to the writer it leaves. A
relay started with `-state FILE` saves its backend on every move and reads it at start, so a
restarted relay keeps the current writer (as HAProxy's server-state-file does).
"""

from __future__ import annotations

import json
import socket
from typing import Any, Mapping, Sequence

from dbmigrate import faultpoint
from dbmigrate.routing.base import RouteLog, RouteIntent, RouterError, RouterGone, RouterNoAnswer, RouteState, Router, \
    ServerLike, as_ref, same_address


class RelayControl:
    """The relay's control socket: one request (a line) per connection, one JSON answer."""

    def __init__(self, path: str, timeout: float = 5.0):
        self.path = path
        self.timeout = timeout

    def request(self, commands: Sequence[str]) -> dict[str, Any]:
        """Send the commands as one line (the relay runs them in order) and return its answer.
        Once the line is sent, no answer raises RouterNoAnswer: the relay may still run it."""
        for c in commands:
            if "\n" in c or ";" in c:
                raise RouterError(f"refusing to send a relay command containing ';' or a newline: {c!r}")
        line = "; ".join(commands) + "\n"
        sent = False
        chunks: list[bytes] = []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                faultpoint.sending("router relay", line)  # no-op unless a fault-injection pause listens
                sock.connect(self.path)
                sent = True
                sock.sendall(line.encode())
                while not chunks or not chunks[-1].endswith(b"\n"):
                    b = sock.recv(65536)
                    if not b:
                        break
                    chunks.append(b)
        except FileNotFoundError:
            raise RouterGone(f"relay control socket {self.path} does not exist",
                             hint="is the relay running, with -control PATH as in the inventory?") from None
        except PermissionError:
            raise RouterError(f"no permission on relay control socket {self.path}",
                              hint="run dbmigrate as the user that runs the relay (the socket is mode 600)") from None
        except ConnectionRefusedError:
            raise RouterGone(f"relay control socket {self.path} refused the connection (relay not running?)",
                             hint="start the relay; with -state FILE it starts on the backend of its last move") from None
        except socket.timeout:
            if sent:
                raise RouterNoAnswer(f"relay control socket {self.path} did not answer '{line.strip()[:200]}' within "
                                     f"{self.timeout:g}s: the relay may still run it",
                                     hint="the relay may be frozen or overloaded; check it before retrying") from None
            raise RouterError(f"relay control socket {self.path} did not answer within {self.timeout:g}s") from None
        except OSError as e:
            if sent:
                raise RouterNoAnswer(f"relay control socket {self.path}: {e.strerror or e} after "
                                     f"'{line.strip()[:200]}' was sent: the relay may still run it") from None
            raise RouterError(f"relay control socket {self.path}: {e.strerror or e}") from None
        text = b"".join(chunks).decode(errors="replace").strip()
        if not text:
            if sent:
                raise RouterNoAnswer(f"relay control socket {self.path} closed without answering "
                                     f"'{line.strip()[:200]}': the relay may have run it")
        faultpoint.router_command_sent(line)  # no-op unless a fault-injection pause listens
        try:
            answer = json.loads(text)
        except ValueError:
            raise RouterError(f"the relay answered '{line.strip()[:200]}' with: {text[:200]}") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("status"), dict):
            raise RouterError(f"the relay answered '{line.strip()[:200]}' with: {text[:200]}")
        return answer

    def run(self, commands: Sequence[str]) -> dict[str, Any]:
        answer = self.request(commands)
        if answer.get("ok") is not True:
            raise RouterError(f"the relay refused '{'; '.join(commands)}': {answer.get('error') or answer}")
        return answer


class RelayRouter(Router):
    kind = "relay"

    def __init__(self, cluster: str, control_socket: str, address: str | None = None, timeout: float = 5.0):
        super().__init__(cluster)
        self.control = RelayControl(control_socket, timeout)
        self.address = address  # where the applications connect

    def describe(self) -> str:
        return f"relay at {self.control.path} (cluster {self.cluster})"

    def status(self) -> dict[str, Any]:
        st: dict[str, Any] = self.control.run(["status"])["status"]
        return st

    def current(self) -> RouteState:
        st = self.status()
        backend = str(st.get("backend") or "")
        if not backend:
            raise RouterError(f"the relay at {self.control.path} reports no backend: {st}")
        return RouteState(writer=backend, writers=[backend], details={"relay": st})

    def by_hand(self) -> str:
        return f"echo '{{request}}' | socat stdio UNIX-CONNECT:{self.control.path}"

    def settled(self, seq: int) -> bool:
        """The change `seq` ran (the relay's seq marker reached it), or can no longer run: the
        relay answering started after it was numbered (seq is the sending time in ms), so the
        process it was sent to is gone, and its pending request with it."""
        st = self.status()
        return int(st.get("seq") or 0) >= seq or int(st.get("started_ms") or 0) > seq

    can_fence_off = True

    def fence_off(self, seq: int) -> bool:
        """A lone `seq seq+1` line: the relay refuses whole any line numbered below it from now
        on, and runs changing lines one at a time, so the change `seq` either ran before the
        fence (its answer's seq_before reaches `seq`) or never will."""
        answer = self.control.request([f"seq {int(seq) + 1}"])
        if answer.get("ok") is not True or "seq_before" not in answer:
            raise RouterError(f"the relay at {self.control.path} could not fence off the change numbered {seq}: "
                              f"{answer.get('error') or 'its answer has no seq_before (a build older than this tool)'}",
                              hint="build the relay from this tool's relay/ sources and restart it")
        return int(answer["seq_before"]) >= int(seq)

    def send_change(self, cmds: Sequence[str], back: Sequence[str] = (), *, log: RouteLog | None = None,
                    seq: int | None = None) -> dict[str, Any]:
        """One change line: the marker last (when `seq` is given), the intent to `log` before it
        is sent and its answer after; a refusal raises RouterError once journaled as answered."""
        cmds = list(cmds)
        if seq is not None:
            cmds.append(f"seq {int(seq)}")
        intent = RouteIntent(seq if seq is not None else 0, "; ".join(cmds), "; ".join(back), self.by_hand())
        if log is not None:
            log.sent(intent)
        try:
            answer = self.control.request(cmds)  # RouterNoAnswer: in doubt, the caller's journal says so
        except RouterGone:
            if log is not None:
                log.answered(intent)  # not sent: nothing listens there, it can never run
            raise
        if log is not None:
            log.answered(intent)
        if answer.get("ok") is not True:
            raise RouterError(f"the relay refused '{intent.request}': {answer.get('error') or answer}")
        return answer

    def switch_writer(self, new: ServerLike, old: ServerLike | None = None, *, persist: bool = True,
                      log: RouteLog | None = None, seq: int | None = None) -> RouteState:
        """`move NEW; release`: idle and held sessions move to NEW with their state, held commands
        go on there. `persist` changes nothing: the relay's -state file is written by the move."""
        new_ref = as_ref(new)
        st = self.current()
        if st.writer is not None and same_address(st.writer, new_ref.address):
            return st
        if old is not None and st.writer is not None and not same_address(st.writer, as_ref(old).address):
            raise RouterError(f"the relay sends writes to {st.writer}, not to {as_ref(old)}: refusing to switch",
                              hint="someone else moved the relay; read 'status' on its control socket before retrying")
        back = [f"move {st.writer}", "release"] if st.writer else []
        answer = self.send_change([f"move {new_ref.address}", "release"], back, log=log, seq=seq)
        after = answer["status"]
        if not same_address(str(after.get("backend")), new_ref.address):
            raise RouterError(f"after the move the relay sends writes to {after.get('backend')}, not to {new_ref}")
        moved = answer.get("move") or {}
        return RouteState(writer=str(after["backend"]), writers=[str(after["backend"])],
                          details={"relay": after, "move": moved})

    def describe_switch(self, new: ServerLike, old: ServerLike | None = None) -> list[str]:
        new_ref = as_ref(new)
        st = self.current()
        if st.writer is not None and same_address(st.writer, new_ref.address):
            return [f"relay {self.control.path}: already sends writes to {new_ref}"]
        return [f"relay {self.control.path}: move {new_ref.address}; release (sessions move from {st.writer} with "
                f"their state; held commands go on there)"]

    def set_reader_weights(self, weights: Mapping[str, int]) -> RouteState:
        raise RouterError("the relay routes writes only: it has no readers to weigh",
                          hint="route reads another way (a reader HAProxy or the applications' own list)")

    def set_readers(self, readers: Sequence[str]) -> RouteState:
        raise RouterError("the relay routes writes only: it has no readers",
                          hint="route reads another way (a reader HAProxy or the applications' own list)")
