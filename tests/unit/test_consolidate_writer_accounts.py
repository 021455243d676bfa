"""The consolidation cutover covers every account that writes the moved shards, not only the
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
