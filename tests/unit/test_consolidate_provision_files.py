"""What `consolidate provision` generates and how it reads Ansible's answer: pure, no host."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from dbmigrate.config import HostSpec, PlanningSpec
from dbmigrate.db.provisioning import accounts_script, count_accounts_query, tool_accounts
from dbmigrate.exceptions import UsageError
from dbmigrate.hosts.ansible import failure_reason, parse_recap
from dbmigrate.procedures.consolidate import ansible_files as files
from dbmigrate.procedures.consolidate.plan import GB, ShardDemand, plan

FLAT = PlanningSpec(headroom_pct=0, growth_pct=0, reserved_memory_gb=0, instance_overhead_mb=0, min_buffer_pool_mb=8)


def two_instance_plan():
    shards = [ShardDemand("s1", "old-a", GB, GB // 4, 1.0), ShardDemand("s2", "old-b", GB, GB // 4, 1.0)]
    return plan(shards, {"db7": HostSpec(cores=4, memory_gb=8, disk_gb=50, max_instances=2, address="10.1.0.7")}, FLAT)


def test_inventory_holds_each_instance_option_group_and_the_start_mode():
    p = two_instance_plan()
    conn = {"db7": files.HostConnection("db7", {"ansible_connection": "ssh", "ansible_host": "10.1.0.7"}, "systemd")}
    doc = files.inventory(p, conn, files.ProvisionLayout(account_users=["dbm_admin", "dbm_repl"]), "plan.json")
    host = doc["all"]["hosts"]["db7"]
    assert host["dbmigrate_start"] == "systemd" and host["dbmigrate_become"] is True
    one = host["dbmigrate_instances"][0]
    assert (one["name"], one["port"], one["server_id"], one["socket"]) == ("db7-1", 3306, 100001, "/run/mysqld/db7-1.sock")
    cnf = one["cnf"].splitlines()
    assert cnf[1] == "[mariadbd.db7-1]"  # Debian's mariadb@db7-1 reads this group
    for line in ("port = 3306", "datadir = /var/lib/mysql-instances/db7-1", "socket = /run/mysqld/db7-1.sock",
                 "server_id = 100001", "log_bin = mysql-bin", "read_only = ON", "bind_address = 10.1.0.7",
                 "pid_file = /run/mysqld/db7-1.pid", "old_a.replicate_wild_do_table = s1.%"):
        assert line in cnf
    assert doc["all"]["vars"]["dbmigrate_account_count"] == 2
    # The dumped file reads back to the same data, option groups as literal blocks.
    text = files.inventory_text(doc)
    assert yaml.safe_load(text) == doc and "cnf: |" in text


def test_playbook_names_the_units_the_conf_files_and_logs_nothing_of_the_accounts():
    book = files.playbook_text(count_accounts_query(["dbm_admin", "dbm_repl"]))
    tasks = yaml.safe_load(book)[0]["tasks"]
    by_name = {t["name"]: t for t in tasks}
    assert by_name["start each instance (systemd unit mariadb@NAME)"]["ansible.builtin.systemd_service"]["name"] == \
        "mariadb@{{ item.name }}"
    conf = by_name["option group [mariadbd.NAME] of each instance"]["ansible.builtin.copy"]["dest"]
    assert conf == "{{ dbmigrate_conf_dir }}/60-dbmigrate-{{ item.name }}.cnf"  # never myNAME.cnf
    create = by_name["create the tool's accounts (not binlogged)"]
    assert create["no_log"] is True and create["ansible.builtin.command"]["stdin"] == "{{ dbmigrate_accounts_sql }}"
    direct = by_name["start each stopped instance with its option group (no systemd)"]
    assert "dbmigrate_start == 'direct'" in direct["when"] and "setsid mariadbd" in direct["ansible.builtin.shell"]
    count = by_name["count the tool's accounts on each instance"]
    assert "'dbm_admin', 'dbm_repl'" in count["vars"]["dbmigrate_count_query"]


def test_accounts_script_is_idempotent_unbinlogged_and_quotes_passwords():
    sql = accounts_script(tool_accounts("dbm_admin", "p'w\\x", "dbm_repl", "r"))
    lines = sql.splitlines()
    assert lines[0] == "SET SESSION sql_log_bin=0;"
    assert "CREATE USER IF NOT EXISTS 'dbm_admin'@'%' IDENTIFIED BY 'p\\'w\\\\x';" in lines
    assert "GRANT ALL PRIVILEGES ON *.* TO 'dbm_admin'@'%' WITH GRANT OPTION;" in lines
    assert any(ln.startswith("GRANT REPLICATION SLAVE") and "'dbm_repl'@'%'" in ln for ln in lines)


@pytest.mark.parametrize("name, datadir", [("db 7-1", "/x/db7-1"), ("db7-1", "relative/dir"),
                                           ("db7-1", "/x/$(reboot)")])
def test_names_and_paths_that_would_reach_a_shell_are_refused(name, datadir):
    inst = two_instance_plan().instances[0]
    inst.name, inst.datadir = name, datadir
    with pytest.raises(UsageError):
        files.instance_vars(inst, "plan.json")


def test_recap_and_failure_lines_are_read_back():
    out = textwrap.dedent("""\
        TASK [x] ****
        failed: [db7] (item=db7-1) => {"changed": false, "msg": "Destination directory /etc/x does not exist", "item": {}}
        PLAY RECAP *********************************************************************
        db7                        : ok=9    changed=0    unreachable=0    failed=1    skipped=2    rescued=0    ignored=0
        db8                        : ok=3    changed=2    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0
        """)
    recap = parse_recap(out)
    assert recap.hosts["db7"]["failed"] == 1 and recap.hosts["db8"]["changed"] == 2
    assert recap.total("unreachable") == 1
    line = out.splitlines()[1]
    assert failure_reason(line) == "[db7] (item=db7-1): Destination directory /etc/x does not exist"


def test_ssh_host_settings_come_from_the_inventory_and_remote_hosts_need_declared_access(tmp_path):
    from dbmigrate.app.consolidate.provision import connection_for
    from dbmigrate.config import load_inventory

    inv_file = tmp_path / "inv.yaml"
    inv_file.write_text(textwrap.dedent("""\
        version: 1
        defaults:
          credentials: {password_env: X_PW, user: admin}
        clusters:
          legacy:
            servers:
              old-a: {host: 10.1.0.2, port: 3306}
        hosts:
          db7: {cores: 4, memory_gb: 8, disk_gb: 50, address: 10.1.0.7,
                access: {kind: ssh, user: dba, port: 2222, identity_file: keys/id, jump_host: bastion,
                         strict_host_key_checking: accept-new}}
          db9: {cores: 4, memory_gb: 8, disk_gb: 50, address: 10.1.0.9, access: none}
          db10: {cores: 4, memory_gb: 8, disk_gb: 50, address: 10.1.0.10, access: {kind: ssh, user: root}}
        """))
    inv = load_inventory(inv_file)
    c = connection_for(inv, "db7", "10.1.0.7", None)
    assert c.start == "systemd" and c.become
    assert c.vars["ansible_user"] == "dba" and c.vars["ansible_port"] == 2222
    assert c.vars["ansible_ssh_private_key_file"] == str(tmp_path / "keys/id")
    assert "-o ProxyJump=bastion" in c.vars["ansible_ssh_common_args"]
    assert "-o StrictHostKeyChecking=accept-new" in c.vars["ansible_ssh_common_args"]
    assert connection_for(inv, "db7", "10.1.0.7", "direct").start == "direct"
    assert not connection_for(inv, "db10", "10.1.0.10", None).become  # root already: no sudo needed
    with pytest.raises(UsageError, match="access: none"):
        connection_for(inv, "db9", "10.1.0.9", None)
    with pytest.raises(UsageError, match="no access declared"):
        connection_for(inv, "db8", "10.1.0.8", None)
    assert connection_for(inv, "lo", "127.0.0.1", None).vars == {"ansible_connection": "local"}
