"""One compose rehearsal's topology, with the engine and images under it.

`ComposeRun.up()` finds or starts the engine, builds the images if missing and
starts the topology; `down()` removes the topology and stops an engine the run
started. A rehearsal calls `down()` in its `finally`, so nothing of the run
outlives it unless `--keep` asked for it; `teardown(NAME)` removes a kept one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from dbmigrate.exceptions import SandboxError, UsageError
from dbmigrate.hosts.docker import exec_counts

Progress = Callable[[str], None]


class ComposeRun:
    def __init__(self, name: str, servers: dict[str, str], *, progress: Progress | None = None, keep: bool = False,
                 hosts: tuple[str, ...] = (), standalone: bool = False, router: bool = True):
        """`servers`: inventory name -> compose service (see ComposeTopology.up); `hosts`: empty
        target hosts to start too; `standalone`: no replication, each server a primary of its own;
        `router`: HAProxy in front."""
        self.name, self.servers, self.keep = name, dict(servers), keep
        self.hosts, self.standalone, self.router = tuple(hosts), standalone, router
        self.say = progress or (lambda m: None)
        self.engine = self.topology = self.state = self.images = None
        self._execs_before: dict[str, int] = {}
        self.timings: dict[str, float] = {}

    def up(self) -> "ComposeRun":
        from dbmigrate.rehearsal.compose.engine import acquire
        from dbmigrate.rehearsal.compose.images import ensure_images, project_root
        from dbmigrate.rehearsal.compose.topology import (SERVICES, ComposeTopology, pick_addresses, refuse_kept,
                                                          topologies_dir)

        project_root()
        refuse_kept()  # before an engine is started or an image built
        if (topologies_dir() / self.name).exists():
            raise UsageError(f"a compose topology named {self.name} exists at {topologies_dir() / self.name}",
                             hint=f"choose another --name, or remove it: dbmigrate rehearse down {self.name}")
        addresses = pick_addresses(SERVICES)  # a taken address is refused before anything starts
        t0 = time.monotonic()
        self.engine = acquire(self.say)
        try:
            self.timings["engine_s"] = round(time.monotonic() - t0, 1)
            t = time.monotonic()
            self.images = ensure_images(self.engine, self.say)
            self.timings["images_s"] = round(time.monotonic() - t, 1)
            self.topology = ComposeTopology(self.engine, self.images, self.say)
            self._execs_before = exec_counts()
            self.state = self.topology.up(self.name, self.servers, keep=self.keep, addresses=addresses,
                                          hosts=self.hosts, standalone=self.standalone, router=self.router)
            self.timings.update(self.state.timings)
        except BaseException:
            self.engine.stop()
            raise
        return self

    # -- what a rehearsal needs of its topology -----------------------------------------
    @property
    def inventory_file(self) -> Path:
        return self.state.inventory_file

    @property
    def path(self) -> Path:
        return self.state.path

    def pid(self, name: str) -> int | None:
        return self.topology.pid(self.state, name)

    def root_server(self, name: str):
        """The compose root login of server `name` (a Server handle, for statements through db/)."""
        return self.topology.root_server(self.state, name)

    def host(self, service: str) -> tuple[str, str]:
        """A target host's (address, container)."""
        return self.state.addresses[service], self.state.containers[service]

    def facts(self) -> dict[str, Any]:
        """How the topology ran: engine, Compose, images, addresses, and the programs the tool ran in
        each container (the only way it reached the servers' files)."""
        after = exec_counts()
        containers = set(self.state.containers.values())
        return {
            "engine": {"address": self.engine.address, "version": self.engine.version,
                       "started_by_the_run": self.engine.owned},
            "compose": self.topology.cli.describe(),
            "images": {"mariadb": self.images.mariadb, "haproxy": self.images.haproxy,
                       "built_s": self.images.built_s},
            "project": self.state.project,
            "servers": {n: {"address": f"{self.state.addresses[s]}:3306", "container": self.state.containers[s]}
                        for n, s in self.state.servers.items()},
            "haproxy": ({"address": self.state.addresses["haproxy"], "writer_port": 3306, "reader_port": 3307,
                         "container": self.state.containers.get("haproxy")} if self.state.router else None),
            "hosts": {h: {"address": self.state.addresses[h], "container": self.state.containers[h]}
                      for h in self.state.hosts},
            "docker_execs": {c: after.get(c, 0) - self._execs_before.get(c, 0) for c in sorted(containers)},
            "timings": dict(self.timings),
            "kept": self.how_to_reach() if self.keep else [],
        }

    def how_to_reach(self) -> list[str]:
        s = self.state
        lines = [f"inventory: {s.inventory_file} (credentials in {s.credentials_file})",
                 f"engine: DOCKER_HOST={s.engine_address} docker ps --filter label=com.docker.compose.project="
                 f"{s.project}"]
        lines += [f"{n}: mariadb --defaults-file={s.credentials_file} --defaults-group-suffix=-admin "
                  f"-h {s.addresses[svc]} -P 3306 (container {s.containers.get(svc)})" for n, svc in s.servers.items()]
        lines += [f"host {h}: container {s.containers.get(h)} on {s.addresses[h]} (its instances listen there; "
                  f"a shell: DOCKER_HOST={s.engine_address} docker exec -it {s.containers.get(h)} sh)" for h in s.hosts]
        lines.append(f"remove it: dbmigrate rehearse down {s.name}")
        return lines

    # -- the end --------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Remove the topology and stop an engine the run started; returns what remains (must be nothing)."""
        left: list[str] = []
        try:
            if self.topology is not None and self.state is not None:
                left = self.topology.down(self.state)
            if self.engine is not None and self.images is not None:
                from dbmigrate.rehearsal.compose.images import build_leftovers

                left += build_leftovers(self.engine)
        finally:
            if self.engine is not None:
                self.engine.stop()
                left += [f"engine process {pid} {cmd[:80]}" for pid, cmd in self.engine.processes()]
        return left


