"""The SQL each flavor sends. MySQL 8 is checked against its manual's syntax here only."""

from dbmigrate.db.flavor import MARIADB, MYSQL, detect


def test_detect():
    assert detect("10.11.19-MariaDB-0+deb12u1-log") is MARIADB
    assert detect("8.0.36") is MYSQL
    assert detect("8.4.2-commercial") is MYSQL


def test_change_source():
    m = MARIADB.change_source_sql("10.0.0.1", 3306, "repl", "p'w")
    assert m.startswith("CHANGE MASTER TO MASTER_HOST='10.0.0.1', MASTER_PORT=3306")
    assert "MASTER_USE_GTID=slave_pos" in m and "MASTER_PASSWORD='p\\'w'" in m
    y = MYSQL.change_source_sql("10.0.0.1", 3306, "repl", "pw")
    assert y.startswith("CHANGE REPLICATION SOURCE TO SOURCE_HOST='10.0.0.1'")
    assert "SOURCE_AUTO_POSITION=1" in y


def test_read_only_statements():
    assert MARIADB.set_read_only_sql(True) == ["SET GLOBAL read_only=ON"]
    assert MYSQL.set_read_only_sql(True) == ["SET GLOBAL super_read_only=ON"]
    assert MYSQL.set_read_only_sql(False) == ["SET GLOBAL super_read_only=OFF", "SET GLOBAL read_only=OFF"]


def test_wait_and_replica_status():
    assert "MASTER_GTID_WAIT" in MARIADB.wait_for_gtid_sql()
    assert "WAIT_FOR_EXECUTED_GTID_SET" in MYSQL.wait_for_gtid_sql()
    assert MARIADB.wait_for_gtid_reached(0) and not MARIADB.wait_for_gtid_reached(-1)
    assert MYSQL.wait_for_gtid_reached(0) and not MYSQL.wait_for_gtid_reached(1)
    st = MYSQL.parse_replica_status({"Source_Host": "h", "Source_Port": 3306, "Replica_IO_Running": "Yes",
                                     "Replica_SQL_Running": "Yes", "Seconds_Behind_Source": 3, "Auto_Position": 1})
    assert st.running and st.seconds_behind == 3 and st.source_port == 3306
    st = MARIADB.parse_replica_status({"Master_Host": "h", "Master_Port": "3307", "Slave_IO_Running": "Yes",
                                       "Slave_SQL_Running": "No", "Seconds_Behind_Master": None,
                                       "Last_SQL_Error": "boom"})
    assert not st.running and st.seconds_behind is None and st.last_error == "boom"
    assert MARIADB.reset_replica_all_sql() == "RESET SLAVE ALL" and MYSQL.reset_replica_all_sql() == "RESET REPLICA ALL"


def test_fence_is_bounded_by_lock_wait_timeout():
    # SET GLOBAL read_only=ON waits for the global read lock; unbounded, every write queues behind it.
    assert MARIADB.set_read_only_sql(True, 5) == ["SET STATEMENT lock_wait_timeout=5 FOR SET GLOBAL read_only=ON"]
    assert MYSQL.set_read_only_sql(True, 5) == ["SET SESSION lock_wait_timeout=5", "SET GLOBAL super_read_only=ON"]


# -- MySQL statement forms by server version (renamed during 8.0, old names gone in 8.4) --
from dbmigrate.db.flavor import MySQL, for_server  # noqa: E402


def test_for_server_keeps_mariadb_and_current_mysql():
    assert for_server("10.11.19-MariaDB-0+deb12u1-log") is MARIADB
    assert for_server("8.4.0") is MYSQL
    assert for_server("not a version") is MYSQL
    assert for_server("8.0.36") is for_server("8.0.36-log")  # one flavor per version
    assert for_server("8.0.36").name == "mysql"


def test_replica_words_from_8_0_22():
    old, new = for_server("8.0.21"), for_server("8.0.22")
    assert (old.replica_status_sql(), new.replica_status_sql()) == ("SHOW SLAVE STATUS", "SHOW REPLICA STATUS")
    assert (old.replica_hosts_sql(), new.replica_hosts_sql()) == ("SHOW SLAVE HOSTS", "SHOW REPLICAS")
    assert [old.start_replica_sql(), old.stop_replica_sql(), old.reset_replica_all_sql()] == \
        ["START SLAVE", "STOP SLAVE", "RESET SLAVE ALL"]
    assert [new.start_replica_sql(), new.stop_replica_sql(), new.reset_replica_all_sql()] == \
        ["START REPLICA", "STOP REPLICA", "RESET REPLICA ALL"]
    assert old.named_status_sql("s1") == "SHOW SLAVE STATUS FOR CHANNEL 's1'"
    assert new.start_named_sql("s1") == "START REPLICA FOR CHANNEL 's1'"
    assert old.reset_named_all_sql("s1") == "RESET SLAVE ALL FOR CHANNEL 's1'"
    assert old.all_connections_sql() == "SHOW SLAVE STATUS"


