"""Pure preflight check rules: grant parsing, errant GTIDs, versions, binlog, read_only, filters, lag judgement."""

from __future__ import annotations


from dbmigrate.db.flavor import MARIADB, MYSQL, ReplicaStatus
from dbmigrate.hosts import LocalHost, NoAccessHost
from dbmigrate.procedures.kit.preflight_checks import (GateResult, app_fence_rule, binlog_rule, disk_gate, disk_rule, errant_rule,
                             filters_rule, global_privileges, long_trx_rule, parse_grant, read_only_rule,
                             replication_running_rule, reverse_path_rule, versions_rule)
from dbmigrate.lag import LagSample, judge
from dbmigrate.topology.discovery import Node
from dbmigrate.topology.probe import ServerFacts


def test_gate_result_unpacks_as_three_tuple():
    ok, reason, details = GateResult(False, "why", {"a": 1}, "name")
    assert (ok, reason, details) == (False, "why", {"a": 1})


def test_parse_grant_keeps_privileges_not_passwords():
    line = "GRANT REPLICATION SLAVE, SLAVE MONITOR ON *.* TO `dbm_repl`@`%` IDENTIFIED BY PASSWORD '*ABCDEF'"
    assert parse_grant(line) == ({"REPLICATION SLAVE", "SLAVE MONITOR"}, "*.*")
    assert parse_grant("GRANT SELECT (a, b), INSERT ON `app`.`t` TO `u`@`%`") == ({"SELECT", "INSERT"}, "app.t")
    assert parse_grant("GRANT `role1` TO `u`@`%`") is None
    assert global_privileges(["GRANT USAGE ON *.* TO `u`@`%`", "GRANT ALL PRIVILEGES ON `app`.* TO `u`@`%`"]) == {"USAGE"}


def test_app_fence_fails_on_any_bypass_privilege():
    bypass = MARIADB.read_only_privileges()
    ok_user = {"%": ["GRANT USAGE ON *.* TO `app`@`%`", "GRANT ALL PRIVILEGES ON `app`.* TO `app`@`%`"]}
    assert app_fence_rule("app", ok_user, bypass, "p").ok
    for priv in ("SUPER", "READ ONLY ADMIN", "ALL PRIVILEGES"):
        r = app_fence_rule("app", {"10.%": [f"GRANT {priv} ON *.* TO `app`@`10.%`"]}, bypass, "p")
        assert not r.ok and f"@10.% has {priv}" in r.reason
    assert not app_fence_rule("app", {}, bypass, "p").ok


def test_reverse_path_needs_replication_slave_on_star():
    assert reverse_path_rule("repl", {"%": ["GRANT REPLICATION SLAVE ON *.* TO `repl`@`%`"]}, "c").ok
    r = reverse_path_rule("repl", {}, "c:1")
    assert not r.ok and "does not exist on c:1" in r.reason
    assert not reverse_path_rule("repl", {"%": ["GRANT SELECT ON *.* TO `repl`@`%`"]}, "c").ok


def test_errant_gtids_are_named():
    r = errant_rule(MARIADB, "0-1-20,0-3-12", "0-1-20", "c:3")
    assert not r.ok and r.details["errant"] == ["0-3-12"] and "0-3-12" in r.reason
    assert errant_rule(MARIADB, "0-1-18", "0-1-20", "c:3").ok
    u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert not errant_rule(MYSQL, f"{u}:1-5,aaaaaaaa-0000-0000-0000-000000000000:1", f"{u}:1-9", "c").ok


def test_versions():
    assert versions_rule("10.11.6-MariaDB", "10.6.16-MariaDB").ok
    assert versions_rule("10.11.6-MariaDB", "10.11.19-MariaDB-0+deb12u1").ok  # patch level does not matter
    assert "older" in versions_rule("10.6.1-MariaDB", "10.11.6-MariaDB").reason
    assert "flavors differ" in versions_rule("8.0.36", "10.11.6-MariaDB").reason


def facts(**kw) -> ServerFacts:
    base = dict(name="c", address="c:1", log_bin=True, binlog_format="ROW", log_slave_updates=True, read_only=True)
    base.update(kw)
    return ServerFacts(**base)


def test_binlog_rule():
    assert binlog_rule(facts()).ok
    r = binlog_rule(facts(binlog_format="STATEMENT", log_slave_updates=False))
    assert not r.ok and "STATEMENT" in r.reason and "log_slave_updates is OFF" in r.reason


def test_a_mixed_binlog_promotes_and_names_what_needs_row():
    r = binlog_rule(facts(binlog_format="MIXED"))
    assert r.ok, r.reason  # GTID positions carry a promote in any format
    assert "post-fence audit" in r.reason and "need ROW" in r.reason
    assert r.details["not_available"]


def n(addr, ro=True, io="Yes", sql="Yes", filters=None, source="p:1") -> Node:
    st = ReplicaStatus("p", 1, io, sql, 0, "", "", "Slave_Pos", filters=filters or {})
    return Node(addr, addr, facts(address=addr, read_only=ro, source=source, io_running=io, sql_running=sql), status=st)


def test_replication_running_filters_read_only():
    assert replication_running_rule([n("a"), n("b")]).ok
    r = replication_running_rule([n("a"), n("b", sql="No")])
    assert not r.ok and "b: io=Yes sql=No" in r.reason
    assert not filters_rule([n("a", filters={"Replicate_Ignore_DB": "x"})]).ok
    primary = Node("p:1", "p", facts(address="p:1", read_only=False, source=None))
    assert read_only_rule(primary, [n("a"), n("b")]).ok
    r = read_only_rule(primary, [n("a"), n("b", ro=False)])
    assert not r.ok and "b: replica read_only=False, expected ON" == r.reason


