"""Consolidation's use cases beyond run/resume/rollback: plan (placement and what-if), provision
(instances created by Ansible), status (where each shard is served), board (the fleet's layout
for a live board), control (one old server rolled back, the seeding throttle of a live run)."""
