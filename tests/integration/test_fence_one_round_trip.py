"""Inside the fenced window each round trip is write downtime: the fence sends read_only=ON
and the read of the final position as one request, on a real server."""

from __future__ import annotations

import pytest

from dbmigrate.db import connection
from dbmigrate.db.applier import Applier
from dbmigrate.db.connection import QueryError
from dbmigrate.db.inspector import Inspector

pytestmark = pytest.mark.integration


@pytest.fixture
def sent():
    seen: list[str] = []
    listener = lambda server, sql, ms: seen.append(sql)  # noqa: E731
    connection.add_statement_listener(listener)
    yield seen
    connection.remove_statement_listener(listener)


def test_fence_and_final_position_in_one_request(demo_inventory, sent):
    with demo_inventory.open("shared-1") as primary:
        insp = Inspector(primary)
        assert not insp.read_only()
        primary.execute("CREATE TABLE IF NOT EXISTS app.fence_rt (id INT PRIMARY KEY)")
        primary.execute("REPLACE INTO app.fence_rt VALUES (1)")
        try:
            sent.clear()
            pos = Applier(primary).fence_and_read_binlog_pos(lock_wait_timeout=5)
            assert len(sent) == 1, sent  # one request ...
            assert "read_only=ON" in sent[0] and "gtid_binlog_pos" in sent[0]  # ... carrying both
            assert insp.read_only()
            assert pos and pos == insp.gtid_binlog_pos()  # the final position, nothing after it
        finally:
            primary.execute("SET GLOBAL read_only=OFF")
            primary.execute("DROP TABLE IF EXISTS app.fence_rt")
        assert not insp.read_only()


def test_a_failing_statement_stops_the_request_and_the_session_stays_usable(demo_inventory, sent):
    with demo_inventory.open("shared-2") as replica:
        with pytest.raises(QueryError) as failed:
            replica.query_after(["SET GLOBAL no_such_variable_here=1"], "SELECT 1 AS x")
        assert failed.value.errno == 1193  # unknown system variable: the read never ran
        assert replica.scalar("SELECT 2 AS y") == 2
        rows = replica.query_after(["SET @dbm_probe=41", "SET @dbm_probe=@dbm_probe+1"], "SELECT @dbm_probe AS v")
        assert rows == [{"v": 42}]
