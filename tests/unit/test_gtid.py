from dbmigrate.db import gtid
from dbmigrate.db.flavor import MARIADB, MYSQL


def test_mariadb_behind_per_domain():
    assert gtid.mariadb_behind("0-1-100,1-2-50", "0-1-90,1-2-50") == {0: 10, 1: 0}
    assert gtid.mariadb_behind("0-1-100", "") == {0: 100}
    assert gtid.mariadb_behind("0-1-5", "0-1-9") == {0: 0}  # never negative


def test_mariadb_errant_names_the_gtid():
    primary_state = "0-1-100,0-2-40"
    assert gtid.mariadb_errant("0-1-100,0-3-101", primary_state) == [gtid.MariaGtid(0, 3, 101)]
    assert [str(g) for g in gtid.mariadb_errant("0-1-100,0-2-41", primary_state)] == ["0-2-41"]
    assert gtid.mariadb_errant("0-1-99,0-2-40", primary_state) == []
    assert [str(g) for g in gtid.mariadb_errant("7-3-1", primary_state)] == ["7-3-1"]


def test_mariadb_includes():
    assert gtid.mariadb_includes("0-1-10,1-1-5", "0-1-10")
    assert not gtid.mariadb_includes("0-1-9", "0-1-10")
    assert gtid.mariadb_includes("0-1-10", "")


def test_bad_gtid_rejected():
    import pytest

    with pytest.raises(ValueError):
        gtid.parse_mariadb("0-1")


def test_mysql_sets():
    a = gtid.parse_mysql_set("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-100:102, 4e11fa47-71ca-11e1-9e33-c80aa9429562:1-3")
    b = gtid.parse_mysql_set("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-50")
    diff = gtid.mysql_subtract(a, b)
    assert gtid.mysql_count(diff) == 50 + 1 + 3
    assert gtid.mysql_format(diff).startswith("3e11fa47-71ca-11e1-9e33-c80aa9429562:51-100:102")


def test_flavor_errant_and_behind():
    assert MARIADB.errant("0-1-10,0-3-11", "0-1-10") == ["0-3-11"]
    assert MARIADB.behind("0-1-10", "0-1-7") == {"0": 3}
    assert MYSQL.errant("u:1-5", "u:1-4") == ["u:5"]
    assert MYSQL.behind("u:1-10", "u:1-4") == {"u": 6}
    assert MYSQL.includes("u:1-10", "u:1-9") and not MYSQL.includes("u:1-8", "u:1-9")


def test_mysql_tagged_gtids():
    s = gtid.parse_mysql_set("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:ops:1-3")
    assert s == {"3e11fa47-71ca-11e1-9e33-c80aa9429562": [(1, 5)],
                 "3e11fa47-71ca-11e1-9e33-c80aa9429562:ops": [(1, 3)]}
    assert MYSQL.behind("u:1-5:ops:1-3", "u:1-5:ops:1") == {"u:ops": 2}
    assert MYSQL.includes("u:1-5:ops:1-3", "u:1-5")
