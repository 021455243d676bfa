"""Pure parts of the host-access layer: quoting, ssh arguments, error
classification, df parsing, inventory access declarations."""

from __future__ import annotations

import shlex

import pytest

from dbmigrate.config import load_inventory
from dbmigrate.exceptions import ConfigError, DbmigrateError
from dbmigrate.hosts import (ConnectionLost, HostAuthFailed, HostDiskFull, HostError, HostFileMissing,
                             HostKeyMismatch, HostPermissionDenied, HostUnreachable, LocalHost, NoAccessHost,
                             NoHostAccess, ProgramMissing, SshHost, host_for, parse_df_available)
from dbmigrate.hosts.errors import classify_program_failure, classify_ssh_failure
from dbmigrate.hosts.ssh import SshSettings, check_ssh_options, remote_command, ssh_options


# -- quoting and ssh arguments ---------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["cat", "--", "/var/lib/mysql/ib_buffer_pool"],
    ["printf", "%s", "a b", "$HOME", "it's", "`id`", "x;rm -rf /", "*", "", "\n"],
])
def test_remote_command_round_trips_through_a_shell(argv):
    assert shlex.split(remote_command(argv)) == argv


def test_remote_command_refuses_nothing_to_run():
    with pytest.raises(ValueError):
        remote_command([])


def test_ssh_options_only_pass_what_was_set():
    args = ssh_options(SshSettings(address="db1"), "/c/%C")
    joined = " ".join(args)
    for absent in ("StrictHostKeyChecking", "UserKnownHostsFile", "-i ", "-J ", "-p ", "-l ", "IdentitiesOnly"):
        assert absent not in joined
    assert "BatchMode=yes" in joined and "ControlPath=/c/%C" in joined


def test_ssh_options_with_everything_set():
    s = SshSettings(address="db1", user="ops", port=2222, identity_file="/k/id", jump_host="bastion:22",
                    known_hosts_file="/k/known", strict_host_key_checking="accept-new",
                    options=(("Compression", "yes"),))
    args = ssh_options(s, "/c/%C")
    assert args[args.index("-p") + 1] == "2222"
    assert args[args.index("-i") + 1] == "/k/id"
    assert args[args.index("-J") + 1] == "bastion:22"
    assert "UserKnownHostsFile=/k/known" in args and "StrictHostKeyChecking=accept-new" in args
    assert "Compression=yes" in args
    assert s.target == "ops@db1"


def test_ssh_host_puts_control_master_first_and_the_command_last():
    h = SshHost("db1", SshSettings(address="db1", user="ops"))
    h.connect = lambda: None  # no network in unit tests
    argv = h.command(["cat", "--", "/a b"])
    assert argv[:3] == ["ssh", "-o", "ControlMaster=no"]  # ssh keeps the first value of an option
    assert argv[-3:] == ["--", "ops@db1", "cat -- '/a b'"]
    h.close()


@pytest.mark.parametrize("strict, options", [
    ("no", {}), ("off", {}), (None, {"StrictHostKeyChecking": "no"}), (None, {"UserKnownHostsFile": "/dev/null"}),
    (None, {"ControlPath": "/tmp/x"}), (None, {"BatchMode": "no"}),
])
def test_host_key_checking_cannot_be_turned_off(strict, options):
    with pytest.raises(ValueError):
        check_ssh_options(strict, options)


# -- error classification (stderr as OpenSSH 9.2 and coreutils print it) ----------------

