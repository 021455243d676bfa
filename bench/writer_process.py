"""The zero-loss verifier's writer in a process of its own, as an application is.

In the benchmark's process the writer thread and the tool share one interpreter lock: a
thread that wants it back can wait up to the switch interval (5 ms) while the other runs
Python, so each would add to the gap it measures. In its own process the writer sees the
cutover as an application behind HAProxy does: only through the router.

Acks carry time.monotonic(), which is system-wide on Linux, so the benchmark compares
them with its own moments directly.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
from pathlib import Path
from typing import Any

from dbmigrate.rehearsal.verify.report import Ack, VerifyReport


def _serve(conn, inventory: str, cluster: str, options: dict[str, Any]) -> None:
    from dbmigrate.config import load_inventory
    from dbmigrate.rehearsal.verify import ZeroLossVerifier

    # The writer keeps every ack (tens of thousands of objects): a full collection then takes
    # tens of ms, a pause of the writer's own that would be counted as the cutover's. What it
    # allocates is freed by reference counting; nothing here needs the cyclic collector.
    gc.disable()
    inv = load_inventory(Path(inventory))
    verifier = ZeroLossVerifier.for_cluster(inv, cluster, **options)
    try:
        verifier.prepare()
        verifier.start()
        conn.send(("ok", None))
        while True:
            cmd, arg = conn.recv()
            if cmd == "acks":
                conn.send(("ok", [(a.id, a.mono, a.wall, a.server_id) for a in verifier.acks[arg:]]))
            elif cmd == "errors":
                conn.send(("ok", verifier.errors))
            elif cmd == "error_times":
                conn.send(("ok", verifier.error_times(arg)))
            elif cmd == "check":
                verifier.stop()
                servers = [inv.open(n) for n in inv.cluster(cluster).servers]
                try:
                    conn.send(("ok", verifier.check(servers, catch_up_timeout_s=arg)))
                finally:
                    for s in servers:
                        s.close()
                return
    except Exception as e:  # the parent raises it: a silent dead writer would prove nothing
        conn.send(("error", f"{type(e).__name__}: {e}"))


class WriterProcess:
    """start(); acks / errors while it writes; check() stops it and checks every server."""

    def __init__(self, inventory: Path, cluster: str, **options: Any):
        self._args = (str(inventory), cluster, options)
        self._conn = None
        self._proc: mp.Process | None = None
        self._acks: list[Ack] = []

    def start(self, timeout_s: float = 30.0) -> None:
        ctx = mp.get_context("spawn")  # no state of this process (threads, sessions) is inherited
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, *self._args), name="app-writer", daemon=True)
        self._proc.start()
        if not self._conn.poll(timeout_s):
            self.kill()
            raise RuntimeError(f"the writer process did not start within {timeout_s:g}s")
        self._answer()

    def _ask(self, cmd: str, arg: Any = None, timeout_s: float = 30.0) -> Any:
        self._conn.send((cmd, arg))
        if not self._conn.poll(timeout_s):
            raise RuntimeError(f"the writer process did not answer '{cmd}' within {timeout_s:g}s")
        return self._answer()

    def _answer(self) -> Any:
        status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(f"the writer process failed: {value}")
        return value

    @property
    def acks(self) -> list[Ack]:
        self._acks += [Ack(*a) for a in self._ask("acks", len(self._acks))]
        return list(self._acks)

    @property
    def errors(self) -> dict[str, int]:
        return self._ask("errors")

    def error_times(self, since: int = 0) -> list[tuple[float, str]]:
        return [tuple(e) for e in self._ask("error_times", since)]

    def wait_for_acks(self, count: int, timeout_s: float = 10.0) -> None:
        import time

        deadline = time.monotonic() + timeout_s
        while len(self.acks) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self._acks)} of {count} writes acknowledged within {timeout_s:g}s "
                                   f"(errors: {self.errors})")
            time.sleep(0.005)

    def check(self, catch_up_timeout_s: float = 60.0) -> VerifyReport:
        try:
            return self._ask("check", catch_up_timeout_s, timeout_s=catch_up_timeout_s + 60)
        finally:
            self.kill()

    def kill(self) -> None:
        if self._proc is not None:
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
            self._proc = None
