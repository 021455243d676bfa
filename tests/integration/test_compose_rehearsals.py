"""Compose rehearsals against real containers: docker-compose.yml started on a Docker Engine
(the rehearsal's own when none runs), images built from Debian's packages (once per test
session), every server a container reached through the `docker` access kind.

After every rehearsal, test and failure case, no container, network, volume, build leftover
or engine process of the run may remain: `no_leftovers` checks the processes after each test,
and the session's end checks the engine's own lists."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests" / "fixtures" / "shapes" / "ca-capture"

pytestmark = pytest.mark.integration


def _engine_can_run() -> str | None:
    if not (shutil.which("dockerd") or os.path.exists("/usr/sbin/dockerd")) or not shutil.which("docker"):
        return "docker.io is not installed (./scripts/setup --compose installs it)"
    if not shutil.which("debootstrap") and not os.path.exists("/usr/sbin/debootstrap"):
        return "debootstrap is not installed (./scripts/setup --compose installs it)"
    if os.geteuid() != 0 and not os.environ.get("DOCKER_HOST"):
        return "no DOCKER_HOST and not root: no engine can be started"
    return None


def _engine_processes(home: Path) -> list[str]:
    """dockerd, containerd and shims whose command line names the test session's engine roots."""
    marks = [str(home / "docker")]
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in marks) and "pytest" not in cmd:
            found.append(f"{p.name} {cmd[:120]}")
    return found


def _engine_lists(engine) -> list[str]:
    """Everything a run could leave in the engine: containers, volumes and networks of a compose
    project of ours (dbm-NAME), build containers and dangling image layers. On an engine that
    was already running, nothing else in it is ours to judge."""
    from dbmigrate.rehearsal.compose.images import build_leftovers

    project = '{{.Label "com.docker.compose.project"}}'
    rows = [line.split() for line in engine.text("ps", "-a", "--format", "{{.Names}} " + project).splitlines()]
    left = [f"container {r[0]}" for r in rows if len(r) == 2 and r[1].startswith("dbm-")]
    for kind in ("volume", "network"):
        rows = [line.split() for line in engine.text(kind, "ls", "--format", "{{.Name}} " + project).splitlines()]
        left += [f"{kind} {r[0]}" for r in rows if len(r) == 2 and r[1].startswith("dbm-")]
    return left + build_leftovers(engine)


def _left_in_the_engine() -> list[str]:
    from dbmigrate.rehearsal.compose.engine import acquire

    engine = acquire()
    try:
        return _engine_lists(engine)
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def compose_images(dbm_home):
    """The engine (the rehearsal's own when none runs) and the images, built once per session;
    at the session's end, nothing of any run may be left in the engine."""
    why = _engine_can_run()
    if why:
        pytest.skip(why)
    from dbmigrate.rehearsal.compose.engine import acquire
    from dbmigrate.rehearsal.compose.images import ensure_images

    engine = acquire()
    try:
        images = ensure_images(engine)
    finally:
        engine.stop()
    assert not _engine_processes(dbm_home)
    yield images
    left = _left_in_the_engine()
    assert left == [], f"left in the engine by the compose tests: {left}"
    assert not _engine_processes(dbm_home)


def _proc(pid: str, what: str) -> str:
    try:
        return (Path("/proc") / pid / what).read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _container_servers(home: Path) -> set[int]:
    """mariadbd processes in a container (another mount namespace) of this session's engine, or
    left without any engine (their shim gone): the compose file's servers and the instances
    provisioned into target host containers alike. Another engine's containers are not ours."""
    try:
        own_ns = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return set()
    found = set()
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or _proc(p.name, "comm") != "mariadbd":
            continue
        try:
            if os.readlink(p / "ns/mnt") == own_ns:
                continue  # a sandbox's server, not a container's
        except OSError:
            continue
        pid, ours = p.name, True
        while pid not in ("0", "1", ""):
            if _proc(pid, "comm").startswith("containerd-shim"):
                ours = str(home / "docker") in _proc(pid, "cmdline")
                break
            stat = _proc(pid, "stat")
            pid = stat.rsplit(")", 1)[-1].split()[1] if ")" in stat else ""
        if ours:
            found.add(int(p.name))
    return found


