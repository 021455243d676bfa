"""Secrets on real servers: passwords that need escaping reach pt-table-checksum
intact, a checksum that could not connect fails loudly instead of printing
"same", a signal never leaves a defaults file with a password behind, and the
sandbox's accounts are never binlogged in clear text."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.rehearsal.sandbox.accounts import read_option_file
from tests import jsonlines

pytestmark = pytest.mark.integration
NAME = "secrets"
ODD = 'q"uo\\te#x\nhost=evil.invalid'


@pytest.fixture(scope="module")
def box(boxes):
    state = boxes.up(NAME, 1)
    inv = load_inventory(state.inventory_file)
    with inv.open(f"{NAME}-1") as p:
        p.execute("CREATE TABLE app.t (id INT PRIMARY KEY)")
        p.execute("INSERT INTO app.t VALUES (1),(2),(3)")
        p.execute("CREATE USER 'odd'@'%' IDENTIFIED BY %s", (ODD,))
        p.execute("GRANT ALL PRIVILEGES ON *.* TO 'odd'@'%'")
        # our own session on each server is its one connection: pt-table-checksum's is refused
        p.execute("CREATE USER 'one'@'%' IDENTIFIED BY 'one-pass-4321' WITH MAX_USER_CONNECTIONS 1")
        p.execute("GRANT ALL PRIVILEGES ON *.* TO 'one'@'%'")
    yield state, inv
    boxes.down(NAME)


def _inventory_with(state, tmp_path: Path, credentials: str) -> Path:
    text = state.inventory_file.read_text()
    text = text.replace("  credentials:\n    defaults_file: credentials.cnf\n    group: client-admin\n",
                        f"  credentials: {credentials}\n", 1)
    text = text.replace("defaults_file: credentials.cnf", f"defaults_file: {state.credentials_file}")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(text)
    return inv


def test_password_with_quote_backslash_and_newline_reaches_pt_table_checksum(box, cli, tmp_path):
    state, _ = box
    inv = _inventory_with(state, tmp_path, "{user: odd, password_env: DBM_ODD_PW}")
    r = cli("checksum", "-i", str(inv), "-c", NAME, "-d", "app", env={"DBM_ODD_PW": ODD})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "same" in r.stdout and "evil" not in r.stdout + r.stderr


def test_checksum_that_cannot_log_in_fails_loudly(box, cli, tmp_path):
    state, _ = box
    # a first good run leaves rows in percona.checksums that a failed run must not read as "same"
    assert cli("checksum", "-i", str(state.inventory_file), "-c", NAME, "-d", "app").returncode == 0
    inv = _inventory_with(state, tmp_path, "{user: one, password_env: DBM_ONE_PW}")
    r = cli("checksum", "-i", str(inv), "-c", NAME, "-d", "app", env={"DBM_ONE_PW": "one-pass-4321"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not compared" in r.stdout and "same" not in r.stdout
    assert "pt-table-checksum failed" in r.stdout and "max_user_connections" in r.stdout
    assert "one-pass-4321" not in r.stdout + r.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_during_checksum_removes_the_defaults_file(box, tmp_path, signum):
    state, inv = box
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    with inv.open(f"{NAME}-1") as blocker:
        blocker.execute("LOCK TABLES app.t WRITE")  # pt-table-checksum waits on it: the file stays in use
        env = dict(os.environ, TMPDIR=str(private_tmp), COLUMNS="200")
        proc = subprocess.Popen([sys.executable, "-m", "dbmigrate", "checksum", "-i", str(state.inventory_file),
                                 "-c", NAME, "-d", "app"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not list(private_tmp.glob("dbmigrate-*.cnf")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(private_tmp.glob("dbmigrate-*.cnf")), "checksum never wrote its defaults file"
        time.sleep(0.5)  # pt-table-checksum is connected and waiting
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
        blocker.execute("UNLOCK TABLES")
    assert proc.returncode == 128 + signum, out + err
    assert list(private_tmp.glob("dbmigrate-*.cnf")) == []
    assert f"stopped by {signal.Signals(signum).name}" in err


def test_sandbox_accounts_are_not_binlogged_in_clear_text(box):
    state, inv = box
    passwords = [a.password for a in read_option_file(state.credentials_file).values()]
    with inv.open(f"{NAME}-1") as p:
        events = []
        for log in p.query("SHOW BINARY LOGS"):
            events += [e["Info"] for e in p.query(f"SHOW BINLOG EVENTS IN '{log['Log_name']}'")]
    creates = [e for e in events if "CREATE USER" in e]
    assert len(creates) >= 3 and all("IDENTIFIED BY PASSWORD '*" in e for e in creates if "dbm_" in e)
    assert not any(pw in e for pw in passwords for e in events)


def test_checksum_json_names_no_secret(box, cli):
    state, _ = box
    r = cli("checksum", "-i", str(state.inventory_file), "-c", NAME, "-d", "app", "--json")
    secret = read_option_file(state.credentials_file)["admin"].password
    assert r.returncode == 0 and secret not in r.stdout + r.stderr
    assert jsonlines.result(r.stdout)["ok"] is True
