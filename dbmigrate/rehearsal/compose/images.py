"""The rehearsal's images, built where no container registry is reachable.

A Debian bookworm base comes from Debian's own packages (`debootstrap
--variant=minbase`), is kept as a tarball under DBMIGRATE_HOME and imported
into the engine; the MariaDB and HAProxy images are then built on it from the
Dockerfiles under compose/ (`docker build --network host`: apt inside the build
reaches Debian's mirror). Each image is tagged with a hash of its Dockerfile and
files, so an unchanged image is never rebuilt. A failed build leaves no
container and no dangling layer of ours behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dbmigrate.exceptions import SandboxError
from dbmigrate.rehearsal.compose.engine import Engine, docker_root

BASE_IMAGE = "dbmigrate/debian-base:bookworm"
SUITE = "bookworm"
LABEL = "org.dbmigrate.image"
BUILD_TIMEOUT_S = 900
Progress = Callable[[str], None]


def project_root() -> Path:
    """The source tree that holds docker-compose.yml and compose/ (the rehearsal runs from it)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "docker-compose.yml").exists() or not (root / "compose").is_dir():
        raise SandboxError(f"compose rehearsals need docker-compose.yml and compose/ beside the package, "
                           f"not found under {root}",
                           hint="run dbmigrate from its source tree (pip install -e .)")
    return root


@dataclass(frozen=True)
class Images:
    mariadb: str
    haproxy: str
    built_s: dict[str, float]


def mirror() -> str:
    """The Debian mirror for the base and the builds (DBMIGRATE_DEBIAN_MIRROR; empty: Debian's default)."""
    return os.environ.get("DBMIGRATE_DEBIAN_MIRROR", "").strip()


def ensure_images(engine: Engine, progress: Progress | None = None) -> Images:
    """The MariaDB and HAProxy images on `engine`, built now if missing."""
    say = progress or (lambda m: None)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    if not _exists(engine, BASE_IMAGE):
        ensure_base(engine, say)
        timings["base_s"] = round(time.monotonic() - t0, 1)
    compose_dir = project_root() / "compose"
    tags = {}
    for name in ("mariadb", "haproxy"):
        ctx = compose_dir / name
        tag = f"dbmigrate/{name}:{_content_hash(ctx)}"
        if not _exists(engine, tag):
            t = time.monotonic()
            say(f"building image {tag} from Debian's packages")
            build(engine, ctx, tag)
            timings[f"{name}_s"] = round(time.monotonic() - t, 1)
            say(f"built {tag} in {timings[f'{name}_s']:.1f}s")
        tags[name] = tag
    return Images(tags["mariadb"], tags["haproxy"], timings)


def ensure_base(engine: Engine, say: Progress) -> None:
    tarball = docker_root() / "cache" / f"debian-{SUITE}-minbase.tar"
    if not tarball.exists():
        _debootstrap(tarball, say)
    t = time.monotonic()
    with open(tarball, "rb") as f:
        res = subprocess.run(engine.argv("import", "-", BASE_IMAGE), stdin=f, capture_output=True,
                             env=engine.env(), timeout=300)
    if res.returncode != 0:
        raise SandboxError(f"docker import of the base image failed: {_last(res.stderr)}",
                           hint=f"remove {tarball} to make it again")
    say(f"imported {BASE_IMAGE} ({time.monotonic() - t:.1f}s)")


def _debootstrap(tarball: Path, say: Progress) -> None:
    debootstrap = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin")
    if not debootstrap:
        raise SandboxError("debootstrap is not installed: it makes the base image from Debian's packages",
                           hint="run ./scripts/setup --compose (or apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise SandboxError("making the base image with debootstrap needs root",
                           hint="run the first compose rehearsal as root, or import a Debian base image as "
                                f"{BASE_IMAGE} yourself")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=tarball.parent))
    t = time.monotonic()
    say(f"making a Debian {SUITE} base with debootstrap (once; cached in {tarball.parent})")
    try:
        argv = [debootstrap, "--variant=minbase", SUITE, str(work / "root")] + ([mirror()] if mirror() else [])
        res = subprocess.run(argv, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            log = (work / "root" / "debootstrap" / "debootstrap.log")
            detail = _last((log.read_text(errors="replace") if log.exists() else "") + res.stderr + res.stdout)
            raise SandboxError(f"debootstrap could not make the base image (is a Debian mirror reachable?): {detail}",
                               hint="check the network or set DBMIGRATE_DEBIAN_MIRROR to a reachable mirror")
        part = tarball.with_suffix(".part")
        res = subprocess.run(["tar", "-C", str(work / "root"), "-cf", str(part), "."], capture_output=True,
                             text=True, timeout=300)
        if res.returncode != 0:
            part.unlink(missing_ok=True)
            raise SandboxError(f"packing the base image failed: {_last(res.stderr)}")
        part.replace(tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"debootstrap {SUITE} minbase in {time.monotonic() - t:.1f}s")


def build(engine: Engine, context: Path, tag: str) -> None:
    argv = engine.argv("build", "--network", "host", "--rm", "--force-rm", "-q", "--build-arg",
                       f"BASE={BASE_IMAGE}", "--build-arg", f"DEBIAN_MIRROR={mirror()}", "-t", tag, str(context))
    try:
        res = subprocess.run(argv, capture_output=True, text=True, env=engine.env(), timeout=BUILD_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        remove_build_leftovers(engine)
        raise SandboxError(f"building {tag} did not finish within {BUILD_TIMEOUT_S} s",
                           hint="check the network to Debian's mirror") from None
    if res.returncode != 0:
        remove_build_leftovers(engine)
        detail = _last("\n".join(ln for ln in res.stderr.splitlines() if "DEPRECATED" not in ln
                                 and "BuildKit" not in ln and "environment-variable" not in ln))
        raise SandboxError(f"building image {tag} failed (is Debian's mirror reachable from here?): {detail}",
                           hint="check the network to Debian's mirror, or set DBMIGRATE_DEBIAN_MIRROR")


def build_leftovers(engine: Engine) -> list[str]:
    """Containers and dangling images a build of ours left (none must remain)."""
    found = []
    ps = engine.run("ps", "-a", "--filter", f"label={LABEL}", "--format",
                    "{{.ID}} {{.Image}} {{.Label \"com.docker.compose.project\"}}",
                    check=False).stdout.decode(errors="replace").split("\n")
    # A container of ours without a compose project is a build's.
    found += [f"build container {line.split()[0]}" for line in ps if len(line.split()) == 2]
    dangling = engine.run("images", "-q", "--filter", "dangling=true", "--filter", f"label={LABEL}",
                          check=False).stdout.decode(errors="replace").split()
    found += [f"dangling image {i}" for i in dangling]
    return found


def remove_build_leftovers(engine: Engine) -> None:
    engine.run("image", "prune", "-f", "--filter", f"label={LABEL}", check=False, timeout=120)


def _exists(engine: Engine, ref: str) -> bool:
    return engine.run("image", "inspect", "--format", "{{.Id}}", ref, check=False).returncode == 0


def _content_hash(context: Path) -> str:
    h = hashlib.sha256(mirror().encode())
    for p in sorted(context.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(context).as_posix().encode() + b"\0")
            h.update(p.read_bytes())
            h.update(b"\0x" if os.access(p, os.X_OK) else b"\0-")
    return h.hexdigest()[:12]


def _last(text: str | bytes, lines: int = 2) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    rows = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(rows[-lines:]) or "(no output)"
