"""``lmserde keygen``: the CLI subcommand this plugin contributes through the core's CLI hook.

This is the plugin's ``lmserde.hooks`` entry point, imported by every process that builds a serde
processor: it imports only ``argparse`` and ``lmserde``; the key-file code (and with it
``cryptography``) is imported when ``lmserde keygen`` runs.
"""

from __future__ import annotations

import argparse
import sys

from lmserde import hookimpl

__all__ = ["lmserde_add_cli_commands", "run_keygen"]

_EPILOG = """\
examples:
  lmserde keygen /etc/lmcache/keys/master               new master key (key_provider: hkdf)
  lmserde keygen --keyring ring.json --tenant alice     add alice's next key version, current
  lmserde keygen --keyring ring.json --tenant alice --stage
                                                        add it without using it for writes yet
  lmserde keygen --keyring ring.json --tenant alice --activate 3
                                                        make version 3 the one new frames use
"""


def run_keygen(args: argparse.Namespace) -> int:
    """Handler of ``lmserde keygen``; returns the exit code. Never prints key material."""
    from lmserde.tenant_keys import (
        MASTER_KEY_BYTES,
        add_keyring_version,
        set_keyring_current,
        write_master_key,
    )

    try:
        if args.keyring:
            if args.tenant is None:
                print("lmserde keygen: --keyring needs --tenant NAME", file=sys.stderr)
                return 2
            if args.activate is not None:
                set_keyring_current(args.path, args.tenant, args.activate)
                print(f"{args.path}: tenant {args.tenant!r} now writes with key version "
                      f"{args.activate}")
                return 0
            version = add_keyring_version(args.path, args.tenant, activate=not args.stage)
            state = "staged (not yet current)" if args.stage else "current"
            print(f"{args.path}: added key version {version} for tenant {args.tenant!r}, {state}")
            return 0
        if args.tenant is not None or args.stage or args.activate is not None:
            print("lmserde keygen: --tenant, --stage and --activate need --keyring",
                  file=sys.stderr)
            return 2
        path = write_master_key(args.path)
        print(f"wrote a new {MASTER_KEY_BYTES}-byte master key to {path} (mode 0600)")
        return 0
    except ValueError as exc:
        print(f"lmserde keygen: {exc}", file=sys.stderr)
        return 1


@hookimpl
def lmserde_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "keygen",
        help="create an aesgcm master key file or add a keyring key version",
        description="Create a new random 32-byte aesgcm master key (mode 0600, never "
        "overwriting), or with --keyring add or activate a tenant's key version.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", help="master key file to create, or keyring file with --keyring")
    parser.add_argument("--keyring", action="store_true",
                        help="PATH is a keyring file (created if missing)")
    parser.add_argument("--tenant", help="keyring tenant (cache_salt); '' is the default tenant")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--stage", action="store_true",
                       help="add the new version without making it current")
    group.add_argument("--activate", type=int, metavar="VERSION",
                       help="make an existing version current instead of adding one")
    parser.set_defaults(handler=run_keygen)
