"""Connection layer: Server handles, flavor dialect, inspector (reads), applier (writes)."""