@pytest.fixture
def no_leftovers(compose_images, dbm_home):
    """After the test (passed or not): no engine process, no server process of a container, no
    topology directory of the run, and no container, volume, network or build leftover of ours
    in the engine."""
    before = _container_servers(dbm_home)
    yield dbm_home
    procs = _engine_processes(dbm_home) + [f"{pid} mariadbd of a container" for pid in
                                           sorted(_container_servers(dbm_home) - before)]
    topologies = list((dbm_home / "compose").glob("*/topology.json")) if (dbm_home / "compose").exists() else []
    for t in topologies:  # a failed test must not leave its topology to the next one
        from dbmigrate.rehearsal.compose.run import teardown

        try:
            teardown(t.parent.name)
        except Exception as e:  # noqa: BLE001 - reported below
            print(f"teardown of {t.parent.name} failed: {e}")
    for line in procs:
        os.kill(int(line.split()[0]), 9)
    in_engine = _left_in_the_engine() if not procs else ["(not listed: engine processes were left)"]
    assert procs == [] and topologies == [] and in_engine == [], f"left behind: {procs} {topologies} {in_engine}"


def _result(stdout: str) -> dict:
    records = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    results = [r for r in records if r.get("record") == "result"]
    assert results, stdout[-2000:]
    return results[0]["result"]


def _passed(r) -> None:
    """Exit 0, or a failure that says why in full: the run's steps and gates as journaled (pytest
    would cut a long assertion message short)."""
    if r.returncode == 0:
        return
    try:
        detail = run_cli("runs", "show", _result(r.stdout)["run_id"]).stdout[-5000:]
    except Exception as e:  # noqa: BLE001 - the run may have ended before its playbook started
        detail = f"(no run to show: {e})"
    pytest.fail(f"exit {r.returncode}: {r.stderr.strip()[-1500:]}\n{detail}", pytrace=False)


def test_promote_rehearsal_in_containers_loses_nothing(no_leftovers):
    r = run_cli("rehearse", "promote", "--compose", "--no-guard", "--load-seconds", "2", "--json", timeout=480)
    _passed(r)
    rep = _result(r.stdout)
    assert rep["lost_writes"] == 0 and rep["acknowledged_writes"] > 50
    assert rep["run_status"] == "done" and rep["new_primary"] == rep["candidate"]
    assert rep["old_primary_replicating"]
    c = rep["compose"]
    assert len({s["address"] for s in c["servers"].values()}) == 4  # a host (address, container) each
    assert all(s["address"].endswith(":3306") for s in c["servers"].values())
    assert c["haproxy"]["address"] not in {s["address"].split(":")[0] for s in c["servers"].values()}


def _classes_served(classes) -> None:
    """Every replayed class of the fixture capture ran before and after, without an error."""
    assert len(classes) == 7, classes
    for c in classes:
        assert c["before"]["count"] > 0 and c["after"]["count"] > 0, c
        assert not c["before"]["errors"] and not c["after"]["errors"], c


def test_promote_rehearsal_in_containers_with_a_captured_shape(no_leftovers):
    """The fixture capture loaded through the compose topology's root login (schema, rows,
    accounts, the role and the PROXY grant), its classes replayed by the pooled client through
    the HAProxy container across the promote: 0 lost, the per-class table printed."""
    r = run_cli("rehearse", "promote", "--compose", "--shape", str(CAPTURE), "--scale", "0.02", "--no-guard",
                "--load-seconds", "2", timeout=480)
    out = r.stdout
    assert r.returncode == 0, r.stderr[-2000:] + out[-3000:]
    assert re.search(r"acknowledged writes: [1-9]\d*, lost: 0; run \S+ done", out), out[-2000:]
    assert "1 role(s) with 2 role grant(s), 1 PROXY grant(s)" in out, out[-4000:]
    assert "captured query classes, replayed" in out
    rows = [line for line in out.splitlines() if line.startswith("│") and ("ca_app" in line or "ca_ocsp" in line)]
    assert len(rows) == 7, out[-4000:]
    for line in rows:
        assert re.search(r"│\s*[1-9]\d* -> [1-9]\d*\s*│", line), line  # ran before and after the promote
        assert re.search(r"│ 0 -> 0\s*│", line), line  # no class failed before or after
    assert "long_query_time=11.2" in out  # the pool's own settings, read back from the container


def test_schema_swap_rehearsal_in_containers_with_a_captured_shape(no_leftovers):
    r = run_cli("rehearse", "schema-swap", "--compose", "--shape", str(CAPTURE), "--scale", "0.02", "--rows", "500",
                "--json", timeout=480)
    _passed(r)
    rep = _result(r.stdout)
    assert rep["run_status"] == "done" and rep["lost_writes"] == 0 and rep["primary_back"]
    assert rep["shape"]["roles"] == ["ca_reader"] and rep["shape"]["proxy_grants"] == 1
    _classes_served(rep["classes"])


