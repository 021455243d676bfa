"""The gate dialog's count line agrees with the marks below it: a passed check whose sentence
holds warnings counts as warned, and gates without checks of their own count as what they are."""

from __future__ import annotations

from dbmigrate.engine.events import GateWaiting
from dbmigrate.procedures.kit.preflight_checks import writers_fence_rule
from dbmigrate.tui.board import GateRow
from dbmigrate.tui.widgets.gate import gate_text

GO_AHEAD = GateWaiting(phase="cutover", gate="go-ahead", kind="manual", prompt="Fence and promote?")


def counts_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("automatic gates so far"))


def test_a_passed_check_with_warnings_in_its_sentence_counts_as_warned():
    # The real check's sentence: root and ops bypass read_only with global privileges, no session now.
    fence = writers_fence_rule({("root", "localhost"): {"global"}, ("ops", "%"): {"global"},
                                ("app", "%"): {"schema"}}, {"root", "ops"}, [], set(), set(), "db-1")
    assert fence.ok and fence.reason.count("warning: ") == 2, fence.reason
    preflight = GateRow("preflight", "preflight", "auto", "passed", "all 2 checks run",
                        details={"read_only_fence": {"ok": True, "reason": fence.reason},
                                 "lag": {"ok": True, "reason": "worst lag 3 ms (limit 1000 ms)"}})
    text = gate_text(GO_AHEAD, [preflight]).plain
    assert "1 gate(s), 2 check(s): 0 failed, 1 warned, 1 passed" in counts_line(text), text
    assert "  ! read_only_fence: " in text and "  ✓ lag: " in text, text
    # The warned check comes first: it is what needs the operator's eyes.
    assert text.index("read_only_fence") < text.index("lag:"), text


def test_gates_without_checks_of_their_own_are_counted():
    """The consolidation's go-ahead: two passed gates whose details are figures, not checks."""
    preflight = GateRow("preflight", "preflight", "auto", "passed", "every old server and instance checked",
                        details={"servers": 4})
    caught_up = GateRow("cutover", "caught-up", "auto", "passed", "2 connection(s) running, each within 5s",
                        details={"db-multi-1-1<-db-legacy-1": {"seconds_behind": 0, "io": "Yes", "sql": "Yes"}})
    text = gate_text(GO_AHEAD, [preflight, caught_up]).plain
    assert "2 gate(s): 0 failed, 0 warned, 2 passed" in counts_line(text), text
    assert "✓ gate preflight: " in text and "✓ gate caught-up: " in text, text


def test_a_mix_of_gates_with_and_without_checks_counts_both():
    preflight = GateRow("preflight", "preflight", "auto", "passed", "all 1 checks run",
                        details={"lag": {"ok": False, "reason": "db-2 is 4000 ms behind (limit 1000 ms)"}})
    caught_up = GateRow("cutover", "caught-up", "auto", "refused", "db-2 is 41 s behind", details={})
    line = counts_line(gate_text(GO_AHEAD, [preflight, caught_up]).plain)
    assert "2 gate(s), 1 check(s) and 1 gate(s) without checks of their own: 2 failed, 0 warned, 0 passed" in line
