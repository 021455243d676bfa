"""`dbmigrate shape capture` on a fixture schema with every hazard a migration meets."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.db.credentials import private_defaults_file

from tests import jsonlines

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "shapes" / "ca.sql"


def test_shape_capture_keeps_every_hazard_and_no_secret(boxes, cli, tmp_path):
    state = boxes.up("shape", 0)
    try:
        inv = load_inventory(state.inventory_file)
        name = next(iter(inv.cluster("shape").servers))
        spec = inv.cluster("shape").servers[name]
        with private_defaults_file(inv.credentials_for(spec), spec.host, spec.port) as cnf:
            p = subprocess.run(["mariadb", f"--defaults-file={cnf}"], stdin=FIXTURE.open("rb"),
                               capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        out = tmp_path / "shape"
        r = cli("shape", "capture", "-i", str(state.inventory_file), "-c", "shape", "-o", str(out),
                "--schema", "ca", "--json")
        assert r.returncode == 0, r.stderr + r.stdout
        assert jsonlines.result(r.stdout)["tables_and_views"] == 5
        shape = json.loads((out / "shape.json").read_text())
        tables = {t["name"]: t for t in shape["schemas"]["ca"]["tables"]}
        certs = tables["certificates"]
        assert certs["partitioned"] and "PARTITION BY RANGE" in certs["create"]
        assert "mediumblob" in certs["create"] and "CHARACTER SET ascii" in certs["create"]
        assert "CHARACTER SET latin1" in certs["create"]
        assert certs["columns"]["der"]["max_len"] == 40 * 1024 and "min" not in certs["columns"]["serial"]
        assert not tables["audit_log"]["has_primary_key"] and tables["orders"]["foreign_keys"] == 1
        assert tables["pending"]["type"] == "view" and "USE INDEX (`ix_status_created`)" in tables["pending"]["create"]
        sc = shape["schemas"]["ca"]
        assert [r["name"] for r in sc["routines"]] == ["expire_orders"]
        assert [t["name"] for t in sc["triggers"]] == ["orders_audit"]
        assert [e["name"] for e in sc["events"]] == ["nightly_expire"]
        grants = {a["user"]: a["grants"] for a in shape["accounts"]}
        assert any("SELECT (`id`, `status`)" in g or "SELECT (`status`, `id`)" in g for g in grants["ca_ocsp"])
        assert any("EXECUTE ON PROCEDURE `ca`.`expire_orders`" in g for g in grants["ca_ocsp"])
        text = (out / "shape.json").read_text() + (out / "schema.sql").read_text()
        assert "ca-app-secret" not in text and not re.search(r"\*[0-9A-F]{40}", text)  # no password, no hash
        assert all("<redacted>" in g[0] or "IDENTIFIED" not in g[0] for g in grants.values())
        assert "Ærø" not in text and "postmaster@aero.example" not in text  # no row of data
        assert "sessions" in shape
    finally:
        boxes.down("shape")
