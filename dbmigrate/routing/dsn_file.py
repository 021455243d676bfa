"""Router for applications that read their endpoints from a file (explicit DSNs).

The file is JSON, because every application language parses JSON without an extra
library. One file may serve many clusters; a change to one cluster keeps the
others' entries untouched:

    {
      "format": 1,
      "version": 12,                        # +1 on every change to the file
      "updated_at": "2024-05-01T03:02:01.123456Z",
      "clusters": {
        "orders": {
          "writer": "10.0.0.5:3306",
          "readers": ["10.0.0.6:3306", "10.0.0.7:3306"],
          "reader_weights": {"10.0.0.6:3306": 100, "10.0.0.7:3306": 100},
          "version": 4,                     # +1 on every change to this cluster
          "updated_at": "2024-05-01T03:02:01.123456Z"
        }
      }
    }

Applications reload when `version` (or the file's mtime) changes and open new
write connections to `writer` only. The file is replaced atomically (temporary
file in the same directory, fsync, rename, fsync of the directory), so a reader
sees the old content or the new, never a torn write. Read-modify-write cycles of
concurrent dbmigrate processes are serialised with flock on `<file>.lock`.

switch_writer changes only the writer; readers change only through set_readers /
set_reader_weights, so that a switchover never adds reads to a server that is not
replicating yet.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from dbmigrate import faultpoint
from dbmigrate.routing.base import RouteLog, RouterError, RouteState, Router, ServerLike, as_ref, same_address, \
    split_address

FORMAT = 1


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_dsn_file(path: Path) -> dict[str, Any]:
    """The whole document; an empty document when the file does not exist yet."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {"format": FORMAT, "version": 0, "updated_at": None, "clusters": {}}
    except OSError as e:
        raise RouterError(f"cannot read DSN file {path}: {e.strerror or e}",
                          hint="check the path in the inventory's router section and its permissions")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise RouterError(f"DSN file {path} is not valid JSON (line {e.lineno}: {e.msg})",
                          hint="fix or restore the file; dbmigrate only ever replaces it atomically")
    if not isinstance(doc, dict) or not isinstance(doc.get("clusters", {}), dict):
        raise RouterError(f"DSN file {path} does not look like a dbmigrate DSN file (no 'clusters' mapping)")
    if doc.get("format", FORMAT) != FORMAT:
        raise RouterError(f"DSN file {path} has format {doc.get('format')}, this dbmigrate writes format {FORMAT}",
                          hint="upgrade dbmigrate, or point the router at another file")
    doc.setdefault("clusters", {})
    doc.setdefault("version", 0)
    return doc


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace `path` with `text` so that readers see either the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # the file holds addresses only; applications must be able to read it
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # The rename is durable only once the directory entry is on disk.
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class DsnFileRouter(Router):
    kind = "dsn-file"

    def __init__(self, cluster: str, path: str | os.PathLike[str]):
        super().__init__(cluster)
        self.path = Path(path)

    def describe(self) -> str:
        return f"DSN file {self.path} (cluster {self.cluster})"

    # -- reading -------------------------------------------------------------
    def _entry(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        entry = doc["clusters"].get(self.cluster)
        if entry is None:
            return None
        if not isinstance(entry, dict):
            raise RouterError(f"DSN file {self.path}: the entry of cluster {self.cluster} is not an object",
                              hint="fix or restore the file; dbmigrate only ever replaces it atomically")
        return entry

    def current(self) -> RouteState:
        doc = read_dsn_file(self.path)
        e = self._entry(doc)
        if e is None:
            return RouteState(writer=None, details={"file": str(self.path), "note": "cluster not in file"})
        writer = e.get("writer")
        return RouteState(writer=writer, writers=[writer] if writer else [], readers=list(e.get("readers", [])),
                          reader_weights=dict(e.get("reader_weights", {})),
                          details={"file": str(self.path), "version": e.get("version"), "updated_at": e.get("updated_at")})

    # -- changing ------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """Yield the document under an exclusive lock; write it back if the block changed it."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(lock_path, "a")
        except OSError as e:
            raise RouterError(f"cannot lock DSN file {self.path}: {e.strerror or e}",
                              hint="the directory must be writable by the user running dbmigrate")
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            doc = read_dsn_file(self.path)
            before = json.dumps(doc, sort_keys=True)
            yield doc
            if json.dumps(doc, sort_keys=True) != before:
                now = _now()
                entry = self._entry(doc)
                if entry is not None:
                    entry["version"] = int(entry.get("version", 0)) + 1
                    entry["updated_at"] = now
                doc["format"] = FORMAT
                doc["version"] = int(doc.get("version", 0)) + 1
                doc["updated_at"] = now
                try:
                    write_atomically(self.path, json.dumps(doc, indent=2, sort_keys=False) + "\n")
                except OSError as e:
                    raise RouterError(f"cannot write DSN file {self.path}: {e.strerror or e}",
                                      hint="nothing was changed; check free space and permissions, then retry") from None

    def switch_writer(self, new: ServerLike, old: ServerLike | None = None, *, persist: bool = True,
                      log: RouteLog | None = None, seq: int | None = None) -> RouteState:
        # The file is the route: the switch is its write, whatever `persist` says.
        new_ref = as_ref(new)
        faultpoint.sending(f"router dsn-file {new_ref.address}", "switch writer")  # no-op unless a pause listens
        with self._locked() as doc:
            entry = self._entry(doc)
            writer = entry.get("writer") if entry else None
            if writer and same_address(writer, new_ref.address):
                pass  # already switched: idempotent re-run
            elif old is not None and not (writer and same_address(writer, as_ref(old).address)):
                raise RouterError(
                    f"DSN file {self.path} names {writer or 'no writer'} for cluster {self.cluster}, "
                    f"not {as_ref(old)}: refusing to switch",
                    hint="someone else changed the route; check the file, or switch without an expected old writer")
            else:
                if entry is None:
                    entry = {"writer": None, "readers": [], "reader_weights": {}}
                    doc["clusters"][self.cluster] = entry
                entry["writer"] = new_ref.address
        return self.current()

    def set_readers(self, readers: Sequence[str]) -> RouteState:
        for r in readers:
            split_address(r)
        with self._locked() as doc:
            entry = self._require_entry(doc)
            weights = entry.get("reader_weights", {})
            entry["readers"] = list(readers)
            entry["reader_weights"] = {r: int(weights.get(r, 100)) for r in readers}
        return self.current()

    def set_reader_weights(self, weights: Mapping[str, int]) -> RouteState:
        for addr, w in weights.items():
            split_address(addr)
            if not 0 <= int(w) <= 256:
                raise RouterError(f"weight {w} for {addr} is out of range", hint="use 0..256 (0 takes no new reads)")
        with self._locked() as doc:
            entry = self._require_entry(doc)
            unknown = [a for a in weights if a not in entry.get("readers", [])]
            if unknown:
                raise RouterError(f"{', '.join(unknown)} not among the readers of {self.cluster} in {self.path}",
                                  hint="add them with set_readers first")
            entry.setdefault("reader_weights", {}).update({a: int(w) for a, w in weights.items()})
        return self.current()

    def _require_entry(self, doc: dict[str, Any]) -> dict[str, Any]:
        entry = self._entry(doc)
        if entry is None:
            raise RouterError(f"cluster {self.cluster} is not in DSN file {self.path}",
                              hint="set its writer first (switch_writer without an expected old writer)")
        return entry

    def describe_switch(self, new: ServerLike, old: ServerLike | None = None) -> list[str]:
        st = self.current()
        new_ref = as_ref(new)
        if st.writer and same_address(st.writer, new_ref.address):
            return [f"DSN file {self.path}: writer of {self.cluster} is already {new_ref}: nothing to do"]
        cond = f" (only if it still names {as_ref(old)})" if old is not None else ""
        return [f"DSN file {self.path}: replace writer of {self.cluster} {st.writer or '(none)'} -> "
                f"{new_ref.address}{cond}; version {st.details.get('version') or 0} -> "
                f"{(st.details.get('version') or 0) + 1}; atomic rename, applications reload on the new version"]
