"""Widgets of the cutover session: the step list, the live panels and the gate dialog."""

from dbmigrate.tui.widgets.gate import GateModal
from dbmigrate.tui.widgets.panels import LagPanel, LatencyPanel, WarmPanel
from dbmigrate.tui.widgets.steps import StepList

__all__ = ["GateModal", "LagPanel", "LatencyPanel", "StepList", "WarmPanel"]
