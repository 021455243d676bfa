"""Connection layer: Server handles, flavor dialect, readers and inspector (reads), applier (writes)."""
