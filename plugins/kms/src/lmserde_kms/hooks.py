"""The hooks of ``lmserde-kms`` (entry point ``kms`` in ``lmserde.hooks``): the ``aws-kms`` key
provider for the aesgcm serde, and the ``lmserde kms rotate`` command.

Imported by every process that builds a serde: it imports only ``argparse`` and ``lmserde``;
boto3 is imported when a provider is built or the command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from lmserde import hookimpl

__all__ = ["PROVIDER_NAME", "build_provider", "lmserde_aesgcm_key_provider",
           "lmserde_aesgcm_key_provider_names", "lmserde_add_cli_commands", "run_rotate"]

PROVIDER_NAME = "aws-kms"


def build_provider(options: Mapping[str, Any]) -> Any:
    """An :class:`~lmserde_kms.AwsKmsKeyProvider` from ``key_provider_options`` (``ValueError``
    for bad options or an unusable wrapped keyring; never touches the network)."""
    from lmserde_kms.client import KmsCaller, build_client
    from lmserde_kms.provider import AwsKmsKeyProvider
    from lmserde_kms.settings import parse_settings

    settings = parse_settings(options)
    caller = KmsCaller(lambda: build_client(settings), settings.request_deadline_s)
    try:
        _ = caller.client  # built now (no network): a bad profile is a configuration error
        return AwsKmsKeyProvider(settings, caller)
    except BaseException:
        caller.close()
        raise


@hookimpl
def lmserde_aesgcm_key_provider(name: str, options: Mapping[str, Any]) -> Any:
    """The ``aws-kms`` provider for ``key_provider: aws-kms``; ``None`` for other names."""
    if name != PROVIDER_NAME:
        return None
    return build_provider(options)


@hookimpl
def lmserde_aesgcm_key_provider_names() -> list[str]:
    """``["aws-kms"]``."""
    return [PROVIDER_NAME]


def run_rotate(args: argparse.Namespace) -> int:
    """Handler of ``lmserde kms rotate``; never prints key material."""
    from lmserde_kms.client import KmsCaller, build_client
    from lmserde_kms.provider import KmsUnavailableError
    from lmserde_kms.settings import parse_settings
    from lmserde_kms.wrapped_keys import add_wrapped_version

    try:
        settings = parse_settings({
            "key_id": args.key_id, "wrapped_keyring_path": args.wrapped_keyring,
            "endpoint_url": args.endpoint_url, "region": args.region, "profile": args.profile})
        caller = KmsCaller(lambda: build_client(settings), settings.request_deadline_s)
        try:
            version = add_wrapped_version(args.wrapped_keyring, args.tenant,
                                          key_id=settings.key_id, caller=caller,
                                          activate=not args.stage)
        finally:
            caller.close()
    except (ValueError, KmsUnavailableError) as exc:
        print(f"lmserde kms rotate: {exc}", file=sys.stderr)
        return 1
    state = "staged (not yet current)" if args.stage else "current"
    print(f"{args.wrapped_keyring}: tenant {args.tenant!r} data key version {version} added "
          f"({state}), wrapped under {settings.key_id!r}")
    return 0


@hookimpl
def lmserde_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """``lmserde kms rotate``."""
    kms = subparsers.add_parser(
        "kms", help="add KMS-wrapped data keys to a wrapped keyring (key_provider: aws-kms)",
        description="Manage the wrapped keyring of the aws-kms key provider. Activate and "
                    "retire versions and forget tenants with `lmserde keys activate|retire` and "
                    "`lmserde tenant forget`, which work on wrapped keyrings too.")
    actions = kms.add_subparsers(dest="kms_command", metavar="ACTION", required=True)
    rotate = actions.add_parser(
        "rotate", help="add a tenant's next data key (its first for a new tenant)",
        description="GenerateDataKey under the master key, store only the wrapped key as the "
                    "tenant's next version (new frames use it unless --stage).")
    rotate.add_argument("wrapped_keyring", help="wrapped keyring file (created if missing)")
    rotate.add_argument("tenant", help="tenant (cache_salt); '' is the requests without one")
    rotate.add_argument("--key-id", required=True,
                        help="customer master key: key id, ARN or alias/NAME")
    rotate.add_argument("--endpoint-url", default="",
                        help="KMS-compatible endpoint (default: boto3's)")
    rotate.add_argument("--region", default="", help="region (default: boto3's)")
    rotate.add_argument("--profile", default="", help="AWS profile (default: boto3's chain)")
    rotate.add_argument("--stage", action="store_true",
                        help="add the version without writing with it yet")
    rotate.set_defaults(handler=run_rotate)
