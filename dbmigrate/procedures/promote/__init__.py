"""Procedure `promote`: a new-hardware replica becomes the primary (see procedure.py)."""
