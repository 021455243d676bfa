"""One relay per shard route in front of a sandbox's old shard servers (a consolidation through
relays: the cluster's `shard_routers`), each with the shard's server as its backend. Built, its
users file and control socket made as sandbox/relay.py makes the cluster's relay; kept in the
sandbox's state (`shard_relays`) and stopped by pid with the sandbox (`down`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from dbmigrate.exceptions import SandboxError
from dbmigrate.rehearsal.sandbox.ports import free_port
from dbmigrate.rehearsal.sandbox.relay import (
    is_our_relay, launch, refresh_users, relay_binary, socket_path, stop_pid_of, write_users_file,
)


def start(boxes: Any, sandbox_name: str, backends: dict[str, str], *, max_hold_s: float = 10,
          drain_s: float = 5) -> dict[str, dict[str, Any]]:
    """Start a relay for each shard of `backends` (shard -> the sandbox instance that holds it);
    returns shard -> its relay (`address`, `control_socket`, `log`, ...). Idempotent while they run."""
    from dbmigrate.config import load_inventory
    from dbmigrate.db.inspector import Inspector

    state = boxes.find(sandbox_name)
    binary = relay_binary()
    inv = load_inventory(state.inventory_file)
    out = {}
    for shard, server in backends.items():
        r = state.shard_relays.get(shard)
        if r and r.get("pid") and is_our_relay(r["pid"], r["binary"]):
            out[shard] = dict(r)
            continue
        if server not in state.instances:
            raise SandboxError(f"sandbox {state.name} has no instance {server} (the backend of {shard}'s relay)")
        rdir = state.path / f"relay-{shard}"
        rdir.mkdir(exist_ok=True)
        users_file = rdir / "users"
        with inv.open(server) as s:
            if not write_users_file(users_file, Inspector(s).native_password_hashes()):
                raise SandboxError(f"{server} has no mysql_native_password account: the relay could log nobody in")
        control, tmp_dir = socket_path(rdir)
        state_file = rdir / "relay.state"
        state_file.unlink(missing_ok=True)  # an earlier run's backend must not pick the writer
        taken = {i.port for i in state.instances.values()} | {x["port"] for x in state.shard_relays.values()}
        r = {"binary": str(binary), "port": free_port(taken), "backend": f"127.0.0.1:{state.instances[server].port}",
             "users_file": str(users_file), "control_socket": control, "state_file": str(state_file),
             "log": str(rdir / "relay.log"), "socket_tmp_dir": tmp_dir, "max_hold_s": max_hold_s, "drain_s": drain_s}
        r["pid"] = launch(r).pid
        r["address"] = f"127.0.0.1:{r['port']}"
        state.shard_relays[shard] = r
        state.save()
        out[shard] = dict(r)
    return out


def reload_users(boxes: Any, sandbox_name: str, backends: dict[str, str]) -> None:
    """Accounts created on a shard's server after its relay started (a shape's) made known to the
    relay (relay.refresh_users)."""
    from dbmigrate.config import load_inventory

    state = boxes.find(sandbox_name)
    inv = load_inventory(state.inventory_file)
    for shard, server in backends.items():
        with inv.open(server) as s:
            refresh_users(state.shard_relays[shard], s)


def inventory_entries(relays: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The cluster's `shard_routers` for these relays."""
    return {shard: {"kind": "relay", "address": r["address"], "control_socket": r["control_socket"]}
            for shard, r in relays.items()}


def stop(state: Any) -> None:
    for r in (state.shard_relays or {}).values():
        if r.get("pid"):
            stop_pid_of(r["pid"], r.get("binary"))
            r["pid"] = None
        if r.get("socket_tmp_dir"):
            shutil.rmtree(r["socket_tmp_dir"], ignore_errors=True)
        Path(r.get("control_socket", "")).unlink(missing_ok=True)
    if state.shard_relays and state.path.exists():
        state.save()
