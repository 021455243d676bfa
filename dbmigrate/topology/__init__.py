"""Topology: what each server is (probe), how they connect (discovery), orchestrator."""
