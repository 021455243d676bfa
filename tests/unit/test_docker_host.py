"""The `docker` access kind: every file operation is a program run through `docker exec -i`.

A stand-in `docker` CLI (a script) runs the exec'd program on this machine, or answers as the
Docker CLI does for a missing or stopped container and a missing program, so the host layer's
code paths (atomic writes, streams, df, errors) are checked without an engine. The same
operations run against real containers in tests/integration/test_compose_rehearsals.py."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.exceptions import ConfigError
from dbmigrate.hosts import DockerHost, HostUnreachable, ProgramMissing, host_for, stream
from dbmigrate.hosts.docker import exec_counts

FAKE_DOCKER = textwrap.dedent(f"""\
    #!{sys.executable}
    # Answers `docker [-H ADDR] exec -i CONTAINER PROG ARGS...` the way the Docker CLI does.
    import json, os, sys
    args = sys.argv[1:]
    log = os.environ.get("FAKE_DOCKER_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(args) + "\\n")
    if args[:1] == ["-H"]:
        args = args[2:]
    assert args[:2] == ["exec", "-i"], args
    container, argv = args[2], args[3:]
    if container == "gone":
        sys.stderr.write("Error response from daemon: No such container: gone\\n"); sys.exit(1)
    if container == "stopped":
        sys.stderr.write("Error response from daemon: Container 4f2a is not running\\n"); sys.exit(1)
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        sys.stderr.write('OCI runtime exec failed: exec failed: unable to start container process: exec: "'
                         + argv[0] + '": executable file not found in $PATH: unknown\\n')
        sys.exit(126)
""")


@pytest.fixture
def fake_docker(tmp_path):
    path = tmp_path / "docker"
    path.write_text(FAKE_DOCKER)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_every_operation_is_a_docker_exec_into_the_container(fake_docker, tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    host = DockerHost("db1 in container c1", "c1", engine="unix:///run/e/docker.sock", docker=fake_docker)
    before = exec_counts().get("c1", 0)
    target = tmp_path / "data" / "ib_buffer_pool"
    target.parent.mkdir()
    host.write_bytes(str(target), b"1,2\n3,4\n", mode=0o600)
    assert target.read_bytes() == b"1,2\n3,4\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert host.read_bytes(str(target)) == b"1,2\n3,4\n"
    assert host.read_from(str(target), 4) == b"3,4\n"
    assert host.exists(str(target)) and not host.exists(str(tmp_path / "nope"))
    assert host.free_bytes(str(tmp_path)) > 0
    dest = tmp_path / "copy"
    assert host.fetch(str(target), dest) == 8 and dest.read_bytes() == b"1,2\n3,4\n"
    host.remove(str(target))
    assert not target.exists()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls and all(c[:5] == ["-H", "unix:///run/e/docker.sock", "exec", "-i", "c1"] for c in calls)
    assert exec_counts()["c1"] - before == len(calls)


def test_streams_between_two_containers(fake_docker, tmp_path):
    src = DockerHost("a", "ca", docker=fake_docker)
    dst = DockerHost("b", "cb", docker=fake_docker)
    (tmp_path / "in").write_bytes(b"x" * 100_000)
    stream(src, ["cat", str(tmp_path / "in")], dst, ["sh", "-c", f"cat > {tmp_path / 'out'}"])
    assert (tmp_path / "out").read_bytes() == b"x" * 100_000


@pytest.mark.parametrize("container, error, words", [
    ("gone", HostUnreachable, "does not exist"),
    ("stopped", HostUnreachable, "is not running"),
])
def test_a_missing_or_stopped_container_says_so(fake_docker, container, error, words):
    host = DockerHost("db1", container, docker=fake_docker)
    with pytest.raises(error) as e:
        host.read_bytes("/var/lib/mysql/slow.log")
    assert words in e.value.message and container in e.value.message and e.value.hint


def test_a_program_missing_in_the_image_is_named(fake_docker):
    host = DockerHost("db1", "c1", docker=fake_docker)
    with pytest.raises(ProgramMissing) as e:
        host.run(["mariadb-backup-not-installed", "--version"])
    assert "mariadb-backup-not-installed" in e.value.message and "c1" in e.value.message


def test_file_errors_inside_the_container_are_the_host_layers(fake_docker, tmp_path):
    from dbmigrate.hosts import HostFileMissing

    host = DockerHost("db1", "c1", docker=fake_docker)
    with pytest.raises(HostFileMissing):
        host.read_bytes(str(tmp_path / "absent.log"))


def test_no_docker_cli_is_a_clear_error():
    host = DockerHost("db1", "c1", docker="/nonexistent/docker")
    with pytest.raises(ProgramMissing) as e:
        host.read_bytes("/etc/hostname")
    assert "docker" in e.value.message


INV = """\
defaults:
  credentials: {password_env: P, user: root}
clusters:
  c:
    servers:
      a: {host: 127.61.7.11, access: {kind: docker, container: dbm-x-db1-1, engine: "unix:///tmp/e/docker.sock"}}
      b: {host: 127.61.7.12, access: {kind: docker, container: dbm-x-db2-1}}
"""


def test_inventory_declares_docker_access():
    inv = load_inventory("i.yaml", text=INV)
    a, b = host_for(inv, "a"), host_for(inv, "b")
    assert isinstance(a, DockerHost) and a.container == "dbm-x-db1-1" and a.engine == "unix:///tmp/e/docker.sock"
    assert a.kind == "docker" and "dbm-x-db1-1" in a.name
    assert isinstance(b, DockerHost) and b.engine is None
    assert a.command(["cat", "/f"])[1:] == ["-H", "unix:///tmp/e/docker.sock", "exec", "-i", "dbm-x-db1-1", "cat", "/f"]


@pytest.mark.parametrize("bad, field", [
    ("{kind: docker}", "container"),
    ("{kind: docker, container: 'a b'}", "container"),
    ("{kind: docker, container: c, engine: /var/run/docker.sock}", "engine"),
    ("{kind: docker, container: c, user: x}", "user"),
])
def test_bad_docker_access_blocks_name_the_field(bad, field):
    text = f"clusters:\n  c:\n    servers:\n      a:\n        host: 10.0.0.1\n        access: {bad}\n" \
           f"        credentials: {{password_env: P, user: root}}\n"
    with pytest.raises(ConfigError) as e:
        load_inventory("i.yaml", text=text)
    assert "i.yaml:" in str(e.value) and field in str(e.value)


def test_the_exec_needs_no_terminal_and_passes_stdin():
    host = DockerHost("db1", "c1")
    argv = host.command(["sh", "-c", "cat > /f"])
    assert "-i" in argv and "-t" not in argv and "-it" not in argv
    assert os.path.basename(argv[0]) == "docker"
