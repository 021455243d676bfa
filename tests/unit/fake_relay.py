"""A stand-in for the relay's control socket (relay/relay.go `control`): a unix-socket server in
a thread that answers each line as the relay does (commands separated by ";", run in order until
one fails, one JSON line with the status and seq_before; a line numbered below the largest marker
run is refused whole), keeps the backend, generation, hold and seq marker,
and records every command, in `sent` (shared with a fake topology's when given) as
("relay", command)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable


def relayed_cluster(tmp_path: Path) -> tuple[Any, "FakeRelay"]:
    """The fake topology's cluster (db1 the writer) with a fake relay in front of db1, whose
    commands land in the topology's record of what was sent; db1 shows the relay's own three
    idle sessions (held and moved by a switchover, never ended)."""
    from dbmigrate.db.inspector import Session
    from tests.unit.fake_topology import cluster

    topo = cluster()
    topo.servers["db1"].sessions = [Session(100 + i, "app", f"127.0.0.1:{40000 + i}", "shop", "Sleep", 0, None)
                                    for i in range(3)]
    return topo, FakeRelay(tmp_path / "relay.sock", "127.0.0.1:3301", sent=topo.sent)


def edges(sent: list[tuple[str, str]]) -> list[str]:
    """What a fake topology recorded as sent, reduced to a switchover's edges: the relay's
    commands (a move with its address), fences, opens and KILLs; `seq` markers left out."""
    out = []
    for who, what in sent:
        if who == "relay":
            out.append(what.split()[0] if not what.startswith("move") else f"move {what.split()[1]}")
        elif "read_only=ON" in what:
            out.append(f"fence {who}")
        elif "read_only=OFF" in what:
            out.append(f"open {who}")
        elif "KILL" in what:
            out.append(f"kill on {who}")
    return [e for e in out if e != "seq"]


class FakeRelay:
    def __init__(self, path: Path, backend: str, sent: list[tuple[str, str]] | None = None):
        self.path = str(path)
        self.backend, self.generation, self.holding, self.seq = backend, 1, False, 0
        self.started_ms = int(time.time() * 1000)
        self.sent: list[tuple[str, str]] = sent if sent is not None else []
        self.lines: list[str] = []
        # status fields a test sets; `busy_polls` status answers report one busy session first
        self.counts = {"sessions": 3, "idle": 3, "held": 0, "busy": 0, "logging_in": 0, "in_transaction": 0}
        self.busy_polls = 0
        self.mute = False  # read the line, never answer (a frozen relay)
        self.on_command: Callable[[str], None] | None = None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def status(self) -> dict[str, Any]:
        counts = dict(self.counts)
        if self.busy_polls > 0:
            self.busy_polls -= 1
            counts["busy"] = 1
        if self.holding:
            counts["held"], counts["idle"] = counts["idle"], 0
        return {"backend": self.backend, "generation": self.generation, "holding": self.holding,
                "held_for_s": 0, "max_hold_s": 10, **counts, "on_old_backend": 0, "ended": 0,
                "seq": self.seq, "started_ms": self.started_ms}

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                line = data.decode().strip()
                if not line:
                    continue
                self.lines.append(line)
                if self.mute:
                    time.sleep(1.0)
                    continue
                conn.sendall((json.dumps(self.answer(line)) + "\n").encode())

    def answer(self, line: str) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": True, "seq_before": self.seq}
        marker = [int(c.split()[1]) for c in line.split(";") if len(c.split()) == 2 and c.split()[0] == "seq"]
        if marker and marker[0] < self.seq:  # numbered before a change that already ran: refused whole
            out["ok"], out["error"] = False, f"stale: seq {marker[0]} is older than {self.seq}; nothing run"
            out["status"] = self.status()
            return out
        for cmd in (c.strip() for c in line.split(";")):
            if not cmd:
                continue
            args = cmd.split()
            if args[0] != "status":
                self.sent.append(("relay", cmd))
            if self.on_command is not None:
                self.on_command(cmd)
            if args[0] == "hold":
                self.holding = True
            elif args[0] == "release":
                self.holding = False
            elif args[0] == "move" and len(args) >= 2 and ":" in args[1]:
                if args[1] != self.backend:
                    self.backend, self.generation = args[1], self.generation + 1
                out["move"] = {"moved": 3, "failed": 0, "waiting_in_transaction": 0, "moving_at_next_command": 0}
            elif args[0] == "seq":
                self.seq = max(self.seq, int(args[1]))
            elif args[0] != "status":
                out["ok"], out["error"] = False, f"unknown command {cmd!r}"
                break
        out["status"] = self.status()
        return out
