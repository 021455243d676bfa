"""`--shape` with `--compose`: promote loads it into containers; the other rehearsals refuse it
before anything starts, saying which works."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbmigrate.exceptions import UsageError
from dbmigrate.rehearsal.rehearse import check_shape_options

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "shapes" / "ca-capture"


def test_promote_takes_a_shape_with_compose():
    assert check_shape_options(CAPTURE, 0.02, True, "promote").classes


@pytest.mark.parametrize("rehearsal", ["schema-swap", "consolidate"])
def test_the_other_rehearsals_refuse_a_shape_with_compose(rehearsal):
    with pytest.raises(UsageError) as e:
        check_shape_options(CAPTURE, 0.02, True, rehearsal)
    assert f"available for `rehearse promote` only, not for `rehearse {rehearsal}`" in str(e.value)
    assert check_shape_options(CAPTURE, 0.02, False, rehearsal).classes  # the sandbox takes it
