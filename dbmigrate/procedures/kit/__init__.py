"""The public cutover kit every procedure builds on.

    switchover  the mechanics of a planned switchover and `switch_back`
    cutover     those mechanics as engine steps, with their journaled `CutoverState`
    roles       who is the primary
    drain       the one rule for ending client sessions
    warmup      the one warm-up dispatcher and its gate
    preflight   the checks before a fence, as one gate
    resources   what a run opens (inventory, servers, primary, router, lock session)
    guard       the latency guard after a cutover
"""
