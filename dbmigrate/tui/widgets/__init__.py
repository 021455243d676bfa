"""Widgets of the cutover session: the step list, the live panels, the log, the dialogs."""

from dbmigrate.tui.widgets.gate import GateModal
from dbmigrate.tui.widgets.keys import KeysScreen
from dbmigrate.tui.widgets.log import EventLog
from dbmigrate.tui.widgets.panels import LagPanel, LatencyPanel, WarmPanel
from dbmigrate.tui.widgets.steps import StepList

__all__ = ["EventLog", "GateModal", "KeysScreen", "LagPanel", "LatencyPanel", "StepList", "WarmPanel"]
