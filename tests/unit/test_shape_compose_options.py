"""`--shape` and `--scale` are checked before any sandbox or compose topology is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbmigrate.exceptions import UsageError
from dbmigrate.rehearsal.rehearse import check_shape_options

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "shapes" / "ca-capture"


def test_a_capture_is_read_with_its_classes():
    assert check_shape_options(CAPTURE, 0.02).classes


@pytest.mark.parametrize("scale", [0, 1.5, -0.1])
def test_a_scale_outside_the_captured_rows_is_refused(scale):
    with pytest.raises(UsageError) as e:
        check_shape_options(CAPTURE, scale)
    assert "above 0 and at most 1" in str(e.value)