@pytest.mark.parametrize("stderr, kind", [
    ("ssh: connect to host 10.0.0.9 port 22: Connection refused\r\n", HostUnreachable),
    ("ssh: connect to host 10.0.0.9 port 22: Connection timed out\r\n", HostUnreachable),
    ("ssh: Could not resolve hostname db9: Name or service not known\r\n", HostUnreachable),
    ("root@127.0.0.1: Permission denied (publickey).\r\n", HostAuthFailed),
    ("@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n@@@@@@@@@@@\n"
     "Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.\n"
     "Host key verification failed.\r\n", HostKeyMismatch),
    ("No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\n"
     "Host key verification failed.\r\n", HostKeyMismatch),
    ("Connection to 127.0.0.1 closed by remote host.\r\n", ConnectionLost),
    ("client_loop: send disconnect: Broken pipe\r\n", ConnectionLost),
])
def test_ssh_failures_are_classified(stderr, kind):
    err = classify_ssh_failure("db1 (ssh db1)", stderr, started=False)
    assert type(err) is kind
    assert str(err).startswith("db1 (ssh db1): ") and "\n" not in str(err)
    assert err.hint


def test_an_unexplained_drop_after_data_flowed_is_a_lost_connection():
    assert isinstance(classify_ssh_failure("db1", "", started=True), ConnectionLost)
    assert isinstance(classify_ssh_failure("db1", "", started=False), HostUnreachable)


@pytest.mark.parametrize("rc, stderr, kind", [
    (127, "sh: 1: pt-query-digest: not found\n", ProgramMissing),
    (127, "bash: line 1: pt-query-digest: command not found\n", ProgramMissing),
    (1, "cat: write error: No space left on device\n", HostDiskFull),
    (1, "cat: /var/lib/mysql/slow.log: Permission denied\n", HostPermissionDenied),
    (1, "mv: cannot move 'a' to 'b': Operation not permitted\n", HostPermissionDenied),
    (1, "tail: cannot open '/x' for reading: No such file or directory\n", HostFileMissing),
])
def test_program_failures_are_classified(rc, stderr, kind):
    err = classify_program_failure("db1", "read the slow log", "cat", rc, stderr)
    assert type(err) is kind and "db1" in str(err)
    assert isinstance(err, HostError) and isinstance(err, DbmigrateError)


def test_df_output_including_a_wrapped_line():
    out = "Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/sda1 100 40 60 40% /\n"
    assert parse_df_available(out, "db1", "/") == 60 * 1024
    wrapped = ("Filesystem 1024-blocks Used Available Capacity Mounted on\n"
               "/dev/mapper/very-long-volume-group-name-root\n   100 40 60 40% /\n")
    assert parse_df_available(wrapped, "db1", "/") == 60 * 1024
    with pytest.raises(HostError):
        parse_df_available("df: /x: No such file", "db1", "/x")


def test_no_access_host_refuses_every_operation_naming_the_host():
    declared = NoAccessHost("rds-1 on rds.example")
    for op in (lambda h: h.read_bytes("/x"), lambda h: h.free_bytes("/"), lambda h: h.write_bytes("/x", b"")):
        with pytest.raises(NoHostAccess) as e:
            op(declared)
        assert "rds-1 on rds.example" in str(e.value) and "access: none" in str(e.value)
    with pytest.raises(NoHostAccess) as e:
        NoAccessHost("db9 on 10.0.0.9", declared=False).run(["df"])
    assert "does not say how to reach" in str(e.value) and "kind: ssh" in e.value.hint


# -- inventory -------------------------------------------------------------------------------

INV = """
defaults:
  credentials: {password_env: P, user: root}
host_access:
  db2.example: {kind: ssh, user: ops, identity_file: keys/ops, known_hosts_file: /etc/ssh/known}
hosts:
  big-1: {cores: 8, memory_gb: 64, disk_gb: 500, access: {kind: ssh, port: 2200}}
clusters:
  c:
    servers:
      a: {host: 127.0.0.1, port: 3306}
      b: {host: 10.0.0.2, host_name: db2.example}
      d: {host: 10.0.0.3}
      e: {host: 10.0.0.4, access: none}
      f: {host: 10.0.0.5, access: local}
      g: {host: 10.0.0.6, host_name: big-1}
      h: {host: 10.0.0.7, access: {kind: ssh, address: bastion-side.example, jump_host: bastion}}
"""