def test_regression_is_rolled_back_with_windows_read_through_docker_exec(no_leftovers):
    r = run_cli("rehearse", "promote", "--compose", "--regress", "--load-seconds", "2", "--json", timeout=480)
    _passed(r)
    rep = _result(r.stdout)
    assert rep["lost_writes"] == 0 and rep["rolled_back"] and rep["guard"]["rollback"]
    assert rep["digest"] and rep["guard_windows"]
    execs = rep["compose"]["docker_execs"]
    old = rep["compose"]["servers"][f"{rep['sandbox']}-1"]["container"]
    new = rep["compose"]["servers"][rep["candidate"]]["container"]
    # The baseline window on the old primary and the guard's windows on the candidate were
    # opened, read and removed inside their containers: their paths exist nowhere else.
    assert execs[old] >= 1 and execs[new] >= 2, execs
    assert rep["guard_windows"][-1]["queries"] > 0  # the window read in the container held the load's queries


def test_consolidation_provisions_into_host_containers_and_loses_nothing_kept_until_down(no_leftovers, compose_images):
    """4 old servers in containers, 2 target hosts that are empty containers: the instances are
    provisioned into those (Ansible through docker exec), seeded physically (mariadb-backup from
    container to container), cut over under the shard writers; --keep leaves it all up until
    `rehearse down` removes it."""
    name = "consol-compose"
    r = run_cli("rehearse", "consolidate", "--compose", "--rows", "100", "--keep", "--name", name, "--json",
                "--shape", str(CAPTURE), "--scale", "0.02", timeout=600)
    try:
        _passed(r)
        rep = _result(r.stdout)
        assert rep["run_status"] == "done" and rep["ok"]
        assert rep["lost_writes"] == 0 and rep["acknowledged_writes"] > 100
        assert rep["misrouted_shards"] == 0 and rep["checksum_differences"] == 0
        c = rep["compose"]
        hosts = {h["address"]: h["container"] for h in c["hosts"].values()}
        assert len(hosts) == 2 and not set(hosts) & {s["address"].split(":")[0] for s in c["servers"].values()}
        for sh, s in rep["shards"].items():  # every shard was served by its new instance, in a host container
            inst = rep["instances"][s["instance"]]
            assert inst["address"].split(":")[0] in hosts, inst
            assert s["acked_on_new"] > 0 and s["lost"] == 0 and s["served_by"] == s["expected"], (sh, s)
            if s["moved"]:  # all but the old server rolled back on purpose
                assert s["served_by"] == inst["address"], (sh, s)
        assert len(rep["seeds"]) == 4 and all(v["method"] == "physical" for v in rep["seeds"].values())
        # Provisioning and seeding reached the hosts' and old servers' files only through docker exec.
        assert all(c["docker_execs"][ctr] > 0 for ctr in hosts.values()), c["docker_execs"]
        assert all(c["docker_execs"][s["container"]] > 0 for s in c["servers"].values()), c["docker_execs"]
        assert any(f"dbmigrate rehearse down {name}" in line for line in c["kept"])
        assert (no_leftovers / "compose" / name / "topology.json").exists()  # kept: still there
        # The shape, loaded through the first old container's root login, is a shard of its own;
        # its classes ran before and after the cutover without an error.
        assert rep["shape"]["roles"] == ["ca_reader"] and rep["shape"]["proxy_grants"] == 1
        assert "ca" in rep["shards"] and rep["shards"]["ca"]["lost"] == 0
        _classes_served(rep["classes"])
    finally:
        down = run_cli("rehearse", "down", name)
    assert down.returncode == 0, down.stderr[-1500:]


def test_consolidation_refuses_a_taken_target_host_port_before_anything_starts(no_leftovers):
    with socket.socket() as s:
        s.bind(("127.61.91.22", 3307))  # target host h2's second instance
        s.listen()
        r = run_cli("rehearse", "consolidate", "--compose", env={"DBMIGRATE_COMPOSE_ADDRESSES": "127.61.91"})
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert "127.61.91.22:3307 is already taken" in err[0] and "DBMIGRATE_COMPOSE_ADDRESSES" in r.stderr


def _ci_commands(path: Path) -> list[str]:
    doc = yaml.safe_load(path.read_text())
    if "jobs" in doc:  # GitHub Actions: the `run:` steps, in order
        steps = next(iter(doc["jobs"].values()))["steps"]
        return [line for s in steps if "run" in s for line in s["run"].strip().splitlines()]
    job = next(v for k, v in doc.items() if isinstance(v, dict) and "script" in v)
    return [*job.get("before_script", []), *job["script"]]


