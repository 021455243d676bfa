"""The type checker CI runs (mypy, strict, configured in pyproject.toml) catches what it is there for.

`.ci/run` runs it over procedures/, engine/, db/, app/ and the packages beside them before the
tests. These tests prove that it fails where it should: a call from one switchover step's file to a
method another step's file defines, made with the wrong arguments or to a method that does not
exist, and params read as the wrong procedure's model (through a helper, or in a step whose run
context names its procedure's params). Each case is a module written next to the real package (so
it imports the real code) and checked on its own.
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
    from dbmigrate.procedures.kit.switchover.base import SwitchoverBase


    class LateSteps(SwitchoverBase):
        def late(self) -> bool:
            return self.stopped_with_error(self.old) is not None
"""


def test_a_well_typed_cross_step_call_passes(tmp_path, cache_dir):
    result = check(tmp_path, cache_dir, CROSS_STEP_OK)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("body, error", [
    # reverse.py defines stopped_with_error(name: str): an int is refused
    ("return self.stopped_with_error(42) is not None", "arg-type"),
    # a step that calls what no step defines
    ("return self.stoped_with_error(self.old) is not None", "attr-defined"),
    # fence.py's bypass_users takes no argument
    ("return bool(self.bypass_users(self.old))", "call-arg"),
])
def test_a_broken_cross_step_call_fails(tmp_path, cache_dir, body, error):
    source = CROSS_STEP_OK.replace("return self.stopped_with_error(self.old) is not None", body)
    result = check(tmp_path, cache_dir, source)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"[{error}]" in result.stdout, result.stdout


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
