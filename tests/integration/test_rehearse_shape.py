"""`dbmigrate rehearse promote --shape` on the fixture capture that carries every hazard (range
partitions, MEDIUMBLOB, ascii and latin1 columns, table and column grants for two accounts, a
table without a primary key, a foreign key, an index hint, the application's own long_query_time):
the schema, generated rows, accounts and grants reach every server, the classes are replayed by a
pooled client through the cutover, and the per-class table is printed with 0 lost."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials, parse_option_file

pytestmark = pytest.mark.integration

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "shapes" / "ca-capture"
NAME = "shaped"


def test_rehearse_promote_with_a_captured_shape(boxes, cli):
    try:
        r = cli("rehearse", "promote", "--shape", str(CAPTURE), "--scale", "0.05", "--no-guard",
                "--load-seconds", "2", "--name", NAME, "--keep", timeout=400)
        out = r.stdout
        assert r.returncode == 0, r.stderr[-2000:] + out[-3000:]
        assert re.search(r"acknowledged writes: [1-9]\d*, lost: 0; run \S+ done", out), out[-2000:]
        assert "captured query classes, replayed" in out
        rows = [line for line in out.splitlines() if line.startswith("│") and ("ca_app" in line or "ca_ocsp" in line)]
        assert len(rows) == 7, out[-4000:]  # the two connection set-up classes are the pool's own
        assert any("use index (ix_status_created)" in line for line in rows)
        for line in rows:
            count = re.search(r"│\s*(\d+) -> (\d+)\s*│", line)
            assert count and int(count.group(1)) > 0 and int(count.group(2)) > 0, line  # ran before and after
            assert re.search(r"│ 0 -> 0\s*│", line), line  # no class failed before or after
        assert "long_query_time=11.2" in out and "STRICT_ALL_TABLES" in out  # the pool's own settings
        state = boxes.find(NAME)
        option_file = state.path / "shape-accounts.cnf"
        assert stat.S_IMODE(option_file.stat().st_mode) == 0o600
        accounts = parse_option_file(option_file)
        passwords = [g["password"] for g in accounts.values()]
        assert {g["user"] for g in accounts.values()} == {"ca_app", "ca_ocsp", "ca_audit"}
        assert "1 role(s) with 2 role grant(s), 1 PROXY grant(s)" in out, out[-4000:]
        assert not any(p in out or p in r.stderr for p in passwords)  # never printed
        inv = load_inventory(state.inventory_file)
        with inv.open(f"{NAME}-new") as new, inv.open(f"{NAME}-1") as old:
            for srv in (new, old):  # the shape reached both sides through replication
                create = srv.query("SHOW CREATE TABLE ca.certificates")[0]["Create Table"]
                assert "PARTITION BY RANGE" in create and "mediumblob" in create and "latin1" in create
                assert srv.scalar("SELECT COUNT(*) FROM ca.orders") >= 150
                grants = srv.query("SHOW GRANTS FOR 'ca_ocsp'@'%'")
                text = " ".join(str(next(iter(g.values()))) for g in grants)
                assert "SELECT (`id`, `status`)" in text or "SELECT (`status`, `id`)" in text
                # The role with its privilege, held by ca_audit by default, and ca_audit's PROXY grant.
                role = " ".join(str(next(iter(g.values()))) for g in srv.query("SHOW GRANTS FOR 'ca_reader'"))
                assert "GRANT SELECT ON `ca`.`accounts` TO `ca_reader`" in role, role
                assert srv.scalar("SELECT default_role FROM mysql.user WHERE User='ca_audit' AND Host='%'") == \
                    "ca_reader"
                assert srv.query("SELECT Proxied_user AS u, Proxied_host AS h FROM mysql.proxies_priv "
                                 "WHERE User='ca_audit'") == [{"u": "ca_ocsp", "h": "%"}]
            audit = next(g for g in accounts.values() if g["user"] == "ca_audit")
            spec = inv.cluster(NAME).servers[f"{NAME}-new"]
            with Server("audit", spec.host, spec.port, Credentials("ca_audit", audit["password"])) as as_audit:
                assert as_audit.scalar("SELECT CURRENT_ROLE() AS r") == "ca_reader"  # its sessions start with it
                assert as_audit.scalar("SELECT COUNT(*) AS n FROM ca.accounts") >= 1  # through the role
            orphans = new.scalar("SELECT COUNT(*) FROM ca.orders o LEFT JOIN ca.accounts a ON a.id = o.account_id "
                                 "WHERE a.id IS NULL")
            assert orphans == 0  # generated and replayed rows keep the foreign key
    finally:
        boxes.down(NAME)


def test_rehearse_schema_swap_with_a_captured_shape(boxes, cli):
    r = cli("rehearse", "schema-swap", "--shape", str(CAPTURE), "--scale", "0.02", "--rows", "500",
            "--name", "shapedswap", timeout=400)
    out = r.stdout
    assert r.returncode == 0, r.stderr[-2000:] + out[-3000:]
    assert re.search(r"acknowledged writes: [1-9]\d*, lost: 0; run \S+ done", out), out[-2000:]
    rows = [line for line in out.splitlines() if line.startswith("│") and ("ca_app" in line or "ca_ocsp" in line)]
    assert len(rows) == 7 and all(re.search(r"│\s*[1-9]\d* -> [1-9]\d*\s*│", line) for line in rows), out[-4000:]
    assert all(re.search(r"│ 0 -> 0\s*│", line) for line in rows), out[-4000:]
    assert "shapedswap" not in [s.name for s in boxes.list()]  # torn down
