"""The host-access layer against a real sshd on loopback: every file and
program operation over ssh, streaming between hosts, connection reuse, and
each failure an operator can meet, as the one-line error they would see."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import pytest

from dbmigrate.hosts import (ConnectionLost, HostAuthFailed, HostDiskFull, HostFileMissing, HostKeyMismatch,
                             HostPermissionDenied, HostUnreachable, LocalHost, ProgramMissing, SshHost, SshSettings,
                             stream)
from dbmigrate.rehearsal.sandbox.ports import free_port
from dbmigrate.rehearsal.sandbox.sshd import Sshd

pytestmark = pytest.mark.integration


def settings_for(ep, **over) -> SshSettings:
    kw = dict(address=ep.address, port=ep.port, user=ep.user, identity_file=ep.identity_file,
              known_hosts_file=ep.known_hosts_file, strict_host_key_checking="yes", connect_timeout=5)
    kw.update(over)
    return SshSettings(**kw)


@pytest.fixture
def remote(sshd):
    h = SshHost("rem", settings_for(sshd.endpoint))
    yield h
    h.close()


@pytest.fixture
def workdir(dbm_home, request):
    d = dbm_home / "hosts" / request.node.name
    d.mkdir(parents=True, exist_ok=True)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_read_whole_and_streamed(remote, workdir):
    data = os.urandom(300_000) + b"tail"
    (workdir / "f.bin").write_bytes(data)
    assert remote.read_bytes(str(workdir / "f.bin")) == data
    with remote.open_read(str(workdir / "f.bin")) as stream_in:
        got = b"".join(iter(lambda: stream_in.read(7000), b""))
    assert got == data
    size = remote.fetch(str(workdir / "f.bin"), workdir / "copy.bin")
    assert size == len(data) and (workdir / "copy.bin").read_bytes() == data
    assert not [p for p in workdir.iterdir() if p.name.endswith(".part")]


def test_incremental_reads_of_a_growing_file(remote, workdir):
    log = workdir / "slow.log"
    log.write_bytes(b"")
    offset, seen = 0, b""
    for i in range(5):
        with log.open("ab") as f:
            f.write(f"# Query {i}\nSELECT {i};\n".encode())
        chunk = remote.read_from(str(log), offset)
        offset += len(chunk)
        seen += chunk
    assert seen == log.read_bytes()
    assert remote.read_from(str(log), offset) == b""


def test_atomic_write_with_mode_and_owner(remote, workdir):
    target = workdir / "ib_buffer_pool"
    target.write_bytes(b"old")
    payload = b"1,2\n3,4\n" * 5000
    remote.write_bytes(str(target), payload, mode=0o660, owner="root:root")
    assert target.read_bytes() == payload
    assert (target.stat().st_mode & 0o777) == 0o660
    assert [p.name for p in workdir.iterdir()] == ["ib_buffer_pool"]  # no temp file left


def test_secret_on_stdin_not_in_argv(remote, workdir):
    secret_file = workdir / "creds.cnf"
    remote.write_bytes(str(secret_file), b"[client]\npassword=s3cret\n", mode=0o600)
    assert (secret_file.stat().st_mode & 0o777) == 0o600
    # A secret given as input reaches the program without being part of any command line.
    out = remote.run(["sh", "-c", 'read -r pw; ps -eo args | grep -c "[s]3cret" || true; echo "len=${#pw}"'],
                     input=b"s3cret\n")
    assert out.text.split() == ["0", "len=6"]


def test_run_quotes_every_word(remote):
    words = ["a b", "$HOME", "it's", "`id`", "semi;colon", "*", ""]
    out = remote.run(["printf", "%s\\n", *words]).text
    assert out.split("\n")[:-1] == words


def test_free_space_matches_statvfs(remote, workdir):
    st = os.statvfs(workdir)
    expected = st.f_bavail * st.f_frsize
    got = remote.free_bytes(str(workdir))
    assert abs(got - expected) < max(64 << 20, expected // 100), (got, expected)


def test_stream_between_two_hosts(remote, workdir):
    data = os.urandom(4 << 20)
    (workdir / "src.bin").write_bytes(data)
    local = LocalHost("ops")
    # ssh -> local: the bytes pass through a pipe, not a file on this side.
    stream(remote, ["cat", str(workdir / "src.bin")], local, ["sh", "-c", f"cat > {workdir / 'dst1.bin'}"])
    assert (workdir / "dst1.bin").read_bytes() == data
    # local -> ssh, with the consumer's output returned.
    out = stream(local, ["cat", str(workdir / "src.bin")], remote, ["sha256sum"])
    import hashlib
    assert out.split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_connection_is_reused(sshd, remote):
    """One handshake per host: the first call opens the shared connection, later calls and
    streams are channels on it (sshd logs one accepted login per connection)."""
    def logins() -> int:
        return sshd.log_path.read_text(errors="replace").count("Accepted publickey")

    before = logins()
    remote.run(["true"])
    assert logins() == before + 1
    for _ in range(5):
        assert remote.run(["echo", "again"]).stdout == b"again\n"
    with remote.open_read("/etc/hostname") as f:
        f.read()
    assert logins() == before + 1, "a later call logged in again instead of using the shared connection"
    remote.close()  # the shared connection ends with the host: the next call logs in anew
    remote.run(["true"])
    assert logins() == before + 2


def test_remove_files_the_tool_created(remote, workdir):
    a, b = workdir / "a.tmp", workdir / "b.tmp"
    a.write_text("x")
    b.write_text("y")
    remote.remove(str(a), str(b), str(workdir / "never-existed"))
    assert not a.exists() and not b.exists()


# -- failures ----------------------------------------------------------------------

def test_unreachable_port(sshd):
    h = SshHost("gone", settings_for(sshd.endpoint, port=free_port()))
    with pytest.raises(HostUnreachable) as e:
        h.run(["true"])
    assert "gone" in str(e.value) and "Connection refused" in str(e.value)
    h.close()


def test_wrong_key(sshd, workdir):
    other = workdir / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    h = SshHost("rem", settings_for(sshd.endpoint, identity_file=str(other),
                                     options=(("IdentitiesOnly", "yes"), ("IdentityAgent", "none"))))
    with pytest.raises(HostAuthFailed) as e:
        h.run(["true"])
    assert "rem" in str(e.value) and "Permission denied" in str(e.value)
    h.close()


def test_host_key_mismatch(sshd, workdir):
    impostor = workdir / "impostor"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(impostor)], check=True)
    kt, key = (workdir / "impostor.pub").read_text().split()[:2]
    bad = workdir / "known_hosts"
    bad.write_text(f"[127.0.0.1]:{sshd.endpoint.port} {kt} {key}\n")
    h = SshHost("rem", settings_for(sshd.endpoint, known_hosts_file=str(bad)))
    with pytest.raises(HostKeyMismatch) as e:
        h.run(["true"])
    assert "rem" in str(e.value) and "differs from the one recorded in known_hosts" in str(e.value)
    h.close()


def test_unknown_host_key_is_refused_not_accepted(sshd, workdir):
    empty = workdir / "empty_known_hosts"
    empty.write_text("")
    h = SshHost("rem", settings_for(sshd.endpoint, known_hosts_file=str(empty)))
    with pytest.raises(HostKeyMismatch) as e:
        h.run(["true"])
    assert "not in known_hosts" in str(e.value)
    assert empty.read_text() == ""
    h.close()


def test_program_missing(remote):
    with pytest.raises(ProgramMissing) as e:
        remote.run(["pt-query-digest-not-here", "--version"], what="digest the slow log")
    assert "rem" in str(e.value) and "pt-query-digest-not-here" in str(e.value)


def test_missing_file(remote, workdir):
    with pytest.raises(HostFileMissing) as e:
        remote.read_bytes(str(workdir / "nope.log"))
    assert "nope.log" in str(e.value)


def test_permission_denied(remote, workdir):
    # Root reads everything, so the program runs as `nobody` on the host (setpriv): a real
    # remote "Permission denied", carried back over ssh and classified.
    secret = workdir / "private"
    secret.mkdir(mode=0o700)
    (secret / "slow.log").write_text("x")
    with pytest.raises(HostPermissionDenied) as e:
        remote.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                    "cat", str(secret / "slow.log")], what="read the slow log")
    assert "rem" in str(e.value) and "read the slow log" in str(e.value)


@pytest.fixture
def tiny_fs(workdir):
    mnt = workdir / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "dbm-tiny", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()}); the parsing is unit-tested")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_disk_full_leaves_nothing(remote, tiny_fs):
    with pytest.raises(HostDiskFull) as e:
        remote.write_bytes(str(tiny_fs / "ib_buffer_pool"), b"x" * (1 << 20))
    assert "rem" in str(e.value) and "disk full" in str(e.value)
    assert list(tiny_fs.iterdir()) == []


def kill_when(daemon: Sshd, appeared, timeout: float = 30) -> threading.Thread:
    """Kill sshd as soon as a transfer is seen under way."""
    def seen() -> bool:
        try:
            return appeared()
        except OSError:  # a file vanished while we looked
            return False

    def watch():
        deadline = time.monotonic() + timeout
        while not seen() and time.monotonic() < deadline:
            time.sleep(0.005)
        daemon.kill()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_connection_lost_mid_transfer(workdir):
    daemon = Sshd(workdir / "sshd")
    ep = daemon.start()
    try:
        h = SshHost("rem", settings_for(ep))
        h.run(["true"])
        big = workdir / "big.bin"
        with big.open("wb") as f:
            f.truncate(400 << 20)  # sparse: cheap to make, slow enough to send
        kill_when(daemon, lambda: any(p.name.endswith(".part") and p.stat().st_size > 0
                                      for p in workdir.iterdir()))
        with pytest.raises(ConnectionLost) as e:
            h.fetch(str(big), workdir / "copy.bin", timeout=60)
        assert "rem" in str(e.value) and "lost" in str(e.value)
        assert not (workdir / "copy.bin").exists()
        assert not [p for p in workdir.iterdir() if p.name.endswith(".part")]
        h.close()

        # A write cut off mid-way leaves no temp file and no target on the host.
        ep = daemon.start()
        h = SshHost("rem", settings_for(ep))
        h.run(["true"])
        dest = workdir / "dest"
        dest.mkdir()
        kill_when(daemon, lambda: any(p.name.endswith(".tmp") for p in dest.iterdir()))
        with pytest.raises(ConnectionLost):
            h.write_bytes(str(dest / "ib_buffer_pool"), b"\0" * (300 << 20), timeout=60)
        deadline = time.monotonic() + 5
        while list(dest.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.1)  # the orphaned remote shell notices EOF and cleans up
        assert list(dest.iterdir()) == []
        h.close()
    finally:
        daemon.stop()


def test_a_dead_shared_connection_is_replaced(remote):
    import re
    import signal

    remote.run(["true"])
    check = subprocess.run([*remote._base(), "-O", "check", "--", remote.settings.target], capture_output=True,
                           text=True, timeout=10)
    pid = int(re.search(r"pid=(\d+)", check.stderr).group(1))
    os.kill(pid, signal.SIGKILL)  # leaves a stale control socket behind
    time.sleep(0.1)
    assert remote.run(["echo", "again"]).text == "again\n"


def test_a_stream_left_early_is_not_an_error(remote, workdir):
    (workdir / "big.bin").write_bytes(b"x" * (8 << 20))
    with remote.open_read(str(workdir / "big.bin")) as f:
        assert f.read(10) == b"x" * 10
