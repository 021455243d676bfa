"""One example per command, shown at the end of its --help (typer's epilog)."""

from __future__ import annotations

import typer

EXAMPLES = {
    "check": "dbmigrate check -i inventory.yaml -c shop --candidate db-4",
    "checksum": "dbmigrate checksum -i inventory.yaml -c shop -d app,shop",
    "run": "dbmigrate run playbooks/promote-replica.yaml --dry-run",
    "plan": "dbmigrate plan playbooks/schema-ab-swap.yaml",
    "resume": "dbmigrate resume last --cluster shop",
    "rollback": "dbmigrate rollback last --cluster shop",
    "warm": "dbmigrate warm -i inventory.yaml --target db-4 --from db-1 --method dump-load",
    "tui": "dbmigrate tui playbooks/promote-replica.yaml --start",
    "sandbox up": "dbmigrate sandbox up --name demo --replicas 2 --haproxy",
    "sandbox add-instance": "dbmigrate sandbox add-instance demo --instance demo-new --replica-of demo-1",
    "sandbox status": "dbmigrate sandbox status demo",
    "sandbox ls": "dbmigrate sandbox ls",
    "sandbox down": "dbmigrate sandbox down demo",
    "inventory check": "dbmigrate inventory check inventory.yaml --cluster shop",
    "inventory validate": "dbmigrate inventory validate inventory.yaml",
    "topology show": "dbmigrate topology show --seed 10.0.0.11:3306 -i inventory.yaml",
    "topology wire": "dbmigrate topology wire -i playbooks/compose/inventory.yaml -c compose",
    "lag watch": "dbmigrate lag watch -i inventory.yaml -c shop --once --json",
    "runs ls": "dbmigrate runs ls -n 5",
    "runs show": "dbmigrate runs show last --json",
    "rehearse promote": "dbmigrate rehearse promote --regress",
    "digest capture": "dbmigrate digest capture -i inventory.yaml -s db-1 --seconds 30 -o before.json",
    "shape capture": "dbmigrate shape capture -i inventory.yaml -c shop -o shape/ --seconds 60",
    "digest show": "dbmigrate digest show before.json --limit 10",
    "digest compare": "dbmigrate digest compare before.json after.json --markdown",
    "digest evaluate": "dbmigrate digest evaluate --policy playbooks/promote-replica.yaml before.json after.json",
    "digest restore": "dbmigrate digest restore -i inventory.yaml -s db-1 --from-file x.saved-settings.json",
    "runs report": "dbmigrate runs report last -o cutover.html",
    "consolidate provision": "dbmigrate consolidate provision --plan plan.json --inventory inventory.yaml --dry-run",
    "consolidate status": "dbmigrate consolidate status --plan plan.json --inventory inventory.yaml --cluster shards",
    "rehearse consolidate": "dbmigrate rehearse consolidate --remote --json",
    "rehearse schema-swap": "dbmigrate rehearse schema-swap --name weekly-ddl",
    "rehearse down": "dbmigrate rehearse down rehearsal-1a2b",
    "consolidate run": "dbmigrate consolidate run playbooks/consolidate-shards.yaml --throttle 50 --concurrency 4",
    "consolidate throttle": "dbmigrate consolidate throttle last --mb-s 20",
    "consolidate rollback": "dbmigrate consolidate rollback last --server db-07",
    "consolidate plan": "dbmigrate consolidate plan --inventory inventory.yaml --from-inventory --out plan.json",
}


def add_examples(group: typer.Typer, prefix: str = "") -> list[str]:
    """Put each command's example in its epilog; returns the commands that have none."""
    missing = []
    for info in group.registered_commands:
        name = prefix + (info.name or info.callback.__name__.replace("_", "-"))
        if name in EXAMPLES and not info.epilog:
            info.epilog = f"Example: {EXAMPLES[name]}"
        elif name not in EXAMPLES:
            missing.append(name)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            missing += add_examples(sub.typer_instance, prefix + sub.name + " ")
    return missing
