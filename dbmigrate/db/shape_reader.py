"""The reads `shape capture` makes: schema objects, sizes, sampled column statistics, accounts
and the session settings applications use. Every read is a catalog read or a bounded sample
(LIMIT): nothing takes a lock that writes wait for."""

from __future__ import annotations

import re
from typing import Any, Iterator, NamedTuple

from dbmigrate.db.connection import QueryError, Server

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys", "percona", "dbmigrate")
SYSTEM_USERS = ("root", "mariadb.sys", "mysql.sys", "mysql.session", "mysql.infoschema", "PUBLIC", "")
# Session variables an application commonly sets for itself; compared with the global value.
SESSION_VARIABLES = ("sql_mode", "long_query_time", "time_zone", "character_set_client", "collation_connection",
                     "transaction_isolation", "tx_isolation", "autocommit", "wait_timeout", "max_statement_time",
                     "innodb_lock_wait_timeout", "optimizer_switch")
_SET_VARIABLE = re.compile(r"(?:@@SESSION\s*\.\s*|@@|\bSESSION\s+|\bSET\s+|,\s*)`?(\w+)`?\s*=", re.IGNORECASE)
_SET_VALUE = re.compile(r"(?:@@SESSION\.|@@|\bSESSION\s+|\bSET\s+|,\s*)`?(\w+)`?\s*=\s*('[^']*'|\"[^\"]*\"|[\w.+-]+)",
                        re.IGNORECASE)
SAMPLE_BATCH = 250
# Sampled as their length and CRC32 only: a long value's bytes would cost the server, the
# network and the tool far more than the statistics need (lengths and how many differ).
MEASURED_TYPES = ("tinyblob", "blob", "mediumblob", "longblob", "tinytext", "text", "mediumtext", "longtext",
                  "json")
_CRC = "#crc"
_PARTITION = re.compile(r"#p#", re.IGNORECASE)  # t#P#p0 (#SP#sp0): a partition's row of its table


class Measured(NamedTuple):
    """A long value as sampled: its length (bytes of a BLOB, characters of a TEXT) and its CRC32."""
    length: int
    crc: int


_SECRET = re.compile(r"\s+(IDENTIFIED\s+(?:BY\s+PASSWORD|VIA\s+\w+\s+USING|BY)\s+)'[^']*'", re.IGNORECASE)


def without_secrets(grant: str) -> str:
    """A GRANT / CREATE USER line without its password hash or authentication string."""
    return _SECRET.sub(r" \1'<redacted>'", grant)


