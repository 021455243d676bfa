"""A sandbox instance's datadir on a small filesystem of its own, to fill it on purpose.

The sandboxes' datadirs share the machine's disk; filling that would fill it for every
other process. `SmallDatadir` stops the instance, mounts a tmpfs of `size_mb` over its
datadir (its files copied in), and starts it again; `fill()` takes every free byte of that
filesystem, `free()` gives them back. Its size is the datadir's files plus `headroom_mb`, whose
default leaves the 1 GiB the preflight wants free on a candidate, however much earlier rows
grew the datadir (a tmpfs takes memory only for what is written to it). On the way out the instance is stopped and the tmpfs
unmounted whatever happened (the files under the mount point are the ones from before the
row: the caller rebuilds the sandbox rather than trusting them).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from pathlib import Path

from dbmigrate.exceptions import DbmigrateError
from dbmigrate.rehearsal.sandbox.manager import Sandboxes

FILLER = "dbmigrate-disk-filler"
CHUNK = 1 << 20


class DiskFaultError(DbmigrateError):
    """The small filesystem could not be made or removed."""


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise DiskFaultError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")


def _mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


def size_for(datadir: Path, headroom_mb: int) -> int:
    """MB for a tmpfs that holds `datadir`'s files with `headroom_mb` free beside them (a sandbox
    reused by many rows grows its binary and relay logs: a fixed size once left 42 MB)."""
    used = sum(f.stat().st_size for f in datadir.rglob("*") if f.is_file() and not f.is_symlink())
    return headroom_mb + -(-used // CHUNK)


class SmallDatadir:
    def __init__(self, boxes: Sandboxes, sandbox: str, instance: str, headroom_mb: int = 1280):
        self.boxes, self.sandbox, self.instance = boxes, sandbox, instance
        self.datadir = boxes.find(sandbox).spec(instance).datadir
        self.size_mb = size_for(self.datadir, headroom_mb)
        self.filler = self.datadir / FILLER
        self.filled_bytes = 0
        self.filled_peak = 0  # what fill() took, kept after free()

    def __enter__(self) -> "SmallDatadir":
        self.boxes.stop_instance(self.sandbox, self.instance)
        try:
            staged = self.datadir.with_name("data.staged")
            shutil.rmtree(staged, ignore_errors=True)
            _run("cp", "-a", str(self.datadir), str(staged))
            _run("mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0750", f"dbmigrate-small-{os.getpid()}",
                 str(self.datadir))
            _run("cp", "-a", f"{staged}/.", str(self.datadir))
            shutil.rmtree(staged, ignore_errors=True)
            self.boxes.start_instance(self.sandbox, self.instance)
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._remove()

    def free_bytes(self) -> int:
        st = os.statvfs(self.datadir)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Take every free byte (the filler file grows until the filesystem says no space)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            block = b"\0" * CHUNK
            size = CHUNK
            while size >= 512:  # unbuffered: a short or refused write is seen at once
                try:
                    self.filled_bytes += os.write(fd, block[:size])
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    size //= 2
        finally:
            os.close(fd)
        self.filled_peak = self.filled_bytes
        return self.filled_bytes

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)
        self.filled_bytes = 0

    def wait_resumed(self, timeout_s: float = 90) -> bool:
        """After free(): until no session of the instance still waits for disk space. MariaDB
        retries a write that met a full disk every 60 s, so space freed is not yet a server
        that commits; an operator waits for it (its error log says so) before the one command."""
        from dbmigrate.db.inspector import Inspector

        deadline = time.monotonic() + timeout_s
        with self.boxes.find(self.sandbox).instance(self.instance).root_server() as srv:
            while True:
                try:
                    if not Inspector(srv).disk_full_waits():
                        return True
                except DbmigrateError:
                    srv.close()
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)

    def _remove(self) -> None:
        try:
            self.free()
        except OSError:
            pass
        try:
            self.boxes.kill_instance(self.sandbox, self.instance)
        except Exception:
            pass  # not running
        for attempt in range(20):
            if not _mounted(self.datadir):
                return
            try:
                _run("umount", str(self.datadir))
            except DiskFaultError:
                time.sleep(0.5)  # a process still closing its files
        if _mounted(self.datadir):
            _run("umount", "-l", str(self.datadir))  # detached now, freed when the last file closes


def run_disk_full_scenario(cluster, sc, say=lambda m: None, after_exit_s: float | None = None):
    """The promote row with the candidate's datadir on a small filesystem, filled right after
    the open (the run paused there) and freed once the run exited, before the operator's one
    command. The sandbox is rebuilt for the next row (the mount is gone, and with it the
    candidate's data)."""
    from dbmigrate.rehearsal.faultmatrix import health
    from dbmigrate.rehearsal.faultmatrix.harness import Result, run_scenario

    cluster.ensure()
    inv, name = cluster.inventory, cluster.name
    writer = health.check(inv, name, checksums=False).writer or f"{name}-1"
    candidate = sorted(n for n in inv.cluster(name).servers if n != writer)[0]  # as run_scenario picks it
    small = SmallDatadir(cluster.boxes, name, candidate)
    try:
        with small:
            deadline = time.monotonic() + 60
            while not health.check(inv, name, checksums=False).healthy:
                if time.monotonic() > deadline:
                    raise DiskFaultError(f"{candidate} did not replicate again on its small datadir")
                time.sleep(0.5)
            say(f"{sc.id}: {candidate}'s datadir on a {small.size_mb} MB tmpfs, {small.free_bytes() >> 20} MB free")
            cluster.small_disk = small
            r = run_scenario(cluster, sc, say, after_exit_s=after_exit_s)
            r.details["disk_filled_bytes"] = small.filled_peak
            return r
    except DiskFaultError as e:
        r = Result(sc.id, sc.fast)
        r.problems.append(e.message)
        return r
    finally:
        cluster.small_disk = None
        cluster.up_and_healthy = False  # rebuilt for the next row
