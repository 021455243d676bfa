#!/usr/bin/env python3
"""Compose rehearsal timings: images built from nothing, `compose up` to every server healthy,
and each compose rehearsal end to end with the images cached.

- images: a fresh DBMIGRATE_HOME (no base tarball, no engine data), the rehearsal's own engine
  started, `debootstrap`, `docker import`, both `docker build`s; then the engine stopped.
- up to healthy: read from each rehearsal's report (`compose.timings.up_healthy_s`).
- each rehearsal: `dbmigrate rehearse ... --compose --json` as a user runs it, wall time from
  exec to exit (its own engine started and stopped, containers created and removed), on the
  images just built.

Targets: images <= 120 s, each rehearsal <= 180 s with images cached. The machine's load
average (1 min) is printed beside each figure: on a shared 2-core machine every figure grows
with it, and a target missed under load is reported as missed.

    python bench/compose_timings.py [--home DIR] [--only promote,regress,swap,consolidate] [--json]

Runs as root where no Docker Engine answers (the rehearsal starts its own). Takes 5-15 min.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_IMAGES_S, TARGET_REHEARSAL_S = 120, 180
REHEARSALS = {
    "promote": ["rehearse", "promote", "--compose"],
    "regress": ["rehearse", "promote", "--compose", "--regress"],
    "swap": ["rehearse", "schema-swap", "--compose"],
    "consolidate": ["rehearse", "consolidate", "--compose", "--rows", "200"],
}


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def build_images(home: Path) -> dict:
    code = ("from dbmigrate.rehearsal.compose.engine import acquire\n"
            "from dbmigrate.rehearsal.compose.images import ensure_images\n"
            "import json\n"
            "e = acquire()\n"
            "try:\n"
            "    print(json.dumps(ensure_images(e).built_s))\n"
            "finally:\n"
            "    e.stop()\n")
    before, t = load1(), time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(home), cwd=ROOT)
    wall = time.monotonic() - t
    if res.returncode != 0:
        raise SystemExit(f"building the images failed: {res.stderr.strip()[-800:]}")
    parts = json.loads(res.stdout.strip().splitlines()[-1])
    what = "images from nothing (debootstrap, import, both builds)" if "base_s" in parts else \
        "images (" + ("cached: nothing built" if not parts else "base cached: " + ", ".join(parts)) + ")"
    return {"what": what, "s": round(wall, 1), "parts": parts, "load_before": before, "load_after": load1(),
            "target_s": TARGET_IMAGES_S}


def rehearse(home: Path, key: str) -> dict:
    before, t = load1(), time.monotonic()
    res = subprocess.run([sys.executable, "-m", "dbmigrate", *REHEARSALS[key], "--json"], capture_output=True,
                         text=True, env=_env(home), cwd=ROOT, timeout=1800)
    wall = time.monotonic() - t
    result = next((json.loads(ln)["result"] for ln in res.stdout.splitlines()
                   if ln.startswith("{") and json.loads(ln).get("record") == "result"), {})
    return {"what": " ".join(["dbmigrate", *REHEARSALS[key]]), "s": round(wall, 1), "exit": res.returncode,
            "lost": result.get("lost_writes"), "acknowledged": result.get("acknowledged_writes"),
            "up_healthy_s": ((result.get("compose") or {}).get("timings") or {}).get("up_healthy_s"),
            "load_before": before, "load_after": load1(), "target_s": TARGET_REHEARSAL_S,
            **({"error": res.stderr.strip()[-400:]} if res.returncode else {})}


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, DBMIGRATE_HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("DBMIGRATE_JOURNAL", None)
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", help="keep the engine's data here (default: a fresh temporary directory, removed)")
    ap.add_argument("--only", default=",".join(REHEARSALS), help="rehearsals to time, comma-separated")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="dbm-compose-bench-"))
    rows = []
    try:
        rows.append(build_images(home))
        for key in [k for k in args.only.split(",") if k]:
            rows.append(rehearse(home, key))
    finally:
        if not args.home:
            shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'what':<66} {'time':>8} {'target':>7} {'ratio':>6}  load 1-min before/after")
    for r in rows:
        ok = r["s"] <= r["target_s"] and not r.get("exit")
        print(f"{r['what']:<66} {r['s']:>7.1f}s {r['target_s']:>6}s {r['s'] / r['target_s']:>6.2f}  "
              f"{r['load_before']:.1f}/{r['load_after']:.1f}  {'met' if ok else 'NOT MET'}"
              + (f"; up to healthy {r['up_healthy_s']} s" if r.get("up_healthy_s") is not None else "")
              + (f"; {r['lost']} of {r['acknowledged']} writes lost" if r.get("lost") is not None else "")
              + (f"; exit {r['exit']}: {r['error']}" if r.get("exit") else ""))
        if "parts" in r:
            print("    " + ", ".join(f"{k} {v} s" for k, v in r["parts"].items()))


if __name__ == "__main__":
    main()
