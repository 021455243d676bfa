"""Roles and PROXY grants of a shape: which role lines are replayed, and the flavor's syntax."""

from __future__ import annotations

from dbmigrate.db.flavor import MARIADB, MYSQL
from dbmigrate.db.shape_writer import role_privilege_line


def test_a_roles_privileges_are_replayed_as_captured_and_nothing_else():
    assert role_privilege_line("GRANT SELECT ON `ca`.`accounts` TO `ca_reader`") == \
        "GRANT SELECT ON `ca`.`accounts` TO `ca_reader`"
    assert role_privilege_line("GRANT USAGE ON *.* TO `ca_reader`") is None
    assert role_privilege_line("GRANT `base` TO `ca_reader`") is None  # a role of the role: a role grant
    assert role_privilege_line("GRANT PROXY ON 'a'@'%' TO `ca_reader`") is None


def test_roles_are_names_on_mariadb_and_accounts_on_mysql():
    assert MARIADB.role_account("ca_reader", "") == "`ca_reader`"
    assert MYSQL.role_account("ca_reader", "%") == "`ca_reader`@`%`"
    assert MARIADB.set_default_role_sql("`r`") == "SET DEFAULT ROLE `r` FOR %s@%s"
    assert MYSQL.set_default_role_sql("`r`@`%`") == "SET DEFAULT ROLE `r`@`%` TO %s@%s"
    assert "mysql.roles_mapping" in MARIADB.role_grants_sql() and "mysql.role_edges" in MYSQL.role_grants_sql()
    assert "mysql.default_roles" in MYSQL.default_roles_sql() and "default_role" in MARIADB.default_roles_sql()
