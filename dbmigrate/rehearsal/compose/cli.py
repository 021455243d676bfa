"""Which Compose runs docker-compose.yml: v2 where it works with the engine, else v1.

Order: DBMIGRATE_COMPOSE (a command line, e.g. "docker compose"), then the
`docker compose` plugin, then a `docker-compose` next to the Python that runs
dbmigrate (scripts/setup --compose builds Compose v2 there from its Go module), then
Debian's `docker-compose` 1.29. The file is valid for both.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dbmigrate.exceptions import SandboxError
from dbmigrate.rehearsal.compose.engine import Engine, docker_binary
from dbmigrate.rehearsal.compose.images import project_root


@dataclass(frozen=True)
class ComposeCli:
    argv: list[str]
    version: str

    @property
    def major(self) -> int:
        v = self.version.lstrip("v")
        return int(v.split(".")[0]) if v[:1].isdigit() else 0

    def describe(self) -> str:
        return f"Compose {self.version} ({' '.join(Path(self.argv[0]).name if i == 0 else a for i, a in enumerate(self.argv))})"

    @classmethod
    def find(cls, engine: Engine) -> "ComposeCli":
        tried = []
        for argv in _candidates():
            version = _version(argv, engine)
            if version:
                return cls(argv, version)
            tried.append(" ".join(argv))
        raise SandboxError("no Docker Compose found (tried: " + "; ".join(tried) + ")",
                           hint="run ./scripts/setup --compose (builds Compose v2, or installs Debian's docker-compose)")

    def command(self, project: str, args: list[str], overrides: tuple[Path, ...] = ()) -> list[str]:
        """`overrides`: compose files merged over docker-compose.yml, in order."""
        root = project_root()
        files = [a for f in overrides for a in ("-f", str(f))]
        return [*self.argv, "-f", str(root / "docker-compose.yml"), *files, "-p", project, "--project-directory",
                str(root), *args]

    def run(self, project: str, args: list[str], env: dict[str, str], *, what: str, check: bool = True,
            timeout: float = 300, overrides: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
        argv = self.command(project, args, overrides)
        try:
            res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=project_root(),
                                 timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SandboxError(f"{what} did not finish within {timeout:g} s",
                               hint="see docker ps -a and the containers' logs") from None
        if check and res.returncode != 0:
            lines = [ln.strip() for ln in res.stderr.strip().splitlines() if ln.strip()]
            raise SandboxError(f"{what} failed: {' | '.join(lines[-2:]) or f'exit {res.returncode}'}")
        return res


def _candidates() -> list[list[str]]:
    forced = os.environ.get("DBMIGRATE_COMPOSE", "").strip()
    if forced:
        return [shlex.split(forced)]
    out = [[docker_binary(), "compose"]]
    beside = Path(sys.executable).parent / "docker-compose"
    if beside.exists():
        out.append([str(beside)])
    system = shutil.which("docker-compose")
    if system and Path(system) != beside:
        out.append([system])
    return out


def _version(argv: list[str], engine: Engine) -> str | None:
    try:
        res = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True, timeout=20,
                             env=engine.env(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = res.stdout.strip().splitlines()
    return out[0].strip() if res.returncode == 0 and out else None
