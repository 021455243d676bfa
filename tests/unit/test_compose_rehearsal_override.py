"""The compose rehearsal's override: the servers' Docker healthchecks off (each check is a
`runc exec` every second, CPU taken from the fenced window), and the rehearsal's own start-up
wait in their place: a server is up once it sends its first MySQL packet."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import jsonschema
import yaml

from dbmigrate.rehearsal.compose.topology import SERVICES, server_answers, write_rehearsal_override

ROOT = Path(__file__).resolve().parents[2]


def test_the_override_turns_off_exactly_the_servers_healthchecks_and_is_valid_compose(tmp_path):
    f = write_rehearsal_override(tmp_path, ("db1", "db4"))
    doc = yaml.safe_load(f.read_text())
    assert doc == {"services": {"db1": {"healthcheck": {"interval": "24h"}}, "db4": {"healthcheck": {"interval": "24h"}}}}
    schema = json.loads((ROOT / "tests/fixtures/compose/compose_spec.json").read_text())
    assert list(jsonschema.Draft201909Validator(schema).iter_errors(doc)) == []
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert set(SERVICES) <= set(base) and all("healthcheck" in base[s] for s in SERVICES)  # what it overrides


def _serve(first: bytes) -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.sendall(first)

    threading.Thread(target=answer, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_a_server_answers_with_a_handshake_or_an_error_packet_and_not_with_nothing():
    for first, expected in ((b"\x4a\x00\x00\x00\x0a10.11", True), (b"\x17\x00\x00\x00\xff\x69\x04Host", True),
                            (b"", False), (b"HTTP/1.1 400", False)):
        srv, port = _serve(first)
        with srv:
            assert server_answers("127.0.0.1", port, timeout=2) is expected, first
    with socket.socket() as s:  # nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert server_answers("127.0.0.1", port, timeout=1) is False


def test_two_addresses_answering_as_one_server_are_both_waited_for_again():
    from dbmigrate.rehearsal.compose.topology import _answering_as_another

    assert _answering_as_another({"db1": 1, "db2": 1, "db3": 3}) == ["db1", "db2"]
    assert _answering_as_another({"db1": 1, "db2": 2, "db3": 0, "db4": 0}) == []
