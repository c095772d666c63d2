"""The ``lmserde`` command line (extended by plugins through the ``lmserde_add_cli_commands`` hook)."""
