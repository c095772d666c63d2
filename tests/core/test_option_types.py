"""Issue #27 case 8: numeric options take numbers of the declared type only.

An ``int`` option accepts an ``int``; a ``float`` option an ``int`` or a ``float``. A string
(``"2"``, ``"1e3"``), a float for an int (``2.0``) or a ``bool`` is a ``ValueError`` naming the
option, the value and the expected type, for serdes and L2 adapters alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lmserde import SerdeOption, create_serde_processor
from lmserde.l2.build import create_l2_adapter
from lmserde.options import validate_options

INT = SerdeOption("count", int, 1)
FLOAT = SerdeOption("seconds", float, 1.0)


@pytest.mark.parametrize("value", ["2", "1e3", 2.0, 1e3, True, False, None, [2]])
def test_an_int_option_refuses_anything_but_an_int(value: Any) -> None:
    with pytest.raises(ValueError) as info:
        validate_options("t", [INT], {"count": value})
    message = str(info.value)
    assert "'count'" in message and "must be an integer (int)" in message
    assert repr(value) in message and type(value).__name__ in message


@pytest.mark.parametrize("value", ["2.5", "2", True, None])
def test_a_float_option_refuses_strings_and_bools(value: Any) -> None:
    with pytest.raises(ValueError, match=r"option 'seconds' must be a number \(int or float\)"):
        validate_options("t", [FLOAT], {"seconds": value})


def test_numbers_of_the_declared_type_are_taken() -> None:
    options = validate_options("t", [INT, FLOAT], {"count": 3, "seconds": 2})
    assert options == {"count": 3, "seconds": 2.0}
    assert isinstance(options["seconds"], float)
    assert validate_options("t", [FLOAT], {"seconds": 0.25})["seconds"] == 0.25


@pytest.mark.parametrize("workers", ["2", 2.0, "1e3"])
def test_a_serde_refuses_a_max_workers_of_another_type(workers: Any) -> None:
    with pytest.raises(ValueError, match="serde 'identity': option 'max_workers' must be an "
                                         "integer"):
        create_serde_processor({"type": "identity", "max_workers": workers})


def test_an_adapter_refuses_a_count_of_another_type(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="L2 adapter 'fs': option 'io_workers' must be an "
                                         "integer"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path), "io_workers": "2"})
    with pytest.raises(ValueError, match="option 'stale_tmp_seconds' must be a number"):
        create_l2_adapter({"type": "fs", "base_path": str(tmp_path),
                           "stale_tmp_seconds": "60"})
