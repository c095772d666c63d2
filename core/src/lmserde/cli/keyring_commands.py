"""``lmserde keys rotate|activate|retire|show`` and ``lmserde tenant forget``: editing a keyring
file.

Every edit replaces the file atomically (mode 0600, written beside it, fsynced, renamed), so a
running process that watches it (``aesgcm`` ``key_provider: keyring``, ``lmserde-kms``'s wrapped
keyring) switches from the old keyring to the new one whole, within its reload interval and
without a restart. Nothing here prints key material.

Exit status: 0 done, 1 refused (unknown tenant or version, the current version, an unreadable or
malformed file: the file is left as it was), 2 bad command line.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_parsers", "run_rotate", "run_activate", "run_retire", "run_show", "run_forget"]

EXIT_REFUSED = 1

_KEYS_EPILOG = """\
rotation without downtime:
  lmserde keys rotate ring.json alice --stage   add version N+1 to every server's ring first
  lmserde keys activate ring.json alice N+1     then write with it
  lmserde keys rotate ring.json alice           (or, in one step) add N+1 and write with it
  lmserde keys retire ring.json alice 1         old frames of version 1 stop decrypting
  lmserde keys retire ring.json alice --before 3
Running processes re-read the file within their reload interval (default 5 s).
"""

_TENANT_EPILOG = """\
crypto-shredding:
  lmserde tenant forget ring.json alice         every object of alice becomes a miss everywhere
  lmserde scrub @spec.json --delete-unkeyed     then reclaim the space (with the full keyring),
                                                before the tenant gets a new key
Copies of the old keyring (backups, other hosts' files) still decrypt alice's objects: destroy
them too.
"""


def run_rotate(args: argparse.Namespace) -> int:
    """Add ``args.tenant``'s next key version (current unless ``--stage``)."""
    from lmserde.tenant_keys import add_keyring_version

    try:
        version = add_keyring_version(args.keyring, args.tenant, activate=not args.stage)
    except ValueError as exc:
        return _refused("keys rotate", exc)
    state = "staged: it decrypts, new frames keep the current version" if args.stage else \
        "current: new frames use it, older versions still decrypt"
    print(f"{args.keyring}: tenant {args.tenant!r} key version {version} added ({state})")
    return 0


def run_activate(args: argparse.Namespace) -> int:
    """Make the existing ``args.version`` the one ``args.tenant``'s new frames use."""
    from lmserde.tenant_keys import set_keyring_current

    try:
        set_keyring_current(args.keyring, args.tenant, args.version)
    except ValueError as exc:
        return _refused("keys activate", exc)
    print(f"{args.keyring}: tenant {args.tenant!r} now writes with key version {args.version}")
    return 0


def run_retire(args: argparse.Namespace) -> int:
    """Remove the given versions (or every one below ``--before``) of ``args.tenant``."""
    from lmserde.tenant_keys import retire_key_versions

    if not args.versions and args.before is None:
        print("lmserde keys retire: name the VERSIONs to retire or --before VERSION",
              file=sys.stderr)
        return 2
    try:
        removed = retire_key_versions(args.keyring, args.tenant, versions=tuple(args.versions),
                                      before=args.before)
    except ValueError as exc:
        return _refused("keys retire", exc)
    listed = ", ".join(str(v) for v in removed)
    print(f"{args.keyring}: tenant {args.tenant!r} key version(s) {listed} retired; objects "
          "written with them are misses from now on (scrub --delete-unkeyed reclaims them)")
    return 0


def run_show(args: argparse.Namespace) -> int:
    """List tenants, their versions and current version (never a key)."""
    from lmserde.tenant_keys import read_keyring_file

    try:
        keyring = read_keyring_file(args.keyring)
    except ValueError as exc:
        return _refused("keys show", exc)
    kind = "wrapped" if keyring.wrapped else "plain"
    print(f"{args.keyring}: {kind} keyring, {len(keyring.tenants)} tenant(s)")
    for name, keys in sorted(keyring.tenants.items()):
        versions = ", ".join(str(v) for v in sorted(keys.secrets))
        print(f"  {name!r}: current {keys.current}, versions {versions}")
    return 0


def run_forget(args: argparse.Namespace) -> int:
    """Remove every key of ``args.tenant`` from the keyring."""
    from lmserde.tenant_keys import forget_tenant

    try:
        forget_tenant(args.keyring, args.tenant)
    except ValueError as exc:
        return _refused("tenant forget", exc)
    print(f"{args.keyring}: every key of tenant {args.tenant!r} removed; its objects are misses "
          "on every reader once it reloads the file. Destroy other copies of the old keyring, "
          "then reclaim the space with `lmserde scrub SPEC --delete-unkeyed`.")
    return 0


def _refused(command: str, exc: ValueError) -> int:
    print(f"lmserde {command}: {exc}", file=sys.stderr)
    return EXIT_REFUSED


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``keys`` and ``tenant`` to the ``lmserde`` command."""
    keys = sub.add_parser(
        "keys", help="rotate, retire and list the key versions of a keyring file",
        description="Edit a keyring file (aesgcm key_provider: keyring, or for activate, retire "
                    "and show a wrapped keyring of lmserde-kms) atomically.",
        epilog=_KEYS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    rotate = actions.add_parser("rotate", help="add a tenant's next key version")
    rotate.add_argument("keyring", help="keyring file (created if missing)")
    rotate.add_argument("tenant", help="tenant (cache_salt); '' is the requests without one")
    rotate.add_argument("--stage", action="store_true",
                        help="add the version without writing with it yet (then `lmserde keys "
                             "activate`)")
    rotate.set_defaults(handler=run_rotate)
    activate = actions.add_parser("activate", help="make an existing version the one new "
                                                   "frames of a tenant use")
    activate.add_argument("keyring", help="keyring file (plain or wrapped)")
    activate.add_argument("tenant", help="tenant (cache_salt)")
    activate.add_argument("version", type=int, help="a version the tenant holds")
    activate.set_defaults(handler=run_activate)
    retire = actions.add_parser("retire", help="remove old key versions of a tenant")
    retire.add_argument("keyring", help="keyring file")
    retire.add_argument("tenant", help="tenant (cache_salt)")
    retire.add_argument("versions", nargs="*", type=int, metavar="VERSION",
                        help="versions to remove (never the current one)")
    retire.add_argument("--before", type=int, metavar="VERSION",
                        help="also remove every version below VERSION")
    retire.set_defaults(handler=run_retire)
    show = actions.add_parser("show", help="list tenants and key versions (no keys)")
    show.add_argument("keyring", help="keyring file")
    show.set_defaults(handler=run_show)

    tenant = sub.add_parser(
        "tenant", help="forget a tenant: remove its keys from a keyring (crypto-shredding)",
        description="Tenant-wide operations on a keyring file.",
        epilog=_TENANT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    tenant_actions = tenant.add_subparsers(dest="tenant_command", metavar="ACTION",
                                           required=True)
    forget = tenant_actions.add_parser("forget", help="remove every key of a tenant")
    forget.add_argument("keyring", help="keyring file (plain or wrapped)")
    forget.add_argument("tenant", help="tenant (cache_salt)")
    forget.set_defaults(handler=run_forget)
