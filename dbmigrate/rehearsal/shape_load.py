"""A captured shape loaded into a sandbox's primary (replication carries it to the others):
the schema's tables, generated rows at a scale, then views, routines, triggers and events (a
trigger created after the rows fires on the application's writes only), then the captured
accounts with their grants. Each account gets a generated password, kept in a private option
file beside the sandbox's own credentials (mode 0600), never printed or logged."""

from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dbmigrate.db.connection import Server
from dbmigrate.db.credentials import Credentials, quote_option_value
from dbmigrate.db.shape_reader import ShapeReader
from dbmigrate.db.shape_writer import ShapeWriter, grant_for_any_host, role_privilege_line
from dbmigrate.exceptions import UsageError
from dbmigrate.redact import register_secret
from dbmigrate.shape.files import ShapeFiles
from dbmigrate.shape.generate import Column, ValueSource, foreign_keys, scaled_rows

OPTION_FILE = "shape-accounts.cnf"


@dataclass
class LoadedShape:
    sources: dict[str, ValueSource] = field(default_factory=dict)  # schema.table -> its generator
    accounts: dict[str, Credentials] = field(default_factory=dict)
    grants: int = 0
    roles: list[str] = field(default_factory=list)
    role_grants: int = 0  # roles granted to accounts and to other roles, and default roles set
    proxies: int = 0
    kept: list[str] = field(default_factory=list)  # accounts the sandbox already had, left as they were
    objects: int = 0
    option_file: Path | None = None
    took_s: float = 0.0

    @property
    def rows(self) -> dict[str, int]:
        return {t: s.rows for t, s in self.sources.items()}

    def summary(self) -> dict:
        return {"tables": len(self.sources), "rows": sum(self.rows.values()), "rows_by_table": self.rows,
                "objects": self.objects, "accounts": sorted(self.accounts), "grants": self.grants,
                "roles": self.roles, "role_grants": self.role_grants, "proxy_grants": self.proxies,
                "accounts_kept": self.kept,
                "option_file": str(self.option_file) if self.option_file else None, "took_s": round(self.took_s, 2)}


def load_shape(server: Server, shape: ShapeFiles, scale: float, secrets_dir: Path,
               progress: Callable[[str], None] | None = None) -> LoadedShape:
    say = progress or (lambda m: None)
    t0 = time.monotonic()
    out = LoadedShape()
    writer, reader = ShapeWriter(server), ShapeReader(server)
    writer.foreign_key_checks(False)
    tables = [(schema, t) for schema, sc in shape.schemas.items() for t in sc["tables"] if t["type"] == "table"]
    for schema, t in tables:
        # Without the captured AUTO_INCREMENT=N the generated ids are 1..n, which the foreign
        # keys and the replayed lookups of generated rows count on.
        writer.create_object(schema, re.sub(r"\s+AUTO_INCREMENT=\d+", "", t["create"]))
        out.objects += 1
    # Parents first: a child's foreign key column takes ids 1..the parent's generated rows.
    planned = {f"{schema}.{t['name']}": scaled_rows(int(t.get("rows") or 0), scale) for schema, t in tables}
    for schema, t in tables:
        key = f"{schema}.{t['name']}"
        columns = [Column.from_catalog(r) for r in reader.columns(schema, t["name"])]
        parents = {col: planned.get(f"{schema}.{parent}", 1) for col, parent in foreign_keys(t["create"]).items()}
        source = ValueSource(key, columns, stats=t.get("columns") or {}, rows=planned[key], parents=parents)
        loaded = source.loaded_columns
        writer.insert_rows(schema, t["name"], [c.name for c in loaded], (source.row() for _ in range(source.rows)))
        out.sources[key] = source
    say(f"shape: {len(tables)} table(s), {sum(planned.values())} generated row(s) at scale {scale:g}")
    for schema, sc in shape.schemas.items():
        for obj in [t for t in sc["tables"] if t["type"] == "view"] + sc.get("routines", []) + \
                sc.get("triggers", []) + sc.get("events", []):
            writer.create_object(schema, obj["create"])
            out.objects += 1
    writer.foreign_key_checks(True)
    out.option_file = secrets_dir / OPTION_FILE
    # The sandbox's own accounts (the tool's, the load's) keep theirs: a shape captured from a
    # cluster this tool manages holds accounts of the same names.
    existing = {u for u, _ in reader.accounts()}
    out.kept = sorted({a["user"] for a in shape.accounts} & existing)
    users = sorted({a["user"] for a in shape.accounts} - existing)
    for user in users:
        password = secrets.token_urlsafe(18)
        register_secret(password)
        writer.create_account(user, password)
        out.accounts[user] = Credentials(user, password)
    _write_option_file(out.option_file, out.accounts)
    for account in [a for a in shape.accounts if a["user"] in out.accounts]:
        for line in account.get("grants") or []:
            replayed = grant_for_any_host(line, account["user"])
            if replayed is None:
                continue
            try:
                writer.grant(replayed)
            except Exception as e:
                raise UsageError(f"the shape's grant for {account['user']} could not be applied: {e}",
                                 hint="edit the grant in shape.json or capture the shape again") from None
            out.grants += 1
    _load_roles(writer, reader, shape, out)
    say(f"shape: {len(users)} account(s) with {out.grants} grant(s), {len(out.roles)} role(s) with "
        f"{out.role_grants} role grant(s), {out.proxies} PROXY grant(s); their passwords in {out.option_file} (0600)"
        + (f"; the sandbox's own kept: {', '.join(out.kept)}" if out.kept else ""))
    out.took_s = time.monotonic() - t0
    return out


