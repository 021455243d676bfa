"""The type checker CI runs (mypy, strict, configured in pyproject.toml) catches what it is there for.

`.ci/run` runs it over procedures/, engine/, db/, app/ and the packages beside them before the
tests. These tests prove that it fails where it should: a call from one switchover step's
collaborator to another it is handed, made with the wrong arguments or to a method that
collaborator does not have, a collaborator built with the wrong one, and params read as the wrong
procedure's model (through a helper, or in a step whose run context names its procedure's
params). Each case is a module written next to the real package (so it imports the real code)
and checked on its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mypy", reason="the type checker is installed with the test extras")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for every case: the package is analysed once, each case's module on its own."""
    return tmp_path_factory.mktemp("mypy_cache")


def check(tmp_path: Path, cache: Path, source: str) -> subprocess.CompletedProcess[str]:
    """mypy, with the project's configuration, over one module that imports the real package."""
    module = tmp_path / "typed_case.py"
    module.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(cache), "--follow-imports", "silent",
                           str(module)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


CROSS_STEP_OK = """
    from dbmigrate.procedures.kit.switchover.fence import OldPrimaryFence
    from dbmigrate.procedures.kit.switchover.inputs import StepInputs
    from dbmigrate.procedures.kit.switchover.reverse import ReverseReplication
    from dbmigrate.procedures.kit.switchover.verify import VerifyWrites


    class LateFollowers:
        \"\"\"A step built like the switchover's: the collaborators it calls are handed to it.\"\"\"

        def __init__(self, on: StepInputs, fence: OldPrimaryFence, reverse: ReverseReplication):
            self.on, self.fence, self.reverse = on, fence, reverse

        def late(self) -> bool:
            return self.reverse.stopped_with_error(self.on.old) is not None


    def compose(on: StepInputs, reverse: ReverseReplication) -> VerifyWrites:
        return VerifyWrites(on, reverse)
"""
WELL_TYPED_CALL = "return self.reverse.stopped_with_error(self.on.old) is not None"


def test_a_well_typed_call_to_another_collaborator_passes(tmp_path, cache_dir):
    result = check(tmp_path, cache_dir, CROSS_STEP_OK)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("broken, error", [
    # reverse.py's stopped_with_error takes a server's name: an int is refused
    ("return self.reverse.stopped_with_error(42) is not None", "arg-type"),
    # a method no collaborator defines
    ("return self.reverse.stoped_with_error(self.on.old) is not None", "attr-defined"),
    # a method of another collaborator, called on the wrong one (fence.py's, not reverse.py's)
    ("return bool(self.reverse.bypass_users())", "attr-defined"),
    # fence.py's bypass_users takes no argument
    ("return bool(self.fence.bypass_users(self.on.old))", "call-arg"),
])
def test_a_broken_call_to_another_collaborator_fails(tmp_path, cache_dir, broken, error):
    result = check(tmp_path, cache_dir, CROSS_STEP_OK.replace(WELL_TYPED_CALL, broken))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"[{error}]" in result.stdout, result.stdout


def test_a_collaborator_handed_the_wrong_collaborator_fails(tmp_path, cache_dir):
    # VerifyWrites is built with the reverse replication (it reads a stopped follower through it)
    source = CROSS_STEP_OK.replace("def compose(on: StepInputs, reverse: ReverseReplication)",
                                   "def compose(on: StepInputs, reverse: OldPrimaryFence)")
    result = check(tmp_path, cache_dir, source)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[arg-type]" in result.stdout and "VerifyWrites" in result.stdout, result.stdout


def test_params_read_as_the_wrong_model_fail(tmp_path, cache_dir):
    result = check(tmp_path, cache_dir, """
        from dbmigrate.engine.playbook_view import PlaybookView, typed_params
        from dbmigrate.procedures.schema_swap.params import SchemaSwapParams


        def ddl_count(playbook: PlaybookView) -> int:
            return typed_params(playbook, SchemaSwapParams).no_such_field
    """)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no_such_field" in result.stdout and "[attr-defined]" in result.stdout, result.stdout


def test_a_step_reading_a_field_its_params_model_lacks_fails(tmp_path, cache_dir):
    # A schema swap's steps see SchemaSwapParams: `candidate` is one of its fields, `read_share` is promote's.
    step = """
        from dbmigrate.procedures.schema_swap.context import SwapContext


        def step(ctx: SwapContext) -> str:
            return f"{ctx.params.candidate} {ctx.resources.primary}"
    """
    ok = check(tmp_path, cache_dir, step)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    result = check(tmp_path, cache_dir, step.replace("ctx.params.candidate", "ctx.params.read_share"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "read_share" in result.stdout and "[attr-defined]" in result.stdout, result.stdout
