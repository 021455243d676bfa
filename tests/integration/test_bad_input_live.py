"""Bad input to commands that would change a real server: one line, exit 2, and the
server's settings exactly as they were."""

from __future__ import annotations

import pytest

from dbmigrate.db.inspector import Inspector

pytestmark = pytest.mark.integration


def slow_log_settings(inv, name):
    with inv.open(name) as s:
        return Inspector(s).slow_log_settings()


@pytest.mark.parametrize("extra", [["--seconds", "nan"], ["--seconds", "1e9"],
                                   ["--server-log-file", "EXISTING"], ["--server-log-file", "relative.log"]])
def test_capture_refuses_and_leaves_the_slow_log_alone(demo, demo_inventory, cli, tmp_path, extra):
    name = f"{demo.name}-1"
    existing = tmp_path / "app-slow.log"
    existing.write_text("# an operator's own slow log\n")
    extra = [str(existing) if x == "EXISTING" else x for x in extra]
    before = slow_log_settings(demo_inventory, name)
    r = cli("digest", "capture", "-i", str(demo.inventory_file), "-s", name, "--seconds", "1", *extra)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    assert slow_log_settings(demo_inventory, name) == before
    assert existing.read_text() == "# an operator's own slow log\n"


def _variant(demo, name: str, *, admin_password: str | None = None, port_of: tuple[str, int] | None = None):
    """A copy of the shared sandbox's inventory with one thing wrong."""
    import yaml

    doc = yaml.safe_load(demo.inventory_file.read_text())
    if admin_password is not None:
        group, out = None, []
        for line in (demo.path / "credentials.cnf").read_text().splitlines():
            group = line.strip()[1:-1] if line.strip().startswith("[") else group
            out.append(f'password="{admin_password}"' if group == "client-admin" and line.startswith("password")
                       else line)
        cnf = demo.path / f"{name}.cnf"
        cnf.write_text("\n".join(out) + "\n")
        cnf.chmod(0o600)
        doc["defaults"]["credentials"]["defaults_file"] = cnf.name
    if port_of is not None:
        doc["clusters"][demo.name]["servers"][port_of[0]]["port"] = port_of[1]
    path = demo.path / f"{name}-inventory.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_wrong_admin_password_in_run_says_so_and_names_the_credentials(demo, cli, tmp_path):
    import yaml

    inv = _variant(demo, "bad-admin", admin_password="not-the-password")
    pb = tmp_path / "promote.yaml"
    pb.write_text(yaml.safe_dump({"procedure": "promote", "inventory": str(inv), "cluster": demo.name,
                                  "params": {"candidate": f"{demo.name}-2"}}))
    r = cli("run", str(pb), "--yes")
    assert r.returncode == 5, r.stdout + r.stderr  # nothing changed: refused, like any refusal before a change
    err = " ".join(r.stderr.split())
    assert "the tool could not log in" in err and "access denied" in err, err
    assert "refused before any change" in err and "error: run 20" in err, err  # the run id, its status
    assert "hint: check the password in" in err and "client-admin" in err, err
    assert "no writable primary found in the cluster" not in err

    r = cli("check", "-i", str(inv), "-c", demo.name, "--candidate", f"{demo.name}-2")
    err = " ".join(r.stderr.split())
    assert r.returncode != 0 and "refused the tool's login" in err and "access denied" in err, err
    assert "answered" not in err.replace("refused the tool's login", ""), err


def test_check_with_a_wrong_primary_port_says_where_the_replicas_replicate_from(demo, cli):
    primary = demo.instances[f"{demo.name}-1"].port
    inv = _variant(demo, "bad-port", port_of=(f"{demo.name}-1", 1))
    r = cli("check", "-i", str(inv), "-c", demo.name, "--candidate", f"{demo.name}-2")
    assert r.returncode == 1, r.stdout + r.stderr
    err = " ".join(r.stderr.split())
    assert (f"inventory_matches: the replicas replicate from 127.0.0.1:{primary}, which cluster {demo.name} in the "
            f"inventory does not list (it lists {demo.name}-1 at 127.0.0.1:1") in err, err
    assert "unknown server" not in err


def test_inventory_check_names_the_privileges_an_account_lacks(demo, demo_inventory, cli):
    """An admin account without READ_ONLY ADMIN, SUPER, ...: inventory check says which, per server."""
    import json

    with demo_inventory.open(f"{demo.name}-1") as p:
        p.execute("CREATE USER IF NOT EXISTS dbm_limited@'%' IDENTIFIED BY 'limited-pw'")
        p.execute("GRANT SELECT, PROCESS, SLAVE MONITOR, BINLOG MONITOR, REPLICATION MASTER ADMIN, REPLICATION SLAVE ADMIN ON *.* TO dbm_limited@'%'")
    try:
        cnf = demo.path / "limited.cnf"
        cnf.write_text('[client-admin]\nuser="dbm_limited"\npassword="limited-pw"\n'
                       + (demo.path / "credentials.cnf").read_text().split("[client-admin]")[0]
                       + "[client-repl]" + (demo.path / "credentials.cnf").read_text().split("[client-repl]")[1])
        cnf.chmod(0o600)
        import yaml

        doc = yaml.safe_load(demo.inventory_file.read_text())
        doc["defaults"]["credentials"]["defaults_file"] = cnf.name
        inv = demo.path / "limited-inventory.yaml"
        inv.write_text(yaml.safe_dump(doc, sort_keys=False))
        import time

        deadline = time.monotonic() + 20  # the account replicates to the replicas
        while True:
            r = cli("inventory", "check", str(inv), "--json")
            servers = json.loads(r.stdout.splitlines()[0])["result"]["servers"]
            if all(not s.get("error") for s in servers) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for s in servers:
            assert not s.get("error"), s
            missing = s["missing_privileges"]
            assert {"READ_ONLY ADMIN", "SUPER", "CREATE", "EVENT"} <= set(missing["admin"]), s
            assert not {"SELECT", "PROCESS", "SLAVE MONITOR", "REPLICATION SLAVE ADMIN"} & set(missing["admin"]), s
            assert missing["replication"] == [], s
        human = cli("inventory", "check", str(inv))
        said = " ".join(human.stdout.split())
        assert f"privileges: {demo.name}-1: admin account lacks READ_ONLY ADMIN, SUPER" in said, said
    finally:
        with demo_inventory.open(f"{demo.name}-1") as p:
            p.execute("DROP USER IF EXISTS dbm_limited@'%'")
