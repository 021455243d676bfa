#!/usr/bin/env python3
"""The fault matrix's results as markdown tables, from one or more `bench/faults.py --json` files.

    python bench/faults_table.py [--summary] RESULTS.json [MORE.json ...]

A file may also be a `bench/faults.py --rows-file` (one result per line).

A row found again in a later file replaces the earlier one and is marked "(run again)" next
to its verdict; the replaced results are listed after the tables, so that nothing is hidden.
One table per procedure (rows in the order given), then the totals: rows per verdict,
acknowledged writes, lost writes, moments with two writable servers, the seconds each row was
judged after the tool exited. `--summary` prints instead one line per procedure, fault and
operator command: scenarios, lost, two writable, longest no-writer (its largest bound),
healthy, how the runs ended.
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def row(r: dict, again: bool = False) -> str:
    lost = sum(r["lost_by_server"].values())
    gap = f"{r['writer_gap_ms']:,.0f}" if r.get("writer_gap_ms") is not None else "-"
    op = r["operator_action"] if r["operator_action"] == "nothing" else f"{r['operator_action']} -> {r['action_status']}"
    return (f"| `{r['id']}` | {r['verdict']}{' (run again)' if again else ''} | {lost} | {r['two_writable_moments']} | "
            f"{r['longest_no_writer_ms']:,.0f} ({r['no_writer_bound_ms']:,.0f}) | {gap} | "
            f"{'yes' if r['healthy'] else 'NO'} | {r['run_status'] or '-'} | {op} |")


def summary(results: list[dict]) -> None:
    """One line per (procedure, fault, operator command), in the order first seen."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in results:
        proc, fault, _, command = r["id"].split("/", 3)
        groups.setdefault((proc, fault, command), []).append(r)
    print("| procedure | fault | then | scenarios | lost | two writable | longest no-writer ms (bound) | healthy "
          "| ended |\n|---|---|---|---|---|---|---|---|---|")
    for (proc, fault, command), rows in groups.items():
        worst = max(rows, key=lambda r: r["longest_no_writer_ms"])
        ends = Counter(r["end"] or "-" for r in rows)
        failed = sum(r["verdict"] == "FAIL" for r in rows)
        print(f"| {proc} | {fault} | {command} | {len(rows)} | {sum(sum(r['lost_by_server'].values()) for r in rows)} "
              f"| {sum(r['two_writable_moments'] for r in rows)} | {worst['longest_no_writer_ms']:,.0f} "
              f"({max(r['no_writer_bound_ms'] for r in rows):,.0f}) | {sum(r['healthy'] for r in rows)}/{len(rows)} "
              f"| {', '.join(f'{e} {n}' for e, n in sorted(ends.items()))}"
              + (f"; FAIL {failed}" if failed else "") + " |")


def main(paths: list[str]) -> int:
    brief = "--summary" in paths
    paths = [p for p in paths if p != "--summary"]
    by_id: dict[str, dict] = {}
    replaced: list[dict] = []
    judged = set()
    for p in paths:
        text = open(p).read()
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:  # a --rows-file: one result per line
            doc = {"results": [json.loads(ln) for ln in text.splitlines() if ln.strip()]}
            doc["judged_after_exit_s"] = doc["results"][0]["details"].get("judged_after_exit_s") if doc["results"] else None
        for r in doc["results"]:
            if r["id"] in by_id:
                replaced.append(by_id[r["id"]])
            by_id[r["id"]] = r
        judged.add(doc.get("judged_after_exit_s"))
    results = list(by_id.values())
    if brief:
        summary(results)
        return 1 if any(r["verdict"] == "FAIL" for r in results) else 0
    again = {r["id"] for r in replaced}
    by_proc: dict[str, list[dict]] = {}
    for r in results:
        by_proc.setdefault(r["id"].split("/", 1)[0], []).append(r)
    head = ("| row | verdict | lost | two writable | longest no-writer ms (bound) | app gap ms | healthy | run ended "
            "| operator |\n|---|---|---|---|---|---|---|---|---|")
    for proc, rows in by_proc.items():
        print(f"#### {proc}\n\n{head}")
        for r in rows:
            print(row(r, r["id"] in again))
            if r["verdict"] == "FAIL":
                print(f"| | why: {'; '.join(r['why'])[:300]} | | | | | | | |")
        print()
    if replaced:
        print("Replaced by a later run:\n")
        for r in replaced:
            print(f"- `{r['id']}`: {r['verdict']}" + (f" ({'; '.join(r['why'])[:300]})" if r["why"] else ""))
        print()
    verdicts = Counter(r["verdict"] for r in results)
    print(f"{len(results)} rows: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()))
          + f"; {sum(r['acknowledged'] for r in results):,} acknowledged writes, "
          f"{sum(sum(r['lost_by_server'].values()) for r in results)} lost, "
          f"{sum(r['two_writable_moments'] for r in results)} moments with two writable servers, "
          f"{sum(not r['healthy'] for r in results)} unhealthy at the end; judged until "
          f"{', '.join(f'{j:g}' for j in sorted(x for x in judged if x is not None))} s after the tool exited.")
    return 1 if verdicts.get("FAIL") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
