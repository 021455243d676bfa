"""The public cutover kit every procedure builds on: switchover mechanics and the latency guard."""
