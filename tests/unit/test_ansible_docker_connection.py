"""Ansible reaches a container host through `docker exec` (the `dbmigrate_docker` connection):
`consolidate provision` for hosts declared `access: {kind: docker}`.

ansible-playbook really runs, with a stand-in `docker` CLI that runs the exec'd program here
(as in test_docker_host.py), so every module's transfer and run is seen going through
`docker -H ENGINE exec -i CONTAINER`. Real containers: tests/integration/test_compose_rehearsals.py."""

from __future__ import annotations

import json
import stat
import sys

import pytest
import yaml

from dbmigrate.app.consolidate.provision import connection_for
from dbmigrate.config import load_inventory
from dbmigrate.hosts.ansible import AnsibleFailed, run_playbook
from tests.unit.test_docker_host import FAKE_DOCKER

ENGINE = "unix:///run/e/docker.sock"


def _fake(tmp_path):
    path = tmp_path / "docker"
    path.write_text(FAKE_DOCKER)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _play(tmp_path, container: str, target):
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {
        "ansible_connection": "dbmigrate_docker", "ansible_host": container, "ansible_docker_engine": ENGINE,
        "ansible_docker_cli": _fake(tmp_path), "ansible_python_interpreter": sys.executable,
        "ansible_pipelining": True}}}}))
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.copy": {"dest": str(target), "content": "[mariadbd.h1-1]\nport = 3306\n", "mode": "0644"}},
        {"ansible.builtin.command": {"argv": ["cat", str(target)]}, "register": "out"},
        {"ansible.builtin.assert": {"that": ["'port = 3306' in out.stdout"]}},
    ]}]))
    return inv, book


def test_a_playbook_runs_in_the_container_only_through_docker_exec(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    target = tmp_path / "etc" / "60-dbmigrate-h1-1.cnf"
    target.parent.mkdir()
    inv, book = _play(tmp_path, "dbm-c-h1-1", target)
    recap = run_playbook(tmp_path, inv, book, None)
    assert recap.hosts["h1"]["failed"] == 0 and recap.hosts["h1"]["changed"] >= 1
    assert target.read_text() == "[mariadbd.h1-1]\nport = 3306\n"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) >= 2  # each module run in one exec (pipelined)
    assert all(c[:5] == ["-H", ENGINE, "exec", "-i", "dbm-c-h1-1"] for c in calls), calls


def test_a_missing_container_is_an_unreachable_host(tmp_path):
    inv, book = _play(tmp_path, "gone", tmp_path / "x.cnf")
    with pytest.raises(AnsibleFailed) as e:
        run_playbook(tmp_path, inv, book, None)
    assert "on h1" in e.value.message and "No such container" in e.value.message


def test_docker_access_provisions_through_the_docker_connection_as_root_without_systemd(tmp_path):
    (tmp_path / "my.cnf").write_text("[client]\nuser=dbm\npassword=x\n")
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"version": 1, "defaults": {"credentials": {
        "defaults_file": "my.cnf", "group": "client"}}, "clusters": {"c": {"servers": {
        "a": {"host": "127.0.0.1", "port": 3306}}}}, "hosts": {"h1": {
            "cores": 2, "memory_gb": 1, "disk_gb": 5, "address": "127.61.7.21",
            "access": {"kind": "docker", "container": "dbm-c-h1-1", "engine": ENGINE}}}}))
    inv = load_inventory(tmp_path / "inv.yaml")
    conn = connection_for(inv, "h1", "127.61.7.21", None)
    assert conn.vars == {"ansible_connection": "dbmigrate_docker", "ansible_host": "dbm-c-h1-1",
                         "ansible_pipelining": True, "ansible_docker_engine": ENGINE}
    assert conn.start == "direct" and conn.become is False
