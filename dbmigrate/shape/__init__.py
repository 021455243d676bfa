"""A production database's shape (schema, sizes, column statistics, accounts, session settings,
query classes), captured without its data so that a rehearsal can be shaped like production."""
