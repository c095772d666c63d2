"""``python -m lmserde``: the ``lmserde`` command."""

from __future__ import annotations

import sys

from lmserde.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