def teardown(name: str, progress: Progress | None = None) -> list[str]:
    """Remove a topology kept by `--keep`, and the engine it kept running if the run had started it."""
    from dbmigrate.rehearsal.compose.engine import Engine, answers, docker_root
    from dbmigrate.rehearsal.compose.images import Images
    from dbmigrate.rehearsal.compose.topology import ComposeTopology, TopologyState, topologies_dir

    path = topologies_dir() / name
    if not (path / "topology.json").exists():
        known = [p.parent.name for p in topologies_dir().glob("*/topology.json")]
        raise UsageError(f"no compose topology named {name}", hint=f"known: {', '.join(known) or 'none'}")
    state = TopologyState.load(path)
    engine = Engine(state.engine_address, owned=False)
    if state.engine_owned:
        try:
            rec = json.loads((docker_root() / "engine.json").read_text())
        except (OSError, ValueError):
            rec = {}
        if rec.get("address") == state.engine_address:
            engine = Engine(state.engine_address, owned=True, pid=rec.get("pid"),
                            data_root=Path(rec["data_root"]), exec_root=Path(state.engine_address[7:]).parent)
    if not answers(engine.address):
        if not state.engine_owned:
            raise SandboxError(f"the Docker Engine of {name} ({state.engine_address}) does not answer",
                               hint="start it again, then retry")
        # The run's own engine is gone (the run was killed): its containers are still in the
        # data-root, so an engine is started on it again to remove them.
        from dbmigrate.rehearsal.compose.engine import acquire

        engine.stop()
        engine = acquire(progress)
    topology = ComposeTopology(engine, Images("", "", {}), progress)
    try:
        left = topology.down(state)
    finally:
        engine.stop()
    if left:
        raise SandboxError(f"could not remove {', '.join(left)}")
    return left