def test_change_replication_source_from_8_0_23():
    old = for_server("8.0.22").change_source_sql("h", 3306, "repl", "pw", ssl=True)
    assert old == ("CHANGE MASTER TO MASTER_HOST='h', MASTER_PORT=3306, MASTER_USER='repl', MASTER_PASSWORD='pw', "
                   "MASTER_AUTO_POSITION=1, MASTER_CONNECT_RETRY=1, GET_MASTER_PUBLIC_KEY=1, MASTER_SSL=1")
    new = for_server("8.0.23").change_source_sql("h", 3306, "repl", "pw", ssl=True)
    assert new == ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h', SOURCE_PORT=3306, SOURCE_USER='repl', "
                   "SOURCE_PASSWORD='pw', SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1, GET_SOURCE_PUBLIC_KEY=1, "
                   "SOURCE_SSL=1")
    named = for_server("8.0.22").named_source_sql("s1", "h", 3306, "repl", None, "bin.000002", 4)
    assert named == ("CHANGE MASTER TO MASTER_HOST='h', MASTER_PORT=3306, MASTER_USER='repl', MASTER_AUTO_POSITION=0, "
                     "MASTER_LOG_FILE='bin.000002', MASTER_LOG_POS=4, MASTER_CONNECT_RETRY=1, "
                     "GET_MASTER_PUBLIC_KEY=1 FOR CHANNEL 's1'")
    assert for_server("8.4.3").named_source_sql("s1", "h", 3306, "repl", None, "b.1", 4).startswith(
        "CHANGE REPLICATION SOURCE TO SOURCE_HOST='h'")


def test_source_pos_wait_from_8_0_26():
    assert "MASTER_POS_WAIT(" in for_server("8.0.25").wait_for_position_sql("s1")
    assert for_server("8.0.26").wait_for_position_sql("s1") == "SELECT SOURCE_POS_WAIT(%s, %s, %s, 's1') AS r"


def test_binary_log_status_from_8_2():
    # SHOW BINARY LOG STATUS arrived in 8.2.0; SHOW MASTER STATUS is gone in 8.4.
    assert for_server("8.0.40").binlog_coordinates_sql() == "SHOW MASTER STATUS"
    assert for_server("8.1.0").binlog_coordinates_sql() == "SHOW MASTER STATUS"
    assert for_server("8.2.0").binlog_coordinates_sql() == "SHOW BINARY LOG STATUS"
    assert for_server("8.4.2-commercial").binlog_coordinates_sql() == "SHOW BINARY LOG STATUS"
    assert MARIADB.binlog_coordinates_sql() == "SHOW MASTER STATUS"


def test_same_forms_across_8_0_and_8_4():
    for v in ("8.0.11", "8.0.36", "8.4.0"):
        f = for_server(v)
        assert f.wait_for_gtid_sql() == "SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s) AS r"
        assert f.set_read_only_sql(True) == ["SET GLOBAL super_read_only=ON"]
        assert "performance_schema.global_status" in f.global_status_sql(1)
        assert f.named_filter_sql("s1", ["a.%"]).startswith("CHANGE REPLICATION FILTER")


def test_replica_status_before_8_0_22_uses_master_slave_columns():
    row = {"Master_Host": "h", "Master_Port": 3306, "Slave_IO_Running": "Yes", "Slave_SQL_Running": "Yes",
           "Seconds_Behind_Master": 4, "Auto_Position": 1, "Channel_Name": "", "Retrieved_Gtid_Set": "u:1-5",
           "Executed_Gtid_Set": "u:1-4", "Replicate_Do_DB": "app"}
    st = for_server("8.0.21").parse_replica_status(row)
    assert st.running and (st.source_host, st.source_port, st.seconds_behind) == ("h", 3306, 4)
    assert st.using_gtid == "Auto_Position" and st.executed_gtid == "u:1-4"
    assert st.filters == {"Replicate_Do_DB": "app"}


def test_facts_that_exist_in_one_flavor():
    assert MARIADB.strict_gtid_variables() == ("gtid_strict_mode",) and MYSQL.strict_gtid_variables() == ()
    assert not MARIADB.gtid_mode_required() and MYSQL.gtid_mode_required()
    assert MARIADB.gtid_binlog_pos_sql() == "SELECT @@GLOBAL.gtid_binlog_pos AS pos"
    assert MYSQL.gtid_binlog_pos_sql() == "SELECT @@GLOBAL.gtid_executed AS pos"
    assert MARIADB.written_by("0-7-12", 7) and not MARIADB.written_by("0-17-12", 7)
    assert not MYSQL.written_by("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", 7)


