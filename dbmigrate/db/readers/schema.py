"""Reads of schemas and tables: names, columns, indexes, sizes, checksums and chunks, and probes
of a table (a point read, EXPLAIN)."""

from __future__ import annotations

from typing import Any

from dbmigrate.db.connection import QueryError
from dbmigrate.db.readers.base import Reader


class SchemaReader(Reader):
    def schemas(self) -> list[str]:
        rows = self.server.query(
            "SELECT SCHEMA_NAME AS s FROM information_schema.SCHEMATA WHERE SCHEMA_NAME NOT IN "
            "('mysql','information_schema','performance_schema','sys')")
        return [r["s"] for r in rows]

    def base_tables(self, schema: str) -> list[str]:
        rows = self.server.query(
            "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_TYPE='BASE TABLE' "
            "ORDER BY TABLE_NAME", (schema,))
        return [str(r["t"]) for r in rows]

    def tables_matching(self, schema: str, regex: str) -> list[str]:
        """Base tables of `schema` whose name matches `regex` (server-side REGEXP), as 'schema.table'."""
        rows = self.server.query(
            "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_TYPE='BASE TABLE' "
            "AND TABLE_NAME REGEXP %s ORDER BY TABLE_NAME", (schema, regex))
        return [f"{schema}.{r['t']}" for r in rows]

    def tables_in(self, schemas: list[str]) -> int:
        """How many base tables the given schemas hold (0 when none exists)."""
        if not schemas:
            return 0
        marks = ", ".join(["%s"] * len(schemas))
        return int(self.server.scalar(
            f"SELECT COUNT(*) AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({marks}) "
            "AND TABLE_TYPE='BASE TABLE'", tuple(schemas)))

    def table_info(self, schema: str, table: str) -> dict[str, Any] | None:
        """Engine and on-disk size of a table, or None when it does not exist."""
        rows = self.server.query(
            "SELECT ENGINE AS engine, COALESCE(DATA_LENGTH,0) + COALESCE(INDEX_LENGTH,0) AS bytes, "
            "TABLE_ROWS AS est_rows FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table))
        return rows[0] if rows else None

    def table_columns(self, schema: str, table: str) -> list[tuple[str, str]]:
        """(column, full column type) in table order; empty when the table does not exist."""
        rows = self.server.query(
            "SELECT COLUMN_NAME AS c, COLUMN_TYPE AS t FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (schema, table))
        return [(str(r["c"]), str(r["t"]).lower()) for r in rows]

    def table_indexes(self, schema: str, table: str) -> list[dict[str, Any]]:
        """Indexes in key order: [{'name', 'columns': [(column, data_type)], 'parts': [(column, prefix
        length or None, descending)], 'unique', 'type'}], PRIMARY first."""
        rows = self.server.query(
            "SELECT s.INDEX_NAME AS idx, s.COLUMN_NAME AS col, s.NON_UNIQUE AS non_unique, c.DATA_TYPE AS dtype, "
            "s.INDEX_TYPE AS itype, s.SUB_PART AS sub_part, s.COLLATION AS coll "
            "FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c "
            "ON c.TABLE_SCHEMA=s.TABLE_SCHEMA AND c.TABLE_NAME=s.TABLE_NAME AND c.COLUMN_NAME=s.COLUMN_NAME "
            "WHERE s.TABLE_SCHEMA=%s AND s.TABLE_NAME=%s ORDER BY s.INDEX_NAME='PRIMARY' DESC, s.INDEX_NAME, "
            "s.SEQ_IN_INDEX", (schema, table))
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            ix = out.setdefault(r["idx"], {"name": r["idx"], "columns": [], "parts": [],
                                           "unique": not int(r["non_unique"]),
                                           "type": str(r["itype"] or "BTREE").upper()})
            ix["columns"].append((r["col"], str(r["dtype"]).lower()))
            ix["parts"].append((r["col"], int(r["sub_part"]) if r["sub_part"] is not None else None,
                                str(r["coll"] or "") == "D"))
        return list(out.values())

    def table_sizes(self, tables: list[str]) -> dict[str, int]:
        """Data + index bytes of each 'schema.table' that exists."""
        pairs = [t.split(".", 1) for t in tables if "." in t]
        if not pairs:
            return {}
        marks = " OR ".join(["(TABLE_SCHEMA = %s AND TABLE_NAME = %s)"] * len(pairs))
        rows = self.server.query("SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t, DATA_LENGTH + INDEX_LENGTH AS n "
                                 f"FROM information_schema.TABLES WHERE {marks}", tuple(x for p in pairs for x in p))
        return {f"{r['s']}.{r['t']}": int(r["n"] or 0) for r in rows}

    def schema_sizes(self, schemas: list[str]) -> dict[str, int]:
        """Data + index bytes per schema, for the schemas that exist (an empty one counts 0)."""
        if not schemas:
            return {}
        marks = ", ".join(["%s"] * len(schemas))
        rows = self.server.query(
            "SELECT s.SCHEMA_NAME AS s, COALESCE(SUM(t.DATA_LENGTH + t.INDEX_LENGTH), 0) AS n "
            "FROM information_schema.SCHEMATA s LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME "
            f"WHERE s.SCHEMA_NAME IN ({marks}) GROUP BY s.SCHEMA_NAME", tuple(schemas))
        return {str(r["s"]): int(r["n"]) for r in rows}

    def data_size_bytes(self) -> int:
        """Data + index bytes of the user schemas (a rough size of what a copy must hold)."""
        return int(self.server.scalar(
            "SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) AS n FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA NOT IN ('mysql','information_schema','performance_schema','sys')") or 0)

    def integer_key_tables(self, schemas: list[str]) -> list[tuple[str, str, str, int]]:
        """(schema, table, column, rows) of tables keyed by one integer column, biggest first."""
        if not schemas:
            return []
        marks = ", ".join(["%s"] * len(schemas))
        rows = self.server.query(
            "SELECT k.TABLE_SCHEMA AS s, k.TABLE_NAME AS t, MIN(k.COLUMN_NAME) AS c, MAX(t.TABLE_ROWS) AS n "
            "FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA=k.TABLE_SCHEMA AND c.TABLE_NAME=k.TABLE_NAME "
            "AND c.COLUMN_NAME=k.COLUMN_NAME "
            "JOIN information_schema.TABLES t ON t.TABLE_SCHEMA=k.TABLE_SCHEMA AND t.TABLE_NAME=k.TABLE_NAME "
            f"WHERE k.CONSTRAINT_NAME='PRIMARY' AND k.TABLE_SCHEMA IN ({marks}) "
            "AND c.DATA_TYPE IN ('tinyint','smallint','mediumint','int','bigint') "
            "GROUP BY k.TABLE_SCHEMA, k.TABLE_NAME HAVING COUNT(*)=1 ORDER BY n DESC, s, t", tuple(schemas))
        return [(str(r["s"]), str(r["t"]), str(r["c"]), int(r["n"] or 0)) for r in rows]

    def key_range(self, schema: str, table: str, column: str) -> tuple[Any, Any]:
        row = self.server.query(f"SELECT MIN(`{column}`) AS lo, MAX(`{column}`) AS hi FROM `{schema}`.`{table}`")[0]
        return row["lo"], row["hi"]

    def userstat_enabled(self) -> bool:
        """MariaDB/Percona per-table statistics (information_schema.TABLE_STATISTICS) are being collected."""
        try:
            return str(self.variable("userstat")) in ("1", "ON")
        except Exception:  # MySQL has no userstat
            return False

    def rows_touched_by_schema(self, schemas: list[str]) -> dict[str, int]:
        """Rows read + changed per schema since userstat was turned on (a counter)."""
        if not schemas:
            return {}
        marks = ", ".join(["%s"] * len(schemas))
        rows = self.server.query(
            "SELECT TABLE_SCHEMA AS s, SUM(ROWS_READ + ROWS_CHANGED) AS n FROM information_schema.TABLE_STATISTICS "
            f"WHERE TABLE_SCHEMA IN ({marks}) GROUP BY TABLE_SCHEMA", tuple(schemas))
        return {str(r["s"]): int(r["n"] or 0) for r in rows}

    def table_checksums(self, schema: str) -> dict[str, int | None]:
        """CHECKSUM TABLE of every base table of `schema` (reads every row: size it before calling)."""
        tables = self.base_tables(schema)
        if not tables:
            return {}
        rows = self.server.query("CHECKSUM TABLE " + ", ".join(f"`{schema}`.`{t}`" for t in tables))
        return {str(r["Table"]).split(".", 1)[1]: (None if r["Checksum"] is None else int(r["Checksum"])) for r in rows}

    def checksum_layout(self, schema: str, table: str) -> tuple[list[str], str | None, int]:
        """(columns, the single integer primary key column or None, average row bytes) of a base
        table: what chunked checksums need to cut it into key ranges."""
        cols = [c for c, _t in self.table_columns(schema, table)]
        rows = self.server.query(
            "SELECT k.COLUMN_NAME AS c, c.DATA_TYPE AS t FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA=k.TABLE_SCHEMA AND c.TABLE_NAME=k.TABLE_NAME "
            "AND c.COLUMN_NAME=k.COLUMN_NAME "
            "WHERE k.CONSTRAINT_NAME='PRIMARY' AND k.TABLE_SCHEMA=%s AND k.TABLE_NAME=%s", (schema, table))
        key = str(rows[0]["c"]) if len(rows) == 1 and str(rows[0]["t"]) in (
            "tinyint", "smallint", "mediumint", "int", "bigint") else None
        avg = self.server.scalar("SELECT COALESCE(AVG_ROW_LENGTH, 0) AS n FROM information_schema.TABLES "
                                 "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (schema, table))
        return cols, key, int(avg or 0)

    def next_chunk_start(self, schema: str, table: str, key: str, after: int | None, rows: int) -> int | None:
        """The key `rows` rows past `after` (from the first row when None): where the next chunk
        starts; None past the last row. Reads only the primary key's index."""
        where = "" if after is None else f"WHERE `{key}` >= %s "
        got = self.server.scalar(f"SELECT `{key}` AS k FROM `{schema}`.`{table}` {where}ORDER BY `{key}` "
                                 f"LIMIT 1 OFFSET {int(rows) if after is not None else 0}",
                                 None if after is None else (int(after),))
        return None if got is None else int(got)

    def chunk_checksum(self, schema: str, table: str, columns: list[str], key: str | None,
                       lo: int | None, hi: int | None) -> str:
        """'rows:crc' of the rows of one key range [lo, hi) (lo/hi None: open; key None: the
        whole table). Every column is compared as bytes (mixed charsets, blobs), NULL apart
        from the empty string. The same query on both sides, so the result is comparable."""
        values = ", ".join(f"CAST(`{c}` AS BINARY)" for c in columns)
        nulls = ", ".join(f"ISNULL(`{c}`)" for c in columns)
        conds, args = [], []
        if key is not None and lo is not None:
            conds.append(f"`{key}` >= %s")
            args.append(int(lo))
        if key is not None and hi is not None:
            conds.append(f"`{key}` < %s")
            args.append(int(hi))
        where = f" WHERE {' AND '.join(conds)}" if conds else ""
        row = self.server.query(
            f"SELECT COUNT(*) AS n, COALESCE(BIT_XOR(CRC32(CONCAT_WS('#', {values}, CONCAT({nulls})))), 0) AS c "
            f"FROM `{schema}`.`{table}`{where}", tuple(args) or None)[0]
        return f"{int(row['n'])}:{int(row['c'])}"

    def checksum_differences(self, replicate_table: str) -> list[dict[str, Any]]:
        """Tables whose chunks differ in pt-table-checksum's replicate table, as this replica
        computed them: [{'db', 'tbl', 'chunks', 'replica_rows', 'primary_rows'}]."""
        db, _, tbl = replicate_table.partition(".")
        if not (db and tbl and (db + tbl).replace("_", "").replace("$", "").isalnum()):
            raise ValueError(f"not a db.table name: {replicate_table!r}")
        return self.server.query(
            "SELECT db, tbl, COUNT(*) AS chunks, SUM(this_cnt) AS replica_rows, SUM(master_cnt) AS primary_rows "
            f"FROM `{db}`.`{tbl}` WHERE master_cnt <> this_cnt OR master_crc <> this_crc "
            "OR ISNULL(master_crc) <> ISNULL(this_crc) GROUP BY db, tbl ORDER BY db, tbl")

    def point_read(self, schema: str, table: str, column: str, key: int) -> None:
        """One indexed read, the latency probe's query: what an application's lookup costs right now."""
        self.server.query(f"SELECT * FROM `{schema}`.`{table}` WHERE `{column}` >= %s ORDER BY `{column}` LIMIT 1",
                          (int(key),))

    def reach_table(self, schema: str, table: str) -> None:
        """Can this session read the table (privileges, existence)? No row is read."""
        self.server.query(f"SELECT 1 AS one FROM `{schema}`.`{table}` LIMIT 0")

    def explain_error(self, statement: str, schema: str | None) -> tuple[int, str] | None:
        """EXPLAIN an application's statement (its default schema set first): the error the
        server gives for it (unknown index, column, table ...), or None. Nothing is executed;
        use a session of its own (Server.dedicated): the default schema stays set."""
        try:
            if schema:
                self.server.execute(f"USE `{schema.replace('`', '``')}`")
            self.server.query("EXPLAIN " + statement)
            return None
        except QueryError as e:
            return (e.errno or 0, e.message)
