"""TPC-C-like load with go-tpc (github.com/pingcap/go-tpc, pinned by scripts/setup).

go-tpc takes a password only on its command line, which dbmigrate never does with a
secret: it connects as a passwordless account limited to its own database, which the
caller creates on a throwaway loopback sandbox only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbmigrate.exceptions import DbmigrateError

GO_TPC_VERSION = "v1.0.9"


class TpccError(DbmigrateError):
    """go-tpc is missing or failed."""


def find_go_tpc() -> str:
    """$DBMIGRATE_GO_TPC, then go-tpc on PATH, then the one scripts/setup built into the virtualenv."""
    for candidate in (os.environ.get("DBMIGRATE_GO_TPC"), shutil.which("go-tpc"),
                      str(Path(sys.prefix) / "bin" / "go-tpc")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise TpccError("go-tpc is not installed",
                    hint=f"install Go and run scripts/setup --bench (it builds go-tpc {GO_TPC_VERSION} into .venv/bin), "
                         "or point DBMIGRATE_GO_TPC at a go-tpc binary")


@dataclass
class TpccResult:
    """The summary go-tpc prints at the end of a run (`--output json`)."""

    tpmc: float                  # New-Order transactions per minute
    tpm_total: float             # all transactions per minute
    seconds: float
    ops: dict[str, dict[str, float]] = field(default_factory=dict)  # per operation: count, avg_ms, p99_ms, ...

    @property
    def new_order(self) -> dict[str, float]:
        return self.ops.get("NEW_ORDER", {})

    def to_dict(self) -> dict[str, Any]:
        return {"tpmc": self.tpmc, "tpm_total": self.tpm_total, "seconds": self.seconds, "ops": self.ops}


_FIELDS = {"Count": "count", "TPM": "tpm", "Avg(ms)": "avg_ms", "50th(ms)": "p50_ms", "95th(ms)": "p95_ms",
           "99th(ms)": "p99_ms", "99.9th(ms)": "p999_ms", "Max(ms)": "max_ms", "Takes(s)": "seconds"}


def parse_output(text: str) -> TpccResult:
    """go-tpc's JSON lines: interval rows ("[Current] "), summary rows ("[Summary] ") and the tpmC line."""
    ops: dict[str, dict[str, float]] = {}
    tpm: dict[str, str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("[{"):
            continue
        try:
            rows = json.loads(line)
        except json.JSONDecodeError:
            continue
        for row in rows:
            if "tpmC" in row:
                tpm = row
            elif str(row.get("Prefix", "")).strip().startswith("[Summary]"):
                ops[row["Operation"]] = {name: float(row[key]) for key, name in _FIELDS.items() if key in row}
    if tpm is None or not ops:
        raise TpccError("go-tpc printed no summary", hint=f"its output ended with: {text[-300:]!r}")
    seconds = max((o.get("seconds", 0.0) for o in ops.values()), default=0.0)
    return TpccResult(float(tpm["tpmC"]), float(tpm["tpmTotal"]), seconds, ops)


def scaling_row(count: int, results: list[TpccResult], base_tpm: float | None) -> dict[str, Any]:
    """One row of the scaling table from the concurrent runs on `count` instances: TPM summed,
    New-Order average weighted by transactions, p99.9 the worst instance's (percentiles of
    separate processes cannot be merged exactly), efficiency = TPM per instance / TPM alone."""
    tpm = sum(r.tpmc for r in results)
    orders = sum(r.new_order.get("count", 0.0) for r in results)
    avg = (sum(r.new_order.get("avg_ms", 0.0) * r.new_order.get("count", 0.0) for r in results) / orders
           if orders else None)
    per_instance = tpm / count
    return {"instances": count, "tpm": round(tpm, 1), "tpm_per_instance": round(per_instance, 1),
            "tpm_total_all_types": round(sum(r.tpm_total for r in results), 1),
            "avg_ms": None if avg is None else round(avg, 2),
            "p999_ms": max((r.new_order["p999_ms"] for r in results if "p999_ms" in r.new_order), default=None),
            "p99_ms": max((r.new_order["p99_ms"] for r in results if "p99_ms" in r.new_order), default=None),
            "errors": sum(o.get("count", 0.0) for r in results for k, o in r.ops.items() if k.endswith("_ERR")),
            "efficiency": round(per_instance / base_tpm, 3) if base_tpm else (1.0 if count == 1 else None),
            "per_instance": [r.to_dict() for r in results]}


@dataclass
class GoTpc:
    host: str
    port: int
    user: str
    database: str = "tpcc"
    warehouses: int = 1
    binary: str = field(default_factory=find_go_tpc)

    def _argv(self, action: str, *extra: str) -> list[str]:
        return [self.binary, "tpcc", action, "-H", self.host, "-P", str(self.port), "-U", self.user,
                "-D", self.database, "--warehouses", str(self.warehouses), *extra]

    def prepare(self, threads: int = 2, timeout_s: float = 900) -> None:
        self._call(self._argv("prepare", "-T", str(threads), "--no-check"), timeout_s)

    def start(self, seconds: int, threads: int) -> subprocess.Popen:
        """A run in the background (several instances are loaded at once); `finish` collects it."""
        argv = self._argv("run", "-T", str(threads), "--time", f"{seconds}s", "--interval", f"{seconds + 60}s",
                          "--output", "json")
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)

    @staticmethod
    def finish(proc: subprocess.Popen, timeout_s: float) -> TpccResult:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise TpccError(f"go-tpc did not finish within {timeout_s:g}s") from None
        if proc.returncode != 0:
            raise TpccError(f"go-tpc run failed (exit {proc.returncode}): {(err or out)[-400:]}")
        return parse_output(out)

    def _call(self, argv: list[str], timeout_s: float) -> None:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TpccError(f"go-tpc {argv[2]} did not finish within {timeout_s:g}s") from None
        if proc.returncode != 0:
            raise TpccError(f"go-tpc {argv[2]} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-400:]}")
