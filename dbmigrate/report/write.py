"""Writing a report: FILE (HTML) and the same numbers beside it as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dbmigrate.exceptions import UsageError
from dbmigrate.redact import redact_json_object
from dbmigrate.report import html
from dbmigrate.report.model import ReportModel
from dbmigrate.report.tables import all_tables


def json_path_for(path: Path) -> Path:
    """report.html -> report.json; any other name gets .json appended."""
    return path.with_suffix(".json") if path.suffix.lower() in (".html", ".htm") else Path(f"{path}.json")


def check_report_path(path: Path) -> Path:
    """Refuse, before any server is touched, a report path that cannot be written."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise UsageError(f"--report {path}: is a directory", hint="give a file name, e.g. --report cutover.html")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"--report {path}: directory {parent} does not exist", hint="create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--report {path}: directory {parent} is not writable")
    return path


def report_json(model: ReportModel) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "title": model.title, "generated_at": model.generated_at, "run": model.run, "notes": model.notes,
        "origin_epoch": model.origin(), "steps": model.steps, "evidence": model.evidence, "digest": model.digest,
        "guard_windows": model.guard_windows, "tables": [t.to_dict() for t in all_tables(model)],
    }
    return redact_json_object(doc)


def write_report(model: ReportModel, path: Path) -> tuple[Path, Path]:
    """Both files are written to a temporary name and renamed: never a half-written report."""
    path = check_report_path(path)
    jpath = json_path_for(path)
    for target, text in ((path, html.render(model)),
                         (jpath, json.dumps(report_json(model), indent=1, default=str) + "\n")):
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text, encoding="utf-8")  # every text in both was redacted as it was put in
        tmp.replace(target)
    return path, jpath