def test_existing_inventories_stay_valid_and_loopback_is_local():
    inv = load_inventory("i.yaml", text="clusters: {c: {servers: {a: {host: 127.0.0.1, credentials: "
                                        "{password_env: P, user: root}}}}}\n")
    assert isinstance(host_for(inv, "a"), LocalHost)


def test_host_for_follows_the_declarations():
    inv = load_inventory("/inv/i.yaml", text=INV)
    assert isinstance(host_for(inv, "a"), LocalHost)
    b = host_for(inv, "b")
    assert isinstance(b, SshHost) and b.settings.user == "ops" and b.settings.address == "db2.example"
    assert b.settings.identity_file == "/inv/keys/ops"  # relative to the inventory
    assert b.settings.known_hosts_file == "/etc/ssh/known"
    assert host_for(inv, "b") is b  # one shared connection per host
    d = host_for(inv, "d")
    assert isinstance(d, NoAccessHost) and not d.declared
    e = host_for(inv, "e")
    assert isinstance(e, NoAccessHost) and e.declared
    assert isinstance(host_for(inv, "10.0.0.5:3306"), LocalHost)
    assert host_for(inv, "g").settings.port == 2200
    h = host_for(inv, "h")
    assert h.settings.address == "bastion-side.example" and h.settings.jump_host == "bastion"


def test_defaults_access_applies_to_servers_without_their_own():
    inv = load_inventory("i.yaml", text=INV.replace("defaults:\n", "defaults:\n  access: {kind: ssh, user: dba}\n"))
    assert host_for(inv, "d").settings.user == "dba"
    assert isinstance(host_for(inv, "e"), NoAccessHost)


@pytest.mark.parametrize("bad, field", [
    ("{kind: telnet}", "access"),
    ("{kind: ssh, strict_host_key_checking: 'no'}", "strict_host_key_checking"),
    ("{kind: ssh, options: {UserKnownHostsFile: /dev/null}}", "access"),
    ("{kind: ssh, port: 70000}", "port"),
    ("{kind: ssh, passwd: x}", "passwd"),
])
def test_bad_access_blocks_name_the_line_and_field(bad, field):
    text = f"clusters:\n  c:\n    servers:\n      a:\n        host: 10.0.0.1\n        access: {bad}\n" \
           f"        credentials: {{password_env: P, user: root}}\n"
    with pytest.raises(ConfigError) as e:
        load_inventory("i.yaml", text=text)
    assert "i.yaml:" in str(e.value) and field in str(e.value)


# -- feature adapters on the local host (real files, no server) ------------------------------

def test_host_copier_installs_atomically_and_reads_in_place(tmp_path):
    from types import SimpleNamespace

    from dbmigrate.warm.copier import HostCopier

    server = SimpleNamespace(name="db1")
    datadir = tmp_path / "data"
    datadir.mkdir()
    (datadir / "ib_buffer_pool").write_text("1,1\n")
    copier = HostCopier(lambda s: LocalHost("db1 on this machine"))
    assert copier.fetch(server, str(datadir / "ib_buffer_pool"), tmp_path) == datadir / "ib_buffer_pool"
    local = tmp_path / "filtered"
    local.write_text("5,1\n5,2\n")
    copier.push(local, server, str(datadir / "ib_buffer_pool"))
    assert (datadir / "ib_buffer_pool").read_text() == "5,1\n5,2\n"
    assert ((datadir / "ib_buffer_pool").stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in datadir.iterdir()) == ["ib_buffer_pool"]


def test_file_features_refuse_a_host_without_access(tmp_path):
    from types import SimpleNamespace

    from dbmigrate.digest.window import HostFileReader
    from dbmigrate.warm.copier import HostCopier

    with pytest.raises(NoHostAccess):
        HostFileReader(NoAccessHost("rds-1 on rds.example")).fetch("/rdsdbdata/log/slow.log", tmp_path)
    with pytest.raises(NoHostAccess):
        HostCopier(lambda s: NoAccessHost("rds-1 on rds.example")).fetch(SimpleNamespace(name="rds-1"),
                                                                        "/x/ib_buffer_pool", tmp_path)
