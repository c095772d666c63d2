"""Entry point of the ``lmserde`` command."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from packaging.utils import canonicalize_name

from lmserde._version import __version__
from lmserde.cli import (
    bench_command,
    info_command,
    keyring_commands,
    new_plugin_command,
    plugins_command,
    scrub_command,
)
from lmserde.cli.exit_codes import EXIT_USAGE
from lmserde.install_hints import CLI_COMMANDS, install_hint, providing_distribution
from lmserde.plugin_discovery import DISABLE_ENV

__all__ = ["build_parser", "main"]

_log = logging.getLogger(__name__)

#: Exit code when the reader of stdout went away: 128 + SIGPIPE, what a shell reports for a
#: command a closed pipe killed (``yes | head`` -> 141).
EXIT_BROKEN_PIPE = 141


def build_parser(*, with_plugin_commands: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmserde",
        description="KV-cache serdes: list plugins, inspect them, benchmark them, scrub L2, "
                    "manage keyrings.",
    )
    parser.add_argument("--version", action="version", version=f"lmserde {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins_command.add_parser(sub)
    info_command.add_parser(sub)
    scrub_command.add_parser(sub)
    new_plugin_command.add_parser(sub)
    bench_command.add_parser(sub)
    keyring_commands.add_parsers(sub)
    if with_plugin_commands:
        _add_plugin_commands(sub)
    return parser


def _add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Let hook plugins add subcommands; one that fails (raising anything) is reported and
    skipped, the others still add theirs."""
    from lmserde.hooks import call_hookimpls

    try:
        results = call_hookimpls("lmserde_add_cli_commands", subparsers=sub)
    except Exception as exc:
        _log.warning("plugins could not add CLI commands: %s: %s", type(exc).__name__, exc)
        return
    for result in results:
        if result.error is not None:
            _log.warning("plugin %r failed to add CLI commands: %s: %s", result.plugin_name,
                         type(result.error).__name__, result.error)


def _command_names(parser: argparse.ArgumentParser) -> set[str]:
    names: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            names.update(action.choices)
    return names


def _missing_command_message(parser: argparse.ArgumentParser, command: str) -> str | None:
    """What to say for a command a plugin of this repository adds when that plugin is not
    there (not installed, disabled, or failed to load); ``None`` for any other word."""
    dist = providing_distribution(CLI_COMMANDS, command)
    if dist is None or command in _command_names(parser):
        return None
    from lmserde.hooks import hook_plugin_records

    records = [r for r in hook_plugin_records()
               if canonicalize_name(r.distribution) == canonicalize_name(dist)]
    message = f"lmserde: unknown command '{command}'. "
    if not records:
        return message + install_hint(CLI_COMMANDS, command)
    record = records[0]
    if record.disabled:
        return message + f"'{command}' is provided by {dist}, which is disabled by {DISABLE_ENV}"
    problem = record.incompatible or (f"{type(record.error).__name__}: {record.error}"
                                      if record.error is not None else record.status)
    return message + f"'{command}' is provided by {dist}, which is installed but failed: {problem}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code.

    A reader that stops early (``lmserde plugins | head -1``) ends the command quietly with
    :data:`EXIT_BROKEN_PIPE`, as a command killed by ``SIGPIPE`` would, never a traceback.
    """
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _discard_stdout() -> None:
    """Point the process's stdout at ``os.devnull``, so that the interpreter's flush at exit
    finds nowhere left to fail (the recipe of Python's ``signal`` documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is no file (captured in-process): nothing to flush
        pass


def _run(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # torch built against NumPy warns on import when NumPy is absent; nothing here needs NumPy.
    warnings.filterwarnings("ignore", message=r"Failed to initialize NumPy", category=UserWarning)
    # Listing must stay metadata-only: skip importing hook plugins for it.
    light = bool(args_list) and args_list[0] in ("plugins", "new-plugin", "--version")
    parser = build_parser(with_plugin_commands=not light)
    missing = _missing_command_message(parser, args_list[0]) if args_list else None
    if missing is not None:
        print(missing, file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(args_list)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return int(handler(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
