"""The app_user_fenced gate covers every account that can write the application's schemas,
not only the inventory's app account (on the fake topology's servers)."""

from __future__ import annotations

from dbmigrate.db.inspector import Session
from dbmigrate.procedures.kit.preflight_checks import app_fence_gate
from tests.unit.fake_topology import TOOL_USER, cluster

APP = ["GRANT USAGE ON *.* TO `app`@`%`", "GRANT ALL PRIVILEGES ON `app`.* TO `app`@`%`"]


def topology(**accounts):
    """db1 (primary) and db2 (candidate) with the app account, the tool's own accounts, and
    `accounts` ({user: (levels, bypasses read_only)}) on both."""
    topo = cluster(("db1", "db2"))
    for s in topo.servers.values():
        s.grants[("app", "%")] = APP
        s.writers = {("app", "%"): {"schema"}, (TOOL_USER, "%"): {"global"}, ("repl", "%"): {"global"}}
        s.bypass_users = {TOOL_USER, "repl"}
        for user, (levels, bypasses) in accounts.items():
            s.writers[(user, "%")] = set(levels)
            if bypasses:
                s.bypass_users.add(user)
    return topo


def gate(topo, allowed=()):
    return app_fence_gate([(s.address, topo.inspector(n)) for n, s in topo.servers.items()], "app", "repl", allowed)


def test_a_second_application_account_with_a_table_grant_that_bypasses_read_only_fails():
    topo = topology(billing=({"table"}, True))
    g = gate(topo)
    assert not g.ok
    assert "'billing' writes the application's schemas (table) and bypasses read_only on 127.0.0.1:3301" in g.reason
    assert "allow_read_only_bypass: [billing]" in g.reason
    # Allowed by name: its sessions are ended at the fence, and the gate says so.
    allowed = gate(topo, ("billing",))
    assert allowed.ok and "'billing' (table) bypasses read_only: allowed" in allowed.reason


def test_every_writing_account_is_named_and_the_tools_own_are_excluded():
    topo = topology(billing=({"table"}, False), reports=({"column", "role writer"}, False))
    g = gate(topo)
    assert g.ok, g.reason
    assert "app (schema), billing (table), reports (column, role writer)" in g.reason
    assert f"not checked: {TOOL_USER}, repl (the tool's own)" in g.reason
    checked = g.details["servers"]["127.0.0.1:3301"]["checked"]
    assert checked == {"app": ["schema"], "billing": ["table"], "reports": ["column", "role writer"]}


def test_a_write_through_a_role_counts_like_a_direct_one():
    g = gate(topology(reports=({"role writer"}, True)))
    assert not g.ok and "'reports' writes the application's schemas (role writer)" in g.reason


def test_a_global_writer_that_bypasses_read_only_fails_only_with_a_session():
    topo = topology(root=({"global"}, True))
    g = gate(topo)
    assert g.ok and "warning: 'root' (global write privileges) bypasses read_only" in g.reason
    topo.servers["db2"].sessions.append(Session(42, "root", "localhost", None, "Sleep", 3, None))
    assert gate(topo).ok  # on the candidate: not fenced now
    topo.servers["db1"].sessions.append(Session(41, "root", "localhost", "app", "Sleep", 3, None))
    g = gate(topo)
    assert not g.ok and "'root' (global write privileges) bypasses read_only and has 1 session(s) on 127.0.0.1:3301" \
        in g.reason


def test_the_inventory_app_account_is_still_required_on_every_server():
    topo = topology()
    del topo.servers["db2"].grants[("app", "%")]
    g = gate(topo)
    assert not g.ok and "application user 'app' not found on 127.0.0.1:3302" in g.reason