def test_long_transaction_rule():
    assert long_trx_rule(0.0, None, 30).ok
    r = long_trx_rule(45.2, {"trx_id": 77, "thread_id": 12}, 30)
    assert not r.ok and "connection 12" in r.reason and "45s > 30s" in r.reason


def test_disk_rules():
    assert not disk_rule("/d", 100 * 2**20, 200 * 2**20).ok
    assert disk_gate(NoAccessHost("db9", declared=False), "/nonexistent", 1).reason.startswith("not checked")
    assert disk_gate(NoAccessHost("rds"), "/d", 1).ok
    assert not disk_gate(LocalHost(), "/", 2**62).ok
    assert disk_gate(LocalHost(), "/", 1).ok


def test_lag_judgement():
    s = judge(LagSample("r", "r:1", 1500.0, {"0": 30}, None, "Yes", "No", "fresh"), 1000)
    assert not s.ok and "sql thread not running" in s.reason and "lag 1500 ms" in s.reason
    assert judge(LagSample("r", "r:1", 3.0, {"0": 0}, 0, "Yes", "Yes", "fresh"), 1000).ok
    assert not judge(LagSample("r", "r:1", 1200.0, {"0": 2}, 0, "Yes", "Yes", "fresh"), 1000).ok
    stale = judge(LagSample("r", "r:1", None, {"0": 0}, 0, "Yes", "Yes", "stale"), 1000)
    assert stale.ok and "heartbeat stale" in stale.reason  # GTID distance decides
    assert not judge(LagSample("r", "r:1", None, {"0": 4}, 0, "Yes", "Yes", "absent"), 1000).ok


# -- the path, not the config ---------------------------------------------------------

def test_answers_rule_names_every_failure_on_one_line():
    from dbmigrate.procedures.kit.preflight_checks import answers_rule

    ok, reason, details = answers_rule("every server answers", {"db3": "does not answer (refused)",
                                                                "db4": "does not answer (timeout)"}, ["db1", "db3", "db4"])
    assert not ok and reason == "db3: does not answer (refused); db4: does not answer (timeout)"
    assert "\n" not in reason
    ok, reason, _ = answers_rule("every server answers", {}, ["db1", "db2"])
    assert ok and reason == "every server answers: db1, db2"


class _Router:
    def __init__(self, error=None):
        self.error = error

    def describe(self):
        return "HAProxy at /run/h.sock (backend writer, cluster c)"

    def describe_switch(self, new, old=None, **kw):
        if self.error:
            raise self.error
        return [f"set server writer/{new.name} state ready"]


class _Srv:
    name = "db2"


def test_router_gate_refuses_a_router_that_cannot_switch_to_the_candidate():
    from dbmigrate.procedures.kit.preflight_checks import router_gate
    from dbmigrate.routing import RouterError

    ok, reason, _ = router_gate(_Router(RouterError("HAProxy at /run/h.sock has no backend 'writers'")), _Srv(), _Srv())
    assert not ok and reason == ("HAProxy at /run/h.sock (backend writer, cluster c): "
                                 "HAProxy at /run/h.sock has no backend 'writers'")
    ok, reason, details = router_gate(_Router(), _Srv(), _Srv())
    assert ok and details["plan"] == ["set server writer/db2 state ready"]


def test_bypassing_users_follow_roles_granted_to_users_and_to_roles():
    from dbmigrate.db.inspector import bypassing_users

    names = bypassing_users(["'root'@'localhost'", "'ro_admin'"], [("mid", "ro_admin"), ("ops", "mid"), ("app", "reader")])
    assert names == {"root", "ro_admin", "mid", "ops"}


def test_bypass_sessions_rule_refuses_an_account_not_allowed_by_name():
    from dbmigrate.procedures.kit.preflight_checks import bypass_sessions_rule

    ok, reason, _ = bypass_sessions_rule(["ops", "app", "dbmigrate"], {"ops", "dbmigrate"}, {"dbmigrate", "repl"},
                                         set(), "db1")
    assert not ok
    assert reason.startswith("account(s) ops bypass read_only and have sessions on db1")
    assert "allow_read_only_bypass: [ops]" in reason
    ok, reason, _ = bypass_sessions_rule(["ops"], {"ops"}, set(), {"ops"}, "db1")
    assert ok and "sessions are ended before the candidate opens" in reason
    ok, _, _ = bypass_sessions_rule(["app", "dbmigrate"], {"dbmigrate"}, {"dbmigrate"}, set(), "db1")
    assert ok


def test_grants_bypass_reads_global_grants_of_a_role_in_either_spelling():
    from dbmigrate.db.inspector import grants_bypass

    privs = {"SUPER", "READ ONLY ADMIN", "ALL PRIVILEGES"}
    assert grants_bypass(["GRANT READ_ONLY ADMIN ON *.* TO `ro_bypass`"], privs)
    assert grants_bypass(["GRANT ALL PRIVILEGES ON *.* TO `r`"], privs)
    assert not grants_bypass(["GRANT USAGE ON *.* TO `r`", "GRANT ALL PRIVILEGES ON `app`.* TO `r`"], privs)
