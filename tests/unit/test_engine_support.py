"""Fakes shared by the engine tests (no tests here).

World: a dict standing in for server state, so steps have real, checkable
effects. FakeLockServer/FakeSession: MySQL named-lock semantics per connection.
"""

from __future__ import annotations

import re
from typing import Any

from dbmigrate.engine import EventBus, FunctionStep, Journal, Phase, Procedure, RunContext
from dbmigrate.engine.journal import new_run_id


class World:
    """Server state plus a log of every call the steps received."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.calls: list[str] = []

    def step(self, name: str, *, mutating: bool = True, fail: bool = False, with_check: bool = True,
             with_undo: bool = True, fail_undo: bool = False) -> FunctionStep:
        def run(ctx: RunContext) -> str:
            self.calls.append(f"run:{name}")
            if fail:
                raise RuntimeError(f"{name} exploded")
            self.state[name] = True
            ctx.record_statement("db-1", f"DO '{name}'", 0.5)
            return f"did {name}"

        def check(ctx: RunContext) -> bool:
            self.calls.append(f"check:{name}")
            return bool(self.state.get(name))

        def undo(ctx: RunContext) -> str:
            self.calls.append(f"undo:{name}")
            if fail_undo:
                raise RuntimeError(f"cannot undo {name}")
            self.state.pop(name, None)
            return f"undid {name}"

        def describe(ctx: RunContext) -> list:
            return [("db-1", f"DO '{name}'")]

        return FunctionStep(name, run, check=check if with_check else None, undo=undo if with_undo else None,
                            describe=describe, mutating=mutating)

    def runs(self) -> list[str]:
        return [c for c in self.calls if c.startswith("run:")]

    def undos(self) -> list[str]:
        return [c for c in self.calls if c.startswith("undo:")]


def two_phase_procedure(world: World, **kwargs: Any) -> Procedure:
    return Procedure("demo", [
        Phase("prepare", [world.step("a"), world.step("b")]),
        Phase("cutover", [world.step("c"), world.step("d")]),
    ], **kwargs)


def new_context(journal: Journal, *, dry_run: bool = False, run_id: str | None = None,
                bus: EventBus | None = None, procedure: str = "demo", cluster: str = "main") -> RunContext:
    run_id = run_id or new_run_id()
    if journal.get_run(run_id) is None:
        journal.create_run(run_id, procedure=procedure, cluster=cluster, params={"x": 1}, dry_run=dry_run)
    return RunContext(run_id=run_id, procedure=procedure, cluster=cluster, journal=journal,
                      bus=bus or EventBus(), dry_run=dry_run)


class FakeLockServer:
    """Named locks as MySQL keeps them: owned by a connection, gone when it closes."""

    def __init__(self) -> None:
        self.owners: dict[str, int] = {}
        self.next_connection = 10

    def connect(self) -> "FakeSession":
        self.next_connection += 1
        return FakeSession(self, self.next_connection)


class FakeSession:
    _CALL = re.compile(r"SELECT (GET_LOCK|IS_FREE_LOCK|IS_USED_LOCK|RELEASE_LOCK)\(%s(?:, 0)?\) AS (\w+)")

    def __init__(self, server: FakeLockServer, connection_id: int) -> None:
        self.server = server
        self.connection_id = connection_id
        self.sent: list[str] = []
        self.closed = False

    def query(self, sql: str, params: tuple | None = None) -> list[dict[str, Any]]:
        self.sent.append(sql)
        killed = re.fullmatch(r"KILL CONNECTION (\d+)", sql)
        if killed:  # the session ends, and the locks it held with it
            for name, owner in list(self.server.owners.items()):
                if owner == int(killed.group(1)):
                    del self.server.owners[name]
            return []
        match = self._CALL.fullmatch(sql)
        assert match and params, f"unexpected SQL {sql!r}"
        function, column = match.groups()
        name = params[0]
        owner = self.server.owners.get(name)
        if function == "GET_LOCK":
            if owner in (None, self.connection_id):
                self.server.owners[name] = self.connection_id
                value: Any = 1
            else:
                value = 0
        elif function == "IS_FREE_LOCK":
            value = int(owner is None)
        elif function == "IS_USED_LOCK":
            value = owner
        else:  # RELEASE_LOCK: 1 released, 0 someone else's, NULL no such lock
            value = None if owner is None else int(owner == self.connection_id)
            if owner == self.connection_id:
                del self.server.owners[name]
        return [{column: value}]

    def close(self) -> None:
        self.closed = True
        for name, owner in list(self.server.owners.items()):
            if owner == self.connection_id:
                del self.server.owners[name]
