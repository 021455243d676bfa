"""Rehearsal support, kept apart from the product: the local sandbox of real mysqld processes,
the zero-loss verifier, load drivers (sysbench, a read load) and `rehearse`. Nothing in
dbmigrate's procedures, engine or db layer imports this package."""
