"""Procedure `schema_swap`: DDL one side at a time without binlogging it (see procedure.py)."""