def _load_roles(writer: ShapeWriter, reader: ShapeReader, shape: ShapeFiles, out: LoadedShape) -> None:
    """The shape's roles with their privileges, each granted as captured (to the shape's accounts
    and to other roles), the accounts' default roles, then PROXY grants: an account proxied that
    the shape created is the one at '%', another keeps its captured host."""
    def applied(what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as e:
            raise UsageError(f"the shape's {what} could not be applied: {e}",
                             hint="edit it in shape.json or capture the shape again") from None

    roles = {(r["name"], r.get("host") or "") for r in shape.roles}
    for r in shape.roles:
        applied(f"role {r['name']}", lambda r=r: writer.create_role(r["name"], r.get("host") or ""))
        out.roles.append(r["name"])
    for r in shape.roles:
        for line in r.get("grants") or []:
            replayed = role_privilege_line(line)
            if replayed is not None:
                applied(f"grant for role {r['name']}", lambda line=replayed: writer.grant(line))
                out.grants += 1
        for parent in r.get("roles") or []:
            applied(f"role {parent['name']} of role {r['name']}", lambda r=r, p=parent: writer.grant_role(
                p["name"], p.get("host") or "", r["name"], r.get("host") or ""))
            out.role_grants += 1
    for account in [a for a in shape.accounts if a["user"] in out.accounts]:
        user = account["user"]
        for role in account.get("roles") or []:
            if (role["name"], role.get("host") or "") in roles:
                applied(f"role {role['name']} of {user}",
                        lambda role=role: writer.grant_role(role["name"], role.get("host") or "", user, "%"))
                out.role_grants += 1
        for role in account.get("default_roles") or []:
            if (role["name"], role.get("host") or "") in roles:
                applied(f"default role of {user}",
                        lambda role=role: writer.set_default_role(role["name"], role.get("host") or "", user))
                out.role_grants += 1
        for p in account.get("proxies") or []:
            host = "%" if p["user"] in out.accounts else p["host"]
            applied(f"PROXY grant of {user}",
                    lambda p=p, host=host: writer.grant_proxy(p["user"], host, user, bool(p.get("with_grant"))))
            out.proxies += 1


def _write_option_file(path: Path, accounts: dict[str, Credentials]) -> None:
    text = "# generated passwords of the shape's accounts in this rehearsal sandbox (mode 0600)\n"
    for user, creds in accounts.items():
        text += f"\n[client-shape-{user}]\nuser={quote_option_value(user)}\npassword={quote_option_value(creds.password or '')}\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
