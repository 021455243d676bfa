"""Evidence reports: what a run measured, as one self-contained HTML page and the same numbers as JSON."""
