"""Compose rehearsals: the sandbox rehearsals' playbooks against containers of docker-compose.yml.

`session()` gives an engine (found or started), the images (built once, cached) and
a ComposeTopology to start servers with; on leaving it, an engine the run started
is stopped, whatever happened.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

Progress = Callable[[str], None]


@contextmanager
def session(progress: Progress | None = None) -> Iterator["ComposeTopology"]:
    from dbmigrate.rehearsal.compose.engine import acquire
    from dbmigrate.rehearsal.compose.images import ensure_images
    from dbmigrate.rehearsal.compose.topology import ComposeTopology, refuse_kept

    refuse_kept()  # before an engine is started or an image built
    engine = acquire(progress)
    try:
        images = ensure_images(engine, progress)
        yield ComposeTopology(engine, images, progress)
    finally:
        engine.stop()


from dbmigrate.rehearsal.compose.topology import ComposeTopology  # noqa: E402  (for the annotation)

__all__ = ["ComposeTopology", "session"]
