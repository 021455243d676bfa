"""Query digests: parsed pt-query-digest captures, comparisons, the latency guard policy, reports."""
