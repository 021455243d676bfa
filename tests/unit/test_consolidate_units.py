"""Pure pieces of the consolidate procedure: dump coordinates, grant selection,
sandbox settings, named-connection SQL for both flavors."""

from __future__ import annotations

import pytest

from dbmigrate.db.flavor import MARIADB, MYSQL
from dbmigrate.procedures.consolidate.procedure import (
    ConsolidateError,
    dump_command,
    dump_coordinates,
    grants_for_shards,
    import_command,
    sandbox_extra,
)

HEAD = """-- MariaDB dump 10.19
--
-- Position to start replication or point-in-time recovery from
--

-- CHANGE MASTER TO MASTER_LOG_FILE='mysql-bin.000003', MASTER_LOG_POS=2410;
"""


def test_dump_coordinates_come_from_the_master_data_comment():
    assert dump_coordinates(HEAD) == ("mysql-bin.000003", 2410)
    with pytest.raises(ConsolidateError, match="no binlog coordinates"):
        dump_coordinates("-- MariaDB dump 10.19\nCREATE DATABASE x;\n")


def test_commands_never_carry_a_password():
    dump = dump_command("/tmp/x.cnf", ["shard_1", "shard_2"])
    assert dump[:2] == ["mariadb-dump", "--defaults-file=/tmp/x.cnf"]
    assert "--single-transaction" in dump and "--master-data=2" in dump
    assert dump[-3:] == ["--databases", "shard_1", "shard_2"]
    imp = import_command("/tmp/y.cnf")
    assert "--init-command=SET SESSION sql_log_bin=0" in imp
    assert not any("password" in a for a in dump + imp)


def test_grants_are_picked_by_schema_or_like_pattern():
    grants = ["GRANT USAGE ON *.* TO `app`@`%` IDENTIFIED BY PASSWORD '*AB'",
              "GRANT ALL PRIVILEGES ON `shard\\_%`.* TO `app`@`%`",
              "GRANT SELECT ON `reports`.* TO `app`@`%`",
              "GRANT SELECT, INSERT ON `shard_3`.* TO `app`@`%`",
              "GRANT SELECT ON `shard_1`.`t` TO `app`@`%`"]
    # Every level counts: the schema pattern and the table grant on shard_1.
    assert grants_for_shards(grants, ["shard_1"]) == [grants[1], grants[4]]
    assert grants_for_shards(grants, ["shard_3"]) == [grants[1], grants[3]]
    # an escaped underscore is literal: shardX1 is not matched by shard\_%
    assert grants_for_shards(grants, ["shardX1"]) == []


def test_grant_lines_are_read_at_every_level():
    from dbmigrate.db.grants import lines_for, parse

    lines = ["GRANT USAGE ON *.* TO `ops`@`%`",
             "GRANT SELECT, INSERT ON *.* TO `ops`@`%`",
             "GRANT SELECT (`id`, `name`), UPDATE (`name`) ON `shard_1`.`certs` TO `ops`@`%`",
             "GRANT EXECUTE ON PROCEDURE `shard_1`.`renew` TO `ops`@`%`",
             "GRANT SELECT ON `shard_2`.`certs` TO `ops`@`%`",
             "GRANT `reader` TO `ops`@`%`"]
    assert [(g.level, g.schema, g.obj) for g in map(parse, lines[:5])] == [
        ("global", None, None), ("global", None, None), ("column", "shard_1", "certs"),
        ("routine", "shard_1", "renew"), ("table", "shard_2", "certs")]
    assert parse(lines[5]) is None  # a role granted: not a privilege line
    assert [g.text for g in lines_for(lines, ["shard_1"])] == [lines[2], lines[3]]
    # Global lines only when asked, and never the bare USAGE line.
    assert [g.text for g in lines_for(lines, ["shard_1"], include_global=True)] == [lines[1], lines[2], lines[3]]
    assert parse(lines[2]).writes and not parse(lines[4]).writes and parse(lines[1]).writes


def test_sandbox_gets_only_the_settings_it_lacks():
    cfg = {"port": "3306", "datadir": "/d", "innodb_buffer_pool_size": "128M", "gtid_strict_mode": "0",
           "old_a.replicate_wild_do_table": "s1.%"}
    assert sandbox_extra(cfg) == {"gtid_strict_mode": "0", "old_a.replicate_wild_do_table": "s1.%"}


def test_named_connection_sql_for_both_flavors():
    assert MARIADB.named_source_sql("old_a", "10.0.0.1", 3306, "repl", "pw", "mysql-bin.000002", 77) == (
        "CHANGE MASTER 'old_a' TO MASTER_HOST='10.0.0.1', MASTER_PORT=3306, MASTER_USER='repl', "
        "MASTER_PASSWORD='pw', MASTER_USE_GTID=no, MASTER_LOG_FILE='mysql-bin.000002', MASTER_LOG_POS=77, "
        "MASTER_CONNECT_RETRY=1")
    assert MARIADB.named_filter_sql("old_a", ["s1.%", "s2.%"]) == \
        "SET GLOBAL `old_a`.replicate_wild_do_table='s1.%,s2.%'"
    assert MARIADB.wait_for_position_sql("old_a") == "SELECT MASTER_POS_WAIT(%s, %s, %s, 'old_a') AS r"
    assert MARIADB.reset_named_all_sql("old_a") == "RESET SLAVE 'old_a' ALL"
    assert MYSQL.named_source_sql("old_a", "h", 1, "r", None, "f", 4).endswith("FOR CHANNEL 'old_a'")
    assert "SOURCE_AUTO_POSITION=0" in MYSQL.named_source_sql("old_a", "h", 1, "r", None, "f", 4)
    assert MYSQL.named_filter_sql("old_a", ["s1.%"]) == \
        "CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=('s1.%') FOR CHANNEL 'old_a'"
    with pytest.raises(ValueError):
        MARIADB.start_named_sql("old-a'; DROP")


def test_shipped_consolidate_playbook_plans_a_seed_fleet_and_a_cutover_fleet_over_its_old_servers():
    from pathlib import Path

    from dbmigrate.app.runs import plan_playbook

    root = Path(__file__).resolve().parents[2]
    proc = plan_playbook(root / "playbooks" / "consolidate-shards.yaml")
    assert [p.name for p in proc.phases] == ["preflight", "provision", "seed", "cutover", "verify"]
    assert [s.name for s in proc.phase("seed").steps] == ["seed 2 instance(s) from 2 old server(s)"]
    assert [s.name for s in proc.phase("cutover").steps] == ["cut over 2 old server(s)"]
    assert [(g.name, g.kind) for g in proc.phase("cutover").gates] == [("caught-up", "auto"), ("go-ahead", "manual")]
    assert all(s.undo is not None for s in proc.phase("seed").steps + proc.phase("cutover").steps)
    assert not proc.rollback_on_failure  # a failed cutover puts back its own old server only


def test_grant_lines_compare_whatever_order_a_server_lists_columns_in():
    from dbmigrate.db.grants import canonical

    a = "GRANT SELECT (`label`, `id`), UPDATE (`label`) ON `s`.`docs` TO `ro`@`%`"
    b = "GRANT UPDATE (`label`), SELECT (`id`, `label`) ON `s`.`docs` TO `ro`@`%`"
    assert canonical(a) == canonical(b)
    assert canonical(a) != canonical("GRANT SELECT (`id`), UPDATE (`label`) ON `s`.`docs` TO `ro`@`%`")
