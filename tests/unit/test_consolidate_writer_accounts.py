"""Accounts of the moved shards: the roles that give some of them their privileges are copied and
compared, and the consolidation cutover covers every account that writes the shards, not only the
inventory's app account: each must be stopped by read_only on the old server (before the fence)
and hold its write grants on the writable instance (after the switch)."""

from __future__ import annotations

from types import SimpleNamespace

from dbmigrate.db.grants import parse
from dbmigrate.procedures.consolidate.accounts import Accounts, writers_on_instance, writers_that_bypass

APP = "GRANT SELECT, INSERT, UPDATE, DELETE ON `shard\\_%`.* TO `app`@`%`"
BILLING = "GRANT INSERT, UPDATE ON `shard_3`.`invoices` TO `billing`@`%`"
REPORTS = "GRANT SELECT ON `shard_3`.* TO `reports`@`%`"


def accounts() -> Accounts:
    return Accounts({("app", "%"): [parse(APP)], ("billing", "%"): [parse(BILLING)],
                     ("reports", "%"): [parse(REPORTS)]})


class Instance:
    """What the check reads on an instance, as the tool's account."""

    def __init__(self, grants: dict[str, list[str]], read_only: bool = False):
        self.server = SimpleNamespace(name="inst-1")
        self._grants, self._read_only = grants, read_only

    def read_only(self) -> bool:
        return self._read_only

    def account_exists(self, user: str, host: str) -> bool:
        return user in self._grants

    def grants(self, user: str, host: str = "%") -> list[str]:
        return self._grants.get(user, [])


def test_every_writing_account_is_covered_not_only_the_inventorys():
    assert accounts().writers == [("app", "%"), ("billing", "%")]  # a reader is no writer
    ok, problems = writers_on_instance(Instance({"app": [APP], "billing": [BILLING], "reports": [REPORTS]}),
                                       accounts(), ["shard_3"])
    assert ok == ["app@%", "billing@%"] and problems == []


def test_a_second_writer_without_its_grant_on_the_instance_is_named():
    ok, problems = writers_on_instance(Instance({"app": [APP], "billing": [], "reports": [REPORTS]}), accounts(),
                                       ["shard_3"])
    assert ok == ["app@%"]
    assert problems == ["billing@% cannot write on inst-1: lacks " + BILLING]
    ok, problems = writers_on_instance(Instance({"app": [APP]}), accounts(), ["shard_3"])
    assert problems == ["billing@% does not exist on inst-1"]


def test_a_read_only_instance_fails_every_writer_and_other_shards_grants_do_not_count():
    assert writers_on_instance(Instance({"app": [APP]}, read_only=True), accounts(), ["shard_3"]) == \
        ([], ["inst-1 is read-only: no application account can write there"])
    ok, problems = writers_on_instance(Instance({"app": [APP]}), accounts(), ["shard_7"])
    assert ok == ["app@%"] and problems == []  # billing writes shard_3 only


def test_a_writer_that_bypasses_read_only_refuses_the_fence():
    assert writers_that_bypass(accounts(), {"billing", "reports"}, "old-2") == \
        ["billing@% writes the shards and bypasses read_only on old-2: the fence would not stop it"]
    assert writers_that_bypass(accounts(), set(), "old-2") == []


ROLE_LINE = "GRANT SELECT, INSERT ON `shard_3`.`items` TO `writer_role`"


class Server:
    """An old server or an instance as the account copy and check read and write it."""

    def __init__(self, name: str, users: dict, roles: dict, members: list, defaults: dict):
        self.server = SimpleNamespace(name=name)
        self.users, self.roles, self.members, self.defaults = users, roles, members, defaults
        self.sent: list[str] = []

    def account_exists(self, user, host):
        return (user, host) in self.users

    def create_user_statement(self, user, host):
        return f"CREATE USER `{user}`@`{host}` IDENTIFIED BY PASSWORD '*X'"

    def grants(self, user, host="%"):
        return self.users.get((user, host), [])

    def role_exists(self, role):
        return role in self.roles

    def role_grants(self, role):
        return self.roles.get(role, [])

    def role_members(self, roles):
        return sorted(m for m in self.members if m[2] in roles)

    def default_role(self, user, host):
        return self.defaults.get((user, host), "")

    def base_tables(self, schema):
        return ["items"]

    # the applier's side
    def replay_account_statement(self, statement):
        self.sent.append(statement)
        if statement.startswith("CREATE USER"):
            self.users[(statement.split("`")[1], statement.split("`")[3])] = []

    def create_role(self, role):
        self.sent.append(f"CREATE ROLE {role}")

    def grant_role(self, role, user, host):
        self.sent.append(f"GRANT {role} TO {user}@{host}")

    def set_default_role(self, role, user, host):
        self.sent.append(f"SET DEFAULT ROLE {role} FOR {user}@{host}")


def test_roles_of_the_shards_are_copied_with_their_members_and_default_roles_and_then_compared():
    from dbmigrate.procedures.consolidate.accounts import copy_accounts, differences

    accounts = Accounts(roles={"writer_role": [parse(ROLE_LINE)]}, members=[("certs_rw", "%", "writer_role")],
                        default_roles={("certs_rw", "%"): "writer_role"})
    assert accounts.users == [("certs_rw", "%")] and "role writer_role" in accounts.names()
    old = Server("old-2", {("certs_rw", "%"): []}, {"writer_role": [ROLE_LINE]}, [("certs_rw", "%", "writer_role")],
                 {("certs_rw", "%"): "writer_role"})
    new = Server("inst-1", {}, {}, [], {})
    assert differences(old, new, accounts, ["shard_3"]) == [
        "certs_rw@% does not exist on inst-1", "role writer_role does not exist on inst-1",
        "certs_rw@% does not hold role writer_role on inst-1"]
    copy_accounts(old, new, new, accounts)
    assert new.sent == ["CREATE ROLE writer_role", ROLE_LINE,
                        "CREATE USER `certs_rw`@`%` IDENTIFIED BY PASSWORD '*X'",
                        "GRANT writer_role TO certs_rw@%", "SET DEFAULT ROLE writer_role FOR certs_rw@%"]
    # What the server holds after those statements: compared equal.
    new.roles, new.members, new.defaults = {"writer_role": [ROLE_LINE]}, [("certs_rw", "%", "writer_role")], \
        {("certs_rw", "%"): "writer_role"}
    assert differences(old, new, accounts, ["shard_3"]) == []
    new.defaults = {}
    assert differences(old, new, accounts, ["shard_3"]) == ["certs_rw@% does not start with role writer_role on inst-1"]


def test_an_account_that_writes_only_through_a_role_must_be_stopped_by_read_only_too():
    writer_role = "GRANT INSERT, UPDATE ON `shard_3`.* TO `shard_writer`"
    found = Accounts({("app", "%"): [parse(APP)]}, roles={"shard_writer": [parse(writer_role)],
                                                          "readers": [parse("GRANT SELECT ON `shard_3`.* TO `readers`")]},
                     members=[("ops", "%", "shard_writer"), ("team", "", "shard_writer"), ("lead", "%", "team"),
                              ("audit", "%", "readers")])
    # ops holds the writing role, lead holds it through the role team; audit only reads.
    assert found.role_writers == [("lead", "%"), ("ops", "%")]
    assert writers_that_bypass(found, {"lead", "audit"}, "old-1") == [
        "lead@% writes the shards through a role and bypasses read_only on old-1: the fence would not stop it"]
    assert writers_that_bypass(found, {"audit"}, "old-1") == []
