"""A reader that goes away (``lmserde plugins | head -1``) ends a command quietly: no traceback,
exit 141 (128 + SIGPIPE, as a shell reports a command a closed pipe killed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from lmserde.cli.main import EXIT_BROKEN_PIPE

#: Starting Python and importing torch for ``info`` takes seconds on a loaded 2-core machine.
TIMEOUT_S = 120


def _run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``lmserde ARGS`` with stdout on a pipe whose reading end is closed before the
    command starts, so its first write meets a broken pipe (what ``| head -1`` does to any
    output longer than what head reads)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "lmserde", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S, check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [("plugins",), ("plugins", "--json"), ("info", "identity")],
                         ids=" ".join)
def test_a_closed_pipe_ends_the_command_quietly(args: tuple[str, ...]) -> None:
    result = _run_into_closed_pipe(*args)
    assert result.returncode == EXIT_BROKEN_PIPE == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


def test_argparse_output_into_a_closed_pipe_stays_quiet() -> None:
    result = _run_into_closed_pipe("--version")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


def test_head_reads_the_first_line_of_a_real_pipeline() -> None:
    producer = subprocess.Popen([sys.executable, "-m", "lmserde", "plugins"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert producer.stdout is not None
    head = subprocess.run(["head", "-1"], stdin=producer.stdout, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=True)
    producer.stdout.close()
    _, err = producer.communicate(timeout=TIMEOUT_S)
    assert head.stdout.startswith("Core: lmserde ") and head.stdout.count("\n") == 1
    assert producer.returncode in (0, EXIT_BROKEN_PIPE)  # 0 when it wrote all before head left
    assert b"Traceback" not in err
