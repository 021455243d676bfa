#!/usr/bin/env python3
"""Start-up benchmark: how soon the `dbmigrate` command is useful after exec.

- `dbmigrate --version`: wall time of the whole process, N times.
- `dbmigrate run PLAYBOOK --dry-run --yes`: from exec to the first statement the servers
  receive, as the servers log it (general log to a table, microsecond timestamps, same
  machine clock), on a sandbox of one primary and one replica; and the whole dry run's wall time.
- the modules each command imports (a heavy one, Textual, the sandbox, the digest, appearing
  where it is not needed would show here first).

Every run uses cached compiled modules, as an installed package does (a private cache
directory, filled by a first run that is not counted).

Targets on an idle machine: --version <= 0.2 s, first statement <= 0.3 s. The machine's load
average is printed beside the figures: on a loaded machine every figure grows with it.

    python bench/startup.py [--runs 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

TARGET_VERSION_S, TARGET_FIRST_STATEMENT_S = 0.2, 0.3


def installed_env() -> dict[str, str]:
    """The environment of an installed tool: compiled modules cached (here in a private prefix,
    warmed by the first run), as pip leaves them; not compiled from source on every start."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(os.environ["DBMIGRATE_HOME"]) / "pycache")
    return env


def dbmigrate_cmd() -> list[str]:
    """`dbmigrate` as `python -m dbmigrate` with this interpreter: the code under test's own entry
    point, whatever an installed script's interpreter line or entry point says (an editable install
    made elsewhere, or from another commit)."""
    return [sys.executable, "-m", "dbmigrate"]


def stats(values: list[float]) -> dict:
    v = sorted(values)
    return {"n": len(v), "min": round(v[0], 3), "p50": round(statistics.median(v), 3), "max": round(v[-1], 3)}


def timed(args: list[str]) -> tuple[float, float, int, str]:
    """Wall time, CPU time (user + system, the process alone: what a loaded machine does not
    inflate as much), exit code and output of one run of the command."""
    t0 = time.perf_counter()
    p = subprocess.Popen(dbmigrate_cmd() + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=installed_env())
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, p.returncode, out


def time_version(runs: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    timed(["--version"])
    for _ in range(runs):
        wall, cpu, code, out = timed(["--version"])
        if code != 0:
            raise SystemExit(f"dbmigrate --version failed: {out}")
        walls.append(wall)
        cpus.append(cpu)
    return walls, cpus


def imported_modules(command: list[str]) -> int:
    """How many modules the process holds once the command is built (Python's own included)."""
    code = ("import sys; from dbmigrate.cli.root import build; "
            f"build({command!r}); print(len(sys.modules), 'textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=installed_env()).stdout.split()
    return int(out[0])


def first_statements(runs: int, say) -> tuple[list[float], list[float]]:
    from dbmigrate.config import load_inventory
    from dbmigrate.rehearsal.sandbox.manager import Sandboxes

    boxes = Sandboxes()
    name = f"start{os.getpid() % 10000}"
    state = boxes.up(name, 1)
    try:
        inv = load_inventory(state.inventory_file)
        servers = {n: inv.open(n) for n in inv.cluster(name).servers}
        for s in servers.values():
            s.execute("SET SESSION sql_log_bin = 0")  # the bench's TRUNCATE must not become an errant GTID
            s.execute("SET GLOBAL log_output = 'TABLE'")
            s.execute("SET GLOBAL general_log = 1")
        doc = {"procedure": "promote", "inventory": str(state.inventory_file), "cluster": name,
               "params": {"candidate": f"{name}-2"}}
        pb = state.path / "startup.yaml"
        pb.write_text(yaml.safe_dump(doc, sort_keys=False))
        firsts, walls, cpus = [], [], []
        for i in range(-1, runs):  # run -1 fills the cache of compiled modules and is not counted
            for s in servers.values():
                s.execute("TRUNCATE TABLE mysql.general_log")
            mine = {n: s.session_id for n, s in servers.items()}
            t0 = time.time()
            wall, cpu, code, out = timed(["run", str(pb), "--dry-run", "--yes"])
            if code != 0:
                raise SystemExit(f"the dry run failed (exit {code}): {out.strip()[-1500:]}")
            seen = []
            for n, s in servers.items():
                v = s.scalar("SELECT MIN(UNIX_TIMESTAMP(event_time)) FROM mysql.general_log "
                             "WHERE command_type = 'Query' AND thread_id <> %s", (mine[n],))
                if v is not None:
                    seen.append(float(v))
            if not seen:
                raise SystemExit("no statement of the dry run reached the general log")
            if i < 0:
                continue
            firsts.append(min(seen) - t0)
            walls.append(wall)
            cpus.append(cpu)
            say(f"run {i + 1}: first statement {firsts[-1] * 1000:.0f} ms after exec, dry run {wall:.2f} s "
                f"({cpu:.2f} s of CPU)")
        for s in servers.values():
            s.execute("SET GLOBAL general_log = 0")
            s.close()
        return firsts, walls, cpus
    finally:
        boxes.down(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if "DBMIGRATE_HOME" not in os.environ:  # a private home, removed at the end
        os.environ["DBMIGRATE_HOME"] = tempfile.mkdtemp(prefix="dbm-bench-")
        import atexit

        atexit.register(shutil.rmtree, os.environ["DBMIGRATE_HOME"], ignore_errors=True)
    os.environ.setdefault("DBMIGRATE_JOURNAL", str(Path(os.environ["DBMIGRATE_HOME"]) / "journal.sqlite"))
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print
    load_before = os.getloadavg()[0]
    version, version_cpu = time_version(args.runs)
    firsts, walls, cpus = first_statements(args.runs, say)
    out = {"load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
           "version_s": stats(version), "version_cpu_s": stats(version_cpu),
           "run_first_statement_s": stats(firsts), "dry_run_wall_s": stats(walls), "dry_run_cpu_s": stats(cpus),
           "modules_loaded": {c: imported_modules([c]) for c in ("run", "digest", "tui")},
           "targets": {"version_s": TARGET_VERSION_S, "first_statement_s": TARGET_FIRST_STATEMENT_S},
           "ratio_to_target": {"version": round(statistics.median(version) / TARGET_VERSION_S, 2),
                               "first_statement": round(statistics.median(firsts) / TARGET_FIRST_STATEMENT_S, 2)}}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        v, f, w = out["version_s"], out["run_first_statement_s"], out["dry_run_wall_s"]
        vc, wc = out["version_cpu_s"], out["dry_run_cpu_s"]
        print(f"load average (1 min) before / after: {out['load_average_1min']}")
        print(f"dbmigrate --version: p50 {v['p50']} s, min {v['min']} s, max {v['max']} s "
              f"({out['ratio_to_target']['version']}x the {TARGET_VERSION_S} s target); CPU p50 {vc['p50']} s")
        print(f"dbmigrate run (dry run): first statement p50 {f['p50']} s, min {f['min']} s, max {f['max']} s after "
              f"exec ({out['ratio_to_target']['first_statement']}x the {TARGET_FIRST_STATEMENT_S} s target); "
              f"whole dry run p50 {w['p50']} s, CPU p50 {wc['p50']} s")
        print("modules loaded per command: " + ", ".join(f"{c} {n}" for c, n in out["modules_loaded"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
