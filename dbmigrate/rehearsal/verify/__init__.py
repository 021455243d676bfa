"""Zero-loss verification: write sequence numbers through the router during a
switchover, then prove that every acknowledged one is on the final primary and
its replicas, and measure the longest write gap (the fenced window)."""

from dbmigrate.rehearsal.verify.report import Ack, Gap, VerifyReport, longest_gap, zero_loss_gate
from dbmigrate.rehearsal.verify.writer import DEFAULT_TABLE, VerifierError, ZeroLossVerifier

__all__ = ["Ack", "Gap", "VerifyReport", "longest_gap", "zero_loss_gate", "ZeroLossVerifier", "VerifierError",
           "DEFAULT_TABLE"]