class ShapeReader:
    def __init__(self, server: Server):
        self.server = server

    def user_schemas(self) -> list[str]:
        marks = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
        rows = self.server.query(f"SELECT SCHEMA_NAME AS s FROM information_schema.SCHEMATA "
                                 f"WHERE SCHEMA_NAME NOT IN ({marks}) ORDER BY SCHEMA_NAME", SYSTEM_SCHEMAS)
        return [str(r["s"]) for r in rows]

    def stats_on_metadata(self) -> bool:
        """Whether reading information_schema.TABLES makes InnoDB recompute every table's
        statistics (innodb_stats_on_metadata=ON: index dives on each table read)."""
        try:
            return str(self.server.scalar("SELECT @@GLOBAL.innodb_stats_on_metadata AS v")).upper() in ("1", "ON")
        except QueryError:
            return False

    def tables(self, schema: str) -> list[dict[str, Any]]:
        rows = self.server.query(
            "SELECT TABLE_NAME AS name, TABLE_TYPE AS type, ENGINE AS engine, TABLE_ROWS AS `rows`, "
            "DATA_LENGTH AS data_bytes, INDEX_LENGTH AS index_bytes, AVG_ROW_LENGTH AS avg_row_bytes, "
            "CREATE_OPTIONS AS options, TABLE_COLLATION AS collation FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA=%s ORDER BY TABLE_NAME", (schema,))
        return [{"name": str(r["name"]), "type": "view" if r["type"] == "VIEW" else "table",
                 "engine": r["engine"], "rows": int(r["rows"] or 0), "data_bytes": int(r["data_bytes"] or 0),
                 "index_bytes": int(r["index_bytes"] or 0), "avg_row_bytes": int(r["avg_row_bytes"] or 0),
                 "partitioned": "partitioned" in str(r["options"] or "").lower(), "collation": r["collation"]}
                for r in rows]

    def tables_from_persistent_stats(self, schema: str) -> list[dict[str, Any]]:
        """What tables() gives, without opening a table: names from SHOW FULL TABLES, rows and
        sizes from InnoDB's persistent statistics (a partition's rows added to its table's);
        engine, collation and partitioning are filled from the CREATE statement (table_options)."""
        listed = self.server.query(f"SHOW FULL TABLES FROM `{schema}`")
        page = int(self.server.scalar("SELECT @@GLOBAL.innodb_page_size AS p") or 16384)
        sums: dict[str, list[int]] = {}
        for r in self.server.query("SELECT table_name AS t, n_rows AS r, clustered_index_size AS c, "
                                   "sum_of_other_index_sizes AS o FROM mysql.innodb_table_stats "
                                   "WHERE database_name=%s", (schema,)):
            acc = sums.setdefault(_PARTITION.split(str(r["t"]))[0], [0, 0, 0])
            acc[0] += int(r["r"] or 0)
            acc[1] += int(r["c"] or 0) * page
            acc[2] += int(r["o"] or 0) * page
        out = []
        for r in sorted(listed, key=lambda r: str(list(r.values())[0])):
            name, kind = (str(v) for v in list(r.values())[:2])
            rows, data, index = sums.get(name, [0, 0, 0])
            out.append({"name": name, "type": "view" if kind == "VIEW" else "table", "engine": None, "rows": rows,
                        "data_bytes": data, "index_bytes": index, "avg_row_bytes": data // rows if rows else 0,
                        "partitioned": False, "collation": None})
        return out

    @staticmethod
    def table_options(create: str) -> dict[str, Any]:
        """Engine, collation and partitioning as a CREATE TABLE statement states them."""
        engine = re.search(r"\)\s*ENGINE=(\w+)", create)
        collation = re.search(r"\bCOLLATE=(\w+)", create)
        return {"engine": engine.group(1) if engine else None, "collation": collation.group(1) if collation else None,
                "partitioned": bool(re.search(r"\bPARTITION\s+BY\b", create, re.IGNORECASE))}

    def create_statement(self, schema: str, name: str, kind: str) -> str:
        """SHOW CREATE TABLE | VIEW | PROCEDURE | FUNCTION | TRIGGER | EVENT."""
        row = self.server.query(f"SHOW CREATE {kind.upper()} `{schema}`.`{name}`")[0]
        key = next(k for k in row if k.lower().startswith("create ") or k.lower() in ("sql original statement",))
        return str(row[key])

    def routines(self, schema: str) -> list[tuple[str, str]]:
        rows = self.server.query("SELECT ROUTINE_TYPE AS t, ROUTINE_NAME AS n FROM information_schema.ROUTINES "
                                 "WHERE ROUTINE_SCHEMA=%s ORDER BY ROUTINE_NAME", (schema,))
        return [(str(r["t"]).lower(), str(r["n"])) for r in rows]

    def triggers(self, schema: str) -> list[str]:
        rows = self.server.query("SELECT TRIGGER_NAME AS n FROM information_schema.TRIGGERS "
                                 "WHERE TRIGGER_SCHEMA=%s ORDER BY TRIGGER_NAME", (schema,))
        return [str(r["n"]) for r in rows]

    def events(self, schema: str) -> list[str]:
        rows = self.server.query("SELECT EVENT_NAME AS n FROM information_schema.EVENTS "
                                 "WHERE EVENT_SCHEMA=%s ORDER BY EVENT_NAME", (schema,))
        return [str(r["n"]) for r in rows]

    def sample(self, schema: str, table: str, rows: int, batch: int = SAMPLE_BATCH
               ) -> Iterator[tuple[list[str], list[tuple[Any, ...]]]]:
        """At most `rows` rows, `batch` at a time: primary-key range reads (`pk > last ORDER BY pk
        LIMIT batch`) where the key is one column, else one bounded read in the table's own order.
        Long values (BLOB, TEXT, JSON) come back as Measured(length, CRC32): the server sends a
        few bytes per value and nothing of its content. Yields (columns, rows) per read, so that
        the caller can pause between them."""
        described = self.columns(schema, table)
        if not described:
            return
        names = [str(c["name"]) for c in described]
        select = []
        for c in described:
            name, kind = str(c["name"]), str(c["data_type"]).lower()
            if kind in MEASURED_TYPES:
                length = "LENGTH" if "blob" in kind else "CHAR_LENGTH"
                select.append(f"{length}(`{name}`) AS `{name}`, CRC32(`{name}`) AS `{name}{_CRC}`")
            else:
                select.append(f"`{name}`")
        measured = [str(c["name"]) for c in described if str(c["data_type"]).lower() in MEASURED_TYPES]
        keys = [str(c["name"]) for c in described if c["key"] == "PRI"]
        key = keys[0] if len(keys) == 1 and keys[0] not in measured else None  # a TEXT key is read as its length
        base = f"SELECT {', '.join(select)} FROM `{schema}`.`{table}`"
        last, taken = None, 0
        while taken < rows:
            n = min(batch, rows - taken) if key else rows
            if key is None:
                found = self.server.query(f"{base} LIMIT {int(n)}")
            elif last is None:
                found = self.server.query(f"{base} ORDER BY `{key}` LIMIT {int(n)}")
            else:
                found = self.server.query(f"{base} WHERE `{key}` > %s ORDER BY `{key}` LIMIT {int(n)}", (last,))
            out = []
            for r in found:
                for m in measured:
                    r[m] = None if r[m] is None else Measured(int(r[m]), int(r[f"{m}{_CRC}"]))
                out.append(tuple(r[c] for c in names))
            yield names, out
            taken += len(out)
            if key is None or len(out) < n:
                return
            last = found[-1][key]

    def columns(self, schema: str, table: str) -> list[dict[str, Any]]:
        """A table's columns as the data generator needs them (type, length, key, extra)."""
        return self.server.query(
            "SELECT COLUMN_NAME AS name, DATA_TYPE AS data_type, COLUMN_TYPE AS column_type, IS_NULLABLE AS nullable, "
            "CHARACTER_MAXIMUM_LENGTH AS max_len, NUMERIC_SCALE AS scale, EXTRA AS extra, COLUMN_KEY AS `key` "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
            (schema, table))

    def accounts(self) -> list[tuple[str, str]]:
        marks = ", ".join(["%s"] * len(SYSTEM_USERS))
        rows = self.server.query(f"SELECT User AS u, Host AS h FROM mysql.user WHERE User NOT IN ({marks}) "
                                 "AND Host <> '' ORDER BY User, Host", SYSTEM_USERS)
        return [(str(r["u"]), str(r["h"])) for r in rows]

    def grants(self, user: str, host: str) -> list[str]:
        rows = self.server.query("SHOW GRANTS FOR %s@%s", (user, host))
        return [without_secrets(str(next(iter(r.values())))) for r in rows]

    # -- roles and PROXY grants (no secret in either) --
    def roles(self) -> list[tuple[str, str]]:
        """(name, host) of every role; the host is '' on MariaDB, where a role is a name."""
        return [(str(r["name"]), str(r["host"] or "")) for r in self.server.query(self.server.flavor.roles_sql())
                if str(r["name"]) not in SYSTEM_USERS]

    def role_privileges(self, name: str, host: str) -> list[str]:
        """SHOW GRANTS of a role: its privileges, and the roles granted to it."""
        rows = (self.server.query("SHOW GRANTS FOR %s@%s", (name, host)) if host
                else self.server.query("SHOW GRANTS FOR %s", (name,)))
        return [str(next(iter(r.values()))) for r in rows]

    def role_grants(self) -> list[dict[str, str]]:
        """Every grant of a role: {user, host, role, role_host} (to another role: its name and host)."""
        return [{k: str(r[k] or "") for k in ("user", "host", "role", "role_host")}
                for r in self.server.query(self.server.flavor.role_grants_sql())]

    def default_roles(self) -> list[dict[str, str]]:
        """The roles an account's sessions start with: {user, host, role, role_host}."""
        return [{k: str(r[k] or "") for k in ("user", "host", "role", "role_host")}
                for r in self.server.query(self.server.flavor.default_roles_sql())]

    def proxies(self) -> list[dict[str, Any]]:
        """PROXY grants: {user, host} may act as {proxied_user, proxied_host} (mysql.proxies_priv,
        the same table in both flavors)."""
        rows = self.server.query("SELECT User AS u, Host AS h, Proxied_user AS pu, Proxied_host AS ph, "
                                 "With_grant AS g FROM mysql.proxies_priv ORDER BY User, Host, Proxied_user")
        return [{"user": str(r["u"]), "host": str(r["h"]), "proxied_user": str(r["pu"]), "proxied_host": str(r["ph"]),
                 "with_grant": str(r["g"]) in ("1", "Y")} for r in rows if str(r["u"]) not in SYSTEM_USERS]

    def session_overrides(self) -> dict[str, Any]:
        """Per account, the session variables its sessions set to something else than the global
        value: from performance_schema.variables_by_thread (MySQL), else (MariaDB has no such
        table) from the SET statements performance_schema's digests and statement history saw.
        {"available": False, "why": ...} when neither can tell."""
        try:
            on = str(self.server.scalar("SELECT @@GLOBAL.performance_schema AS p")).upper() in ("1", "ON")
            if not on:
                return {"available": False, "why": "performance_schema is OFF: the sessions' own settings are not "
                                                   "visible; declare them in the shape's sessions.yaml"}
            marks = ", ".join(["%s"] * len(SESSION_VARIABLES))
            try:
                rows = self.server.query(
                    "SELECT t.PROCESSLIST_USER AS u, v.VARIABLE_NAME AS n, v.VARIABLE_VALUE AS v, "
                    "g.VARIABLE_VALUE AS g FROM performance_schema.variables_by_thread v "
                    "JOIN performance_schema.threads t ON t.THREAD_ID = v.THREAD_ID "
                    "JOIN performance_schema.global_variables g ON g.VARIABLE_NAME = v.VARIABLE_NAME "
                    f"WHERE t.PROCESSLIST_USER IS NOT NULL AND LOWER(v.VARIABLE_NAME) IN ({marks}) "
                    "AND NOT (v.VARIABLE_VALUE <=> g.VARIABLE_VALUE)", SESSION_VARIABLES)
            except QueryError as e:
                if e.errno != 1146:
                    raise
                return self._session_sets()
        except QueryError as e:
            return {"available": False, "why": f"performance_schema could not be read: {e.message}"}
        out: dict[str, dict[str, str]] = {}
        for r in rows:
            if str(r["u"]) in SYSTEM_USERS:
                continue
            out.setdefault(str(r["u"]), {})[str(r["n"]).lower()] = str(r["v"])
        return {"available": True, "how": "performance_schema.variables_by_thread", "by_account": out}

    def _session_sets(self) -> dict[str, Any]:
        """MariaDB: which session variables the applications SET (digests, since the server
        started), and with which values per account where the statement history still holds
        the SET (it needs the events_statements_current consumer and _history_long, or _history,
        which keeps only each session's last statements)."""
        counts: dict[str, int] = {}
        for r in self.server.query("SELECT DIGEST_TEXT AS t, COUNT_STAR AS n FROM "
                                   "performance_schema.events_statements_summary_by_digest WHERE DIGEST_TEXT LIKE 'SET %'"):
            for name in _SET_VARIABLE.findall(str(r["t"])):
                if name.lower() in SESSION_VARIABLES:
                    counts[name.lower()] = counts.get(name.lower(), 0) + int(r["n"] or 0)
        by_account: dict[str, dict[str, str]] = {}
        rows = [r for table in ("events_statements_history_long", "events_statements_history") for r in self.server.query(
            f"SELECT t.PROCESSLIST_USER AS u, h.SQL_TEXT AS s FROM performance_schema.{table} h "
            "JOIN performance_schema.threads t ON t.THREAD_ID = h.THREAD_ID WHERE h.SQL_TEXT LIKE 'SET %' "
            "AND t.PROCESSLIST_USER IS NOT NULL ORDER BY h.EVENT_ID")]
        for r in rows:
            if str(r["u"]) in SYSTEM_USERS:
                continue
            for name, value in _SET_VALUE.findall(str(r["s"])):
                if name.lower() in SESSION_VARIABLES:
                    by_account.setdefault(str(r["u"]), {})[name.lower()] = value.strip("'\"")
        why = None if by_account else (
            "the sessions' values are not visible (MariaDB has no variables_by_thread and the statement history "
            "holds no SET)" + (f"; applications SET {', '.join(sorted(counts))}: declare the values in the shape's "
                               f"sessions.yaml" if counts else ""))
        return {"available": bool(by_account), "how": "SET statements in performance_schema's statement history",
                "set_since_start": counts, "by_account": by_account, **({"why": why} if why else {})}


def load_script(schemas: dict[str, Any]) -> str:
    """The captured CREATE statements as a script a server loads: tables first (foreign key
    checks off), then views, routines, triggers and events (they may name any table)."""
    out = ["SET FOREIGN_KEY_CHECKS=0;"]
    for name, sc in schemas.items():
        out.append(f"CREATE DATABASE IF NOT EXISTS `{name}`;\nUSE `{name}`;")
        out += [t["create"] + ";" for t in sc["tables"] if t["type"] == "table"]
    for name, sc in schemas.items():
        out.append(f"USE `{name}`;")
        out += [t["create"] + ";" for t in sc["tables"] if t["type"] == "view"]
        out += ["DELIMITER ;;\n" + r["create"] + ";;\nDELIMITER ;" for r in sc["routines"]]
        out += ["DELIMITER ;;\n" + t["create"] + ";;\nDELIMITER ;" for t in sc["triggers"]]
        out += ["DELIMITER ;;\n" + e["create"] + ";;\nDELIMITER ;" for e in sc["events"]]
    out.append("SET FOREIGN_KEY_CHECKS=1;")
    return "\n".join(out) + "\n"
