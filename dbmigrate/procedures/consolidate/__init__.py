"""Procedure `consolidate`: logical shards onto multi-instance hosts, and its capacity plan (plan.py)."""
