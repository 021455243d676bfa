"""Command line: one module per command group; thin (parse, call one action, render)."""
