"""Reads of server state, one reader per subject, each constructed from a Server and usable alone:
replication (positions, replica status, named connections, waits), sessions (who runs what, blockers,
lock holders, heavy work), schema (tables, indexes, sizes, checksums, chunks), accounts (grants and
roles), status (variables, status counters, read_only, identity, files, buffer pool). Shared basics are
in base.Reader. db/inspector.py's Inspector combines them all."""