def test_mysql_flavor_names_its_version():
    assert repr(MySQL((8, 0, 22))) == "MySQL(8.0.22)"


def test_replication_account_grants_use_each_flavors_privilege_names():
    assert MARIADB.replication_grants() == "REPLICATION SLAVE, SLAVE MONITOR, BINLOG MONITOR ON *.*"
    assert MYSQL.replication_grants() == "REPLICATION SLAVE, REPLICATION CLIENT ON *.*"


def test_the_fence_is_one_request_of_the_flavors_statements_then_the_position_read():
    from types import SimpleNamespace

    from dbmigrate.db.applier import Applier
    from dbmigrate.db.ledger import SafetyLedger

    for flavor, statements, read, pos in (
            (MARIADB, ["SET STATEMENT lock_wait_timeout=5 FOR SET GLOBAL read_only=ON"],
             "SELECT @@GLOBAL.gtid_binlog_pos AS pos", "0-1-9"),
            (MYSQL, ["SET SESSION lock_wait_timeout=5", "SET GLOBAL super_read_only=ON"],
             MYSQL.gtid_executed_sql(), "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-9")):
        requests = []
        server = SimpleNamespace(name="db1", flavor=flavor, ledger=SafetyLedger(),
                                 scalar_after=lambda sts, sql, p=pos: requests.append((sts, sql)) or p)
        assert Applier(server).fence_and_read_binlog_pos(lock_wait_timeout=5) == pos  # type: ignore[arg-type]
        assert requests == [(statements, read)]  # one request: the fence's statements, then the read

        planned = []
        dry = Applier(server, dry_run=True, on_planned=lambda name, sql: planned.append(sql))  # type: ignore[arg-type]
        assert dry.fence_and_read_binlog_pos(lock_wait_timeout=5) is None and planned == statements


def test_missing_privileges_of_the_tools_accounts_per_flavor():
    from dbmigrate.db.flavor import MARIADB, MYSQL

    assert MARIADB.missing_privileges("admin", {"ALL PRIVILEGES"}) == []
    everything = {name for name, _, _ in MARIADB.tool_privileges("admin")}
    assert MARIADB.missing_privileges("admin", everything) == []
    # SUPER still covers what it is listed beside on 10.11, never READ_ONLY ADMIN
    lacking = MARIADB.missing_privileges("admin", everything - {"CONNECTION ADMIN", "BINLOG ADMIN", "READ_ONLY ADMIN"})
    assert lacking == ["READ_ONLY ADMIN"]
    assert "SUPER" in MARIADB.missing_privileges("admin", {"SELECT", "PROCESS"})
    assert MARIADB.missing_privileges("admin", (everything - {"READ_ONLY ADMIN"}) | {"READ ONLY ADMIN"}) == []
    assert MARIADB.missing_privileges("replication", {"REPLICATION SLAVE"}) == []
    assert MARIADB.missing_privileges("replication", {"SLAVE MONITOR"}) == ["REPLICATION SLAVE"]
    assert MYSQL.missing_privileges("replication", {"REPLICATION REPLICA"}) == []
    assert "SYSTEM_VARIABLES_ADMIN" in MYSQL.missing_privileges("admin", {"SELECT"})
    assert "SYSTEM_VARIABLES_ADMIN" not in MYSQL.missing_privileges("admin", {"SUPER"})
    for flavor in (MARIADB, MYSQL):  # every privilege says what needs it
        assert all(why for _, _, why in flavor.tool_privileges("admin") + flavor.tool_privileges("replication"))


def test_renewing_the_io_thread_and_what_it_received():
    from dbmigrate.db.flavor import MariaDB, ReplicaStatus
    assert for_server("8.0.22").restart_io_thread_sql() == ["STOP REPLICA IO_THREAD", "START REPLICA IO_THREAD"]
    assert for_server("8.0.21").restart_io_thread_sql() == ["STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD"]
    assert MariaDB().restart_io_thread_sql() == ["STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD"]

    def status(retrieved: str, executed: str) -> ReplicaStatus:
        return ReplicaStatus("h", 1, "Yes", "Yes", 0, "", "", "Slave_Pos", retrieved_gtid=retrieved,
                             executed_gtid=executed)
    assert MariaDB().received(status("0-1-12", "0-1-10"), "0-1-12")
    assert not MariaDB().received(status("0-1-10", "0-1-10"), "0-1-12")
    u = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    mysql = for_server("8.0.36")
    # Retrieved_Gtid_Set holds only this connection's: what was executed before counts too.
    assert mysql.received(status(f"{u}:6-9", f"{u}:1-7"), f"{u}:1-9")
    assert not mysql.received(status(f"{u}:6-8", f"{u}:1-7"), f"{u}:1-9")
