"""Exit codes shared by every ``lmserde`` command (a command's own codes live in its module)."""

from __future__ import annotations

__all__ = ["EXIT_USAGE"]

#: Bad command-line input: an unknown name, a malformed spec, an occupied target (argparse uses
#: 2 as well).
EXIT_USAGE = 2
