"""Buffer pool warm-up mechanics: measurement, dump files, digests, read workers.

The operator-facing methods (dump-load, replay, scan) and the gate live in
dbmigrate.warm.methods; this package holds the pieces they are built from.
"""
