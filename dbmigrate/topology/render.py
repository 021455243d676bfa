"""Draw a cluster as a tree, in the spirit of orchestrator's topology view:

    127.0.0.1:3306 [primary, 0s, 10.11.6-MariaDB, rw, GTID, ROW]
    +- 127.0.0.1:3307 [replica, 0s, 10.11.6-MariaDB, ro, Slave_Pos, ROW]
"""

from __future__ import annotations

import re

from rich.markup import escape
from rich.tree import Tree

from dbmigrate.topology.discovery import Cluster, Node

ROLE_STYLE = {"primary": "bold green", "intermediate": "cyan", "replica": "cyan", "orphan": "yellow",
              "standalone": "yellow", "unreachable": "bold red"}


def short_version(version: str) -> str:
    """'10.11.19-MariaDB-0+deb12u1' -> '10.11.19-MariaDB' (the distribution suffix is noise in a tree)."""
    m = re.match(r"^(\d+\.\d+\.\d+(?:-MariaDB)?)", version or "")
    return m.group(1) if m else (version or "?")


def node_label(node: Node, markup: bool = True) -> str:
    f = node.facts
    if not node.reachable:
        parts = [node.role]
    else:
        if node.source:
            lag = "lag ?" if f.seconds_behind is None else f"{f.seconds_behind}s"
            behind = sum(node.behind.values())
            if behind:
                lag += f"/{behind}trx"
        else:
            lag = "-"
        parts = [node.role, lag, short_version(f.version), "rw" if f.read_only is False else "ro",
                 node.gtid_mode, f.binlog_format or "?"]
    name = f" ({node.name})" if node.name != node.address else ""
    text = f"{node.address}{name} [{', '.join(parts)}]"
    problems = "; ".join(node.problems)
    if not markup:
        return text + (f" {problems}" if problems else "")
    style = ROLE_STYLE.get(node.role, "")
    out = f"[{style}]{escape(text)}[/]" if style else escape(text)
    if problems:
        out += f" [red]{escape(problems)}[/]"
    return out


def cluster_tree(cluster: Cluster) -> Tree:
    where = f" (from {cluster.source})" if cluster.source != "probe" else ""
    tree = Tree(f"[bold]cluster {escape(cluster.name)}[/]{escape(where)}", guide_style="dim")
    seen: set[str] = set()

    def add(parent: Tree, node: Node) -> None:  # one branch per replication tree, under its root
        if node.address in seen:  # a replication loop (co-primaries): draw each server once
            parent.add(f"{escape(node.address)} [dim](loop)[/]")
            return
        seen.add(node.address)
        branch = parent.add(node_label(node))
        for addr in node.replicas:
            add(branch, cluster.nodes[addr])

    roots = cluster.roots() or list(cluster.nodes.values())[:1]
    # Primaries first, then orphans / standalone / unreachable servers.
    for node in sorted(roots, key=lambda n: (n.role != "primary", n.address)):
        add(tree, node)
    for node in cluster.nodes.values():
        if node.address not in seen:
            add(tree, node)
    cluster_wide = [p for p in cluster.problems if not p.startswith(tuple(f"{a}: " for a in cluster.nodes))]
    for p in cluster_wide:
        tree.add(f"[bold red]{escape(p)}[/]")
    for note in cluster.notes:
        tree.add(f"[dim]{escape(note)}[/]")
    return tree