def test_the_ci_files_run_one_command_list():
    gh = _ci_commands(ROOT / "docs/ci/github-actions.yml")
    gl = _ci_commands(ROOT / "docs/ci/gitlab-ci.yml")
    assert gh == gl and gh[0] == "./scripts/setup --compose"
    assert any("rehearse schema-swap --compose --yes --json --report" in c for c in gh)


def test_the_ci_files_commands_pass_here(no_leftovers, tmp_path):
    """Exactly the commands of docs/ci/, in their order, as the CI shell runs them (each must
    exit 0; the job fails on the first that does not), from the repository's root."""
    commands = _ci_commands(ROOT / "docs/ci/github-actions.yml")
    out_dir = ROOT / "rehearsal"
    shutil.rmtree(out_dir, ignore_errors=True)
    try:
        for command in commands:
            r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=ROOT, capture_output=True,
                               text=True, timeout=900, env=dict(os.environ))
            assert r.returncode == 0, (command, r.stdout[-1500:], r.stderr[-2500:])
        lines = (out_dir / "result.jsonl").read_text().splitlines()
        rep = _result("\n".join(lines))
        assert rep["run_status"] == "done" and rep["lost_writes"] == 0 and rep["primary_back"]
        assert rep["altered"] and all(rep["altered"].values()) and len(rep["altered"]) == 3
        summary = json.loads(lines[-1])
        assert summary["record"] == "summary" and summary["exit_code"] == 0
        html = out_dir / "schema-swap.html"
        assert html.exists() and "<html" in html.read_text()[:2000].lower()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


# -- bad input: one line, nothing left ------------------------------------------------------------

def test_a_taken_address_is_refused_before_anything_starts(no_leftovers, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.61.90.13", 3306))
        s.listen()
        r = run_cli("rehearse", "promote", "--compose", env={"DBMIGRATE_COMPOSE_ADDRESSES": "127.61.90"})
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert "127.61.90.13:3306 is already taken" in err[0] and "DBMIGRATE_COMPOSE_ADDRESSES" in r.stderr


def test_a_container_that_exits_at_start_up_shows_its_last_log_lines(no_leftovers, monkeypatch):
    """Two servers given one address (as when another process takes it after the check): the
    second mariadbd cannot bind and exits; its own last log lines are the error."""
    from dbmigrate.exceptions import SandboxError
    from dbmigrate.rehearsal.compose import run as compose_run
    from dbmigrate.rehearsal.compose import topology

    picked = topology.pick_addresses(("db1",))
    same = {"db1": picked["db1"], "db2": picked["db1"], "haproxy": picked["haproxy"]}
    monkeypatch.setattr(topology, "pick_addresses", lambda services: same)
    with pytest.raises(SandboxError) as e:
        compose_run.ComposeRun("exits-early", {"exits-early-1": "db1", "exits-early-2": "db2"}).up()
    assert "exited during start-up" in e.value.message and "docker logs" in e.value.hint
    assert "Address already in use" in e.value.message or "Aborting" in e.value.message, e.value.message


def test_an_image_build_without_a_mirror_fails_clearly(no_leftovers, compose_images):
    r = run_cli("rehearse", "promote", "--compose", timeout=300,
                env={"DBMIGRATE_DEBIAN_MIRROR": "http://127.0.0.1:9/debian"})
    assert r.returncode != 0
    assert "building image dbmigrate/" in r.stderr and "mirror" in r.stderr, r.stderr[-1500:]


def test_a_kept_topology_is_named_until_removed_even_after_its_engine_died(no_leftovers, compose_images):
    from dbmigrate.exceptions import UsageError
    from dbmigrate.rehearsal.compose.run import ComposeRun

    kept = ComposeRun("kept-one", {"kept-one-1": "db1"}, keep=True).up()
    try:
        assert kept.engine.version
        with pytest.raises(UsageError) as e:
            ComposeRun("another", {"another-1": "db1"}).up()
        assert "kept-one" in e.value.message and "dbmigrate rehearse down kept-one" in e.value.hint
        if kept.engine.owned:  # the run's own engine dies hard: its containers must still go, and their processes
            os.kill(kept.engine.pid, 9)
    finally:
        r = run_cli("rehearse", "down", "kept-one")
    assert r.returncode == 0, r.stderr[-1500:]
    assert "removed compose topology kept-one" in r.stdout
