"""Compose rehearsals: the sandbox rehearsals' playbooks against the containers of docker-compose.yml.

engine.py finds or starts the Docker Engine, images.py builds the images without a registry,
cli.py picks Compose v2 or 1.29, topology.py starts, wires and removes one topology, and
run.py ties them together for a rehearsal (ComposeRun) and removes a kept one (teardown).
"""
