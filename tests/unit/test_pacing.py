"""The tool's CPU share outside the fenced window (dbmigrate.pacing)."""

from __future__ import annotations

import sys
import time

import pytest

from dbmigrate import pacing


@pytest.fixture(autouse=True)
def _stopped():
    pacing.stop()
    yield
    pacing.stop()


def burn(seconds: float) -> None:
    t = time.process_time()
    while time.process_time() - t < seconds:
        pass


def test_pressure_is_read_from_the_some_line():
    text = "some avg10=12.50 avg60=3.00 avg300=1.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    assert pacing.cpu_pressure_pct(text) == 12.5
    assert pacing.cpu_pressure_pct("full avg10=50.00\n") is None
    assert pacing.cpu_pressure_pct("some avg10=x\n") is None


def test_the_share_asked_for(monkeypatch):
    monkeypatch.setattr(pacing, "host_busy", lambda: True)
    assert pacing.requested({}) == pacing.AUTO_SHARE
    assert pacing.requested({"DBMIGRATE_CPU_SHARE": "auto"}) == pacing.AUTO_SHARE
    assert pacing.requested({"DBMIGRATE_CPU_SHARE": "0.25"}) == 0.25
    assert pacing.requested({"DBMIGRATE_CPU_SHARE": "off"}) is None
    assert pacing.requested({"DBMIGRATE_CPU_SHARE": "1"}) is None
    monkeypatch.setattr(pacing, "host_busy", lambda: False)
    assert pacing.requested({}) is None  # an idle host: the start-up stays quick
    assert pacing.requested({"DBMIGRATE_CPU_SHARE": "0.25"}) == 0.25  # asked for: paced anyway


def test_a_paced_process_keeps_its_cpu_within_its_share():
    assert pacing.begin(0.2) == 0.2
    wall0, cpu0 = time.monotonic(), time.process_time()
    for _ in range(20):
        burn(0.002)
        pacing.pace()
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    assert cpu >= 0.04
    # 40 ms of CPU at a share of 0.2 takes at least 0.2 s, less the one burst allowed ahead.
    assert wall >= (cpu - pacing.BURST_S) / 0.2 * 0.95
    assert pacing.paused_s() > 0


def test_no_pause_once_stopped_before_a_fence():
    pacing.begin(0.05)
    pacing.stop()
    burn(0.02)
    t = time.monotonic()
    pacing.pace()
    assert time.monotonic() - t < 0.01
    assert not pacing.pacing()


def test_imports_are_paced_until_stopped():
    pacing.begin(0.5)
    assert sys.meta_path[0] is pacing._finder
    pacing.stop()
    assert pacing._finder not in sys.meta_path


def test_nothing_is_paced_when_off(monkeypatch):
    monkeypatch.setattr(pacing, "host_busy", lambda: False)
    monkeypatch.delenv("DBMIGRATE_CPU_SHARE", raising=False)
    assert pacing.begin() is None  # auto on an idle host
    monkeypatch.setenv("DBMIGRATE_CPU_SHARE", "off")
    monkeypatch.setattr(pacing, "host_busy", lambda: True)
    assert pacing.begin() is None
    assert pacing.begin(0) is None
    assert not pacing.pacing()
    assert pacing._finder not in sys.meta_path
