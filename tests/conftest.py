"""Shared fixtures: real MariaDB sandboxes, started once per test session and
always torn down (even when a test fails)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="dbm-test-"))  # removed by the `boxes` fixture or at exit
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
# Every sandbox, journal and CLI subprocess of this test session lives under here.
os.environ["DBMIGRATE_HOME"] = str(_HOME)
os.environ.setdefault("DBMIGRATE_JOURNAL", str(_HOME / "journal.sqlite"))


def _have_mariadb() -> bool:
    return bool(shutil.which("mariadbd") or os.path.exists("/usr/sbin/mariadbd"))


# A live test runs real servers under bounds of a few seconds on a machine of two shared
# cores: the machine alone can exceed one (the tool then rolls back safely, and the test, which
# expects the run to finish, fails). Such a test is run once more; a rerun is never silent: the
# first attempt's failure is printed at the end under its own heading (see below).
LIVE_RERUNS = 1


def pytest_collection_modifyitems(config, items):
    live = [item for item in items if "integration" in item.keywords]
    if not _have_mariadb():
        skip = pytest.mark.skip(reason="mariadb-server is not installed (apt-get install mariadb-server)")
        for item in live:
            item.add_marker(skip)
        return
    if config.pluginmanager.hasplugin("rerunfailures"):
        for item in live:
            item.add_marker(pytest.mark.flaky(reruns=LIVE_RERUNS, reruns_delay=2))


_FAILED_ONCE: list[tuple[str, str]] = []


def pytest_runtest_logreport(report):
    if getattr(report, "outcome", "") == "rerun":
        _FAILED_ONCE.append((report.nodeid, report.longreprtext[-3000:]))


def pytest_terminal_summary(terminalreporter):
    if not _FAILED_ONCE:
        return
    terminalreporter.section(f"live tests that failed once and were run again ({len(_FAILED_ONCE)})")
    for nodeid, text in _FAILED_ONCE:
        terminalreporter.write_line(f"--- {nodeid}: the first attempt's failure")
        terminalreporter.write_line(text)


@pytest.fixture(scope="session")
def dbm_home() -> Path:
    return _HOME


@pytest.fixture(scope="session")
def boxes():
    from dbmigrate.rehearsal.sandbox.manager import Sandboxes

    b = Sandboxes()
    yield b
    for state in b.list():
        try:
            b.down(state.name)
        except Exception as e:  # keep tearing the others down
            print(f"teardown of sandbox {state.name} failed: {e}")
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def make_sandbox(boxes):
    """Factory: make_sandbox('name', replicas=2) -> SandboxState (torn down at session end)."""

    def make(name: str, replicas: int = 2, **kw):
        return boxes.up(name, replicas, **kw)

    return make


@pytest.fixture(scope="session")
def demo(make_sandbox):
    """A shared, healthy 1+2 topology. Tests must leave it as they found it."""
    return make_sandbox("shared", 2)


@pytest.fixture(scope="session")
def demo_inventory(demo):
    from dbmigrate.config import load_inventory

    return load_inventory(demo.inventory_file)


def run_cli(*args: str, timeout: float = 120, env: dict | None = None):
    """Run `python -m dbmigrate ARGS` as a subprocess (as an operator would)."""
    import subprocess
    import sys

    e = dict(os.environ)
    e.update(env or {})
    e.setdefault("COLUMNS", "200")
    return subprocess.run([sys.executable, "-m", "dbmigrate", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=str(Path(__file__).resolve().parents[1]))


@pytest.fixture(scope="session")
def cli():
    return run_cli


def _our_processes() -> list[tuple[int, str]]:
    """Processes whose command line names this test session's home (mariadbd, haproxy, ...)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(_HOME) in cmd and "pytest" not in cmd:
            found.append((int(proc.name), cmd.strip()))
    return found


def pytest_sessionfinish(session, exitstatus):
    """No test may leave a server behind: fail the session if one is still running, and stop it."""
    import signal

    leftovers = _our_processes()
    for pid, _ in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if leftovers:
        print("\nprocesses left behind by the tests (now killed):\n" + "\n".join(f"  {p} {c}" for p, c in leftovers))
        session.exitstatus = 1


@pytest.fixture(scope="session")
def sshd():
    """A real OpenSSH server on 127.0.0.1 (its own host and client keys, pinned in a known_hosts file)."""
    from dbmigrate.hosts.ssh import close_all
    from dbmigrate.rehearsal.sandbox.sshd import SSHD, Sshd

    if not os.path.exists(SSHD):
        pytest.skip("openssh-server is not installed (apt-get install openssh-server)")
    daemon = Sshd(_HOME / "sshd")
    daemon.start()
    yield daemon
    close_all()  # shared ssh connections name files under the test home: end them before the leftover check
    daemon.stop()
