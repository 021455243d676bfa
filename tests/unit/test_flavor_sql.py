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
