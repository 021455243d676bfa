"""Stopping and starting a provisioned instance through the host layer: how it runs is read
from the host (a live process behind its pid file here; no systemd on this machine), and
what can control an instance is chosen from its plan entry and host access."""

from __future__ import annotations

import os
import subprocess

import pytest

from dbmigrate.hosts import HostError, LocalHost, NoAccessHost
from dbmigrate.hosts.services import DIRECT, InstanceService, looks_like_mariadbd, parse_cmdline, unit_name
from dbmigrate.procedures.consolidate.plan import Demand, PlannedInstance
from dbmigrate.procedures.consolidate.provision import HostControl, instance_control, pid_file


def planned(tmp_path, **kw) -> PlannedInstance:
    base = dict(name="h1-1", host="h1", address="127.0.0.1", port=23306, datadir=str(tmp_path / "data" / "h1-1"),
                shards=["s1"], sources=["old1"], demand=Demand(), working_set_gb=0.1,
                socket=str(tmp_path / "run" / "h1-1.sock"), server_id=100001, slot=1)
    base.update(kw)
    return PlannedInstance(**base)


def test_command_line_and_process_names_are_read_as_the_kernel_writes_them():
    argv = parse_cmdline(b"/usr/sbin/mariadbd\0--defaults-file=/etc/x.cnf\0--defaults-group-suffix=.h1-1\0")
    assert argv == ["/usr/sbin/mariadbd", "--defaults-file=/etc/x.cnf", "--defaults-group-suffix=.h1-1"]
    assert looks_like_mariadbd(argv) and looks_like_mariadbd(["mysqld"])
    assert not looks_like_mariadbd(["/bin/sleep", "100"]) and not looks_like_mariadbd([])
    assert unit_name("h1-1") == "mariadb@h1-1"


def test_an_instance_that_runs_neither_as_a_unit_nor_behind_its_pid_file_is_refused_before_anything_stops(tmp_path):
    svc = InstanceService(LocalHost("h1"), "h1-1", str(tmp_path / "s.sock"), str(tmp_path / "h1-1.pid"))
    with pytest.raises(HostError, match="cannot tell how h1-1 runs: no active mariadb@h1-1 unit"):
        svc.detect()
    (tmp_path / "h1-1.pid").write_text("999999999\n")  # a dead pid
    with pytest.raises(HostError, match="no live mariadbd"):
        svc.detect()
    with pytest.raises(HostError, match="how it ran was never read"):
        svc.start(timeout=1)


def test_a_directly_started_process_is_found_stopped_cleanly_and_its_command_line_kept(tmp_path):
    fake = tmp_path / "mariadbd"  # a process named like the server, so the command line is its own
    fake.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(fake), "300"])
    try:
        pid_path = tmp_path / "h1-1.pid"
        pid_path.write_text(f"{proc.pid}\n")
        svc = InstanceService(LocalHost("h1"), "h1-1", str(tmp_path / "s.sock"), str(pid_path))
        assert svc.detect() == DIRECT and svc.argv == [str(fake), "300"]
        svc.stop(timeout=10)
        assert proc.poll() is not None or proc.wait(5) is not None  # SIGTERM'd; a zombie counted as gone
        assert svc.live_pid() is None and svc.argv == [str(fake), "300"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_host_layer_controls_a_provisioned_instance_only_with_access_and_a_plan_socket(tmp_path):
    inst = planned(tmp_path)
    control = instance_control(inst, LocalHost("h1"))
    assert isinstance(control, HostControl) and control.datadir(inst) == inst.datadir
    assert control.service.pid_file == str(tmp_path / "run" / "h1-1.pid")
    assert pid_file(planned(tmp_path, config={"pid_file": "/x/y.pid"})) == "/x/y.pid"
    assert instance_control(inst, NoAccessHost("h1")) is None
    assert instance_control(inst, None) is None
    assert instance_control(planned(tmp_path, socket=""), LocalHost("h1")) is None  # a version 1 plan
    assert os.path.exists(inst.datadir) is False  # choosing touched nothing


class PathHost(LocalHost):
    """This machine, with `bin` first on PATH: stands in for a host whose systemctl is `bin/systemctl`."""

    def __init__(self, name: str, bin_dir):
        super().__init__(name)
        self.bin_dir = bin_dir

    def command(self, argv):
        return ["env", f"PATH={self.bin_dir}:{os.environ['PATH']}", *argv]


def test_an_active_unit_is_stopped_and_started_with_systemctl(tmp_path):
    bin_dir, mark, calls = tmp_path / "bin", tmp_path / "systemd", tmp_path / "calls"
    bin_dir.mkdir()
    mark.mkdir()
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit 0\n')
    (bin_dir / "systemctl").chmod(0o755)
    svc = InstanceService(PathHost("h1", bin_dir), "h1-1", str(tmp_path / "none.sock"), str(tmp_path / "h1-1.pid"))
    svc.systemd_mark = str(mark)
    assert svc.detect() == "systemd"
    svc.stop(timeout=5)
    with pytest.raises(HostError, match=r"did not answer on .*none.sock after its start \(mariadb@h1-1\)"):
        svc.start(timeout=0.3)  # nothing answers on that socket: said, with the unit named
    assert calls.read_text().splitlines() == ["is-active --quiet -- mariadb@h1-1", "stop mariadb@h1-1",
                                              "start mariadb@h1-1"]
    # Without systemd as the running init, a unit is never taken for the way the instance runs.
    svc = InstanceService(PathHost("h1", bin_dir), "h1-1", str(tmp_path / "none.sock"), str(tmp_path / "h1-1.pid"))
    svc.systemd_mark = str(tmp_path / "absent")
    with pytest.raises(HostError, match="cannot tell how h1-1 runs"):
        svc.detect()
