"""``lmserde scrub ADAPTER_SPEC``: verify every stored object of a serde-wrapped L2 adapter.

Exit status: 0 when every object verified, 1 when damage was found (damaged objects or damaged
entries, deleted or not: a run after ``--delete`` exits 0 only when nothing remains), 2 for a
bad spec, an adapter that cannot be scrubbed or storage that does not exist (an ``fs``
``base_path`` that is no directory: nothing is created), 3 when nothing was damaged but some
objects could not be verified for a reason other than their bytes (the adapter could not say
their size, or ``--decode`` failed: a key service that cannot be reached, more than
``--l1-bytes`` needed); they are kept. Objects that are someone else's (another serde config,
another key, key material this reader lacks) are reported as foreign and never fail the run;
``--delete-unkeyed`` removes those whose key the spec's key provider no longer holds (a tenant
forgotten with ``lmserde tenant forget``, a version retired with ``lmserde keys retire``).

``--migrate`` rewrites every object written by one of the spec's ``read_also`` configs in its
current ``serde`` (:mod:`lmserde.l2.serde.migrate`): resumable (objects already in the current
config are skipped), it deletes nothing; exit status 0 when every such object was rewritten, 3
when some could not be (they are kept, still readable), 1 when damage was seen (left for
``--delete``), 2 for a spec without ``read_also``.

An adapter that declares the option ``create`` (``fs``) is opened with ``create: false`` unless
the spec sets it: scrub changes nothing but what ``--delete`` removes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmserde.cli.exit_codes import EXIT_USAGE

if TYPE_CHECKING:  # imported when the command runs: building the parser must not import torch
    from lmserde.l1.manager import L1Manager
    from lmserde.l2.serde.migrate import MigrateReport
    from lmserde.l2.serde.scrub import ScrubReport
    from lmserde.l2.serde.wrapper import SerdeL2AdapterWrapper

__all__ = ["add_parser", "run", "EXIT_DAMAGE", "EXIT_UNVERIFIED"]

EXIT_DAMAGE = 1
EXIT_UNVERIFIED = 3
#: Progress bars are drawn (on a terminal) from this many objects on.
_PROGRESS_FROM = 256


#: The on/off options of ``lmserde scrub``, in the order ``--help`` lists them, with their help.
_SWITCHES: tuple[tuple[str, str], ...] = (
    ("--decode", "also decode every object that verifies (slower; catches serde-level damage that "
                 "a checksum-less authenticated frame leaves to the serde)"),
    ("--delete", "delete the damaged objects and remove the damaged entries (a directory only when "
                 "empty; objects of other configs or keys are kept)"),
    ("--delete-foreign", "also delete the objects that are someone else's (written under another "
                         "serde config, for another key, or with key material this reader lacks)"),
    ("--migrate", "rewrite every object written by a 'read_also' config of the spec in its current "
                  "'serde' (resumable: run again after an interruption; deletes nothing)"),
    ("--delete-unkeyed", "delete the objects whose key the spec's key provider no longer holds (a "
                         "forgotten tenant, a retired key version), to reclaim the space of "
                         "crypto-shredded data; implies --decode. Use it only with the keyring that "
                         "is the authority for every tenant on this storage: a tenant it never held "
                         "looks the same as one it forgot"),
    ("--json", "machine-readable report on stdout"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scrub", help="verify the stored-object frames of an L2 adapter's objects",
        description="Read every object of an adapter back and verify its stored-object frame "
                    "(format, length, serde config, key binding, checksum) and walk its storage "
                    "for entries that are no readable object; report per reason. Objects of "
                    "other configs or keys are reported apart and kept. Exit status 1 when "
                    "damage was found, 2 when the storage does not exist (nothing is created), "
                    "3 when some objects could not be verified for a reason other than their "
                    "bytes (they are kept).")
    p.add_argument("spec", help="adapter spec as JSON text, or @FILE holding it (the same dict as "
                                "the L2 adapter config, with its 'serde')")
    for flag, text in _SWITCHES:
        p.add_argument(flag, action="store_true", help=text)
    p.add_argument("--batch", type=int, default=64, help="objects read per batch (default 64)")
    p.add_argument("--l1-bytes", type=int, default=1 << 30,
                   help="L1 buffer capacity used for decoding (default 1 GiB)")
    p.add_argument("--max-object-bytes", type=int, default=None,
                   help="objects larger than this are reported as 'length' damage without "
                        "being read (default 4 GiB: scrub.DEFAULT_MAX_OBJECT_BYTES)")
    p.set_defaults(handler=run)


def _read_spec(text: str) -> Any:
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    return json.loads(text)


def _build(spec: Any, l1: L1Manager) -> SerdeL2AdapterWrapper:
    """The adapter and serde a spec names, wrapped without self-repair (scrub only looks), opened
    with ``create: false`` when its type declares that option and the spec does not set it."""
    from lmserde.l2.build import create_l2_adapter, parse_l2_adapter_spec
    from lmserde.l2.discovery.registry import get_l2_adapter_spec
    from lmserde.l2.serde.wrapper import SerdeL2AdapterWrapper

    config = parse_l2_adapter_spec(spec)
    declared = get_l2_adapter_spec(config.type).options or ()
    if "create" not in config.options and any(o.name == "create" for o in declared):
        config.options["create"] = False
    if config.serde_config is None:
        raise ValueError("the spec has no 'serde': only serde-wrapped adapters store frames")
    if not config.serde_frame:
        raise ValueError("the spec sets serde_frame to false: raw serde bytes carry no frame "
                         "to verify")
    wrapper = create_l2_adapter(config, l1, repair=False)
    assert isinstance(wrapper, SerdeL2AdapterWrapper)
    return wrapper


@contextlib.contextmanager
def _progress(enabled: bool, total: int, label: str) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from lmserde.bench.progress import RichProgress

    with RichProgress() as progress:
        progress.begin(label, total)
        yield progress.advance
        progress.end()


def _print_report(report: ScrubReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
        return
    print(f"scanned {report.scanned} objects: {report.ok} ok, {len(report.damaged)} damaged, "
          f"{len(report.foreign)} someone else's")
    if report.verdicts.get("read_also"):
        print(f"{report.verdicts['read_also']} objects are in a read_also config (readable; "
              "lmserde scrub --migrate rewrites them in the current one)")
    for verdict, count in sorted(report.verdicts.items()):
        if verdict != "ok":
            print(f"  {verdict:<10} {count}")
    _print_entries(report)
    if report.deleted:
        print(f"deleted {report.deleted} damaged objects")
    if report.foreign_deleted:
        print(f"deleted {report.foreign_deleted} objects of other configs or keys")
    elif report.unkeyed_deleted:
        print(f"deleted {report.unkeyed_deleted} objects whose key the key provider no longer "
              "holds (forgotten tenants, retired key versions)")
    elif report.foreign:
        print(f"{len(report.foreign)} objects were written under another serde config, for "
              "another key or with key material this reader lacks: not damage, kept "
              "(--delete-foreign removes them)")
    if report.damage_remaining:
        print(f"{report.damage_remaining} damaged objects or entries remain"
              + ("" if report.deleted or _entries_removed(report) else
                 ": run again with --delete to remove them (each is a miss anyway)"))
    if report.unchecked:
        print(f"{report.unchecked} objects were checked by their frame only: their serde "
              "authenticates the payload instead of a frame checksum, so only --decode checks "
              "its bytes")
    if report.unverified:
        print(f"{report.unverified} objects could not be verified, for a reason other than their "
              "bytes (a key service or the storage could not be reached, or an object needs more "
              "than --l1-bytes to decode: see the log); they were kept, run again later")


def _entries_removed(report: ScrubReport) -> int:
    return 0 if report.entries is None else sum(f.removed for f in report.entries.damaged)


def _print_entries(report: ScrubReport) -> None:
    entries = report.entries
    if entries is None:
        return
    removed = _entries_removed(report)
    print(f"entries: {len(entries.damaged)} damaged ({removed} removed), "
          f"{len(entries.unknown)} unknown (never touched), {entries.in_progress} being written")
    for finding in entries.damaged:
        state = "removed" if finding.removed else "kept"
        detail = f": {finding.detail}" if finding.detail else ""
        print(f"  {finding.reason:<16} {finding.name} ({state}{detail})")


def _print_migrate_report(report: MigrateReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
        return
    before = report.verdicts.get("read_also", 0)
    print(f"scanned {report.scanned} objects: {report.verdicts.get('ok', 0)} already in the "
          f"current config, {before} in a read_also config; migrated {len(report.migrated)}")
    for verdict, count in sorted(report.verdicts.items()):
        if verdict not in ("ok", "read_also"):
            print(f"  {verdict:<10} {count}")
    if report.failed:
        steps: dict[str, int] = {}
        for step in report.failed.values():
            steps[step] = steps.get(step, 0) + 1
        print(f"{len(report.failed)} objects could not be rewritten and keep their old config "
              f"(still readable with read_also): "
              + ", ".join(f"{n} at {step}" for step, n in sorted(steps.items()))
              + "; see the log, then run again")
    if report.foreign:
        print(f"{report.foreign} objects of configs not in read_also (or of other keys) were "
              "left as they are: not readable here, not rewritten")
    if report.damaged:
        print(f"{report.damaged} damaged objects were left alone: lmserde scrub --delete "
              "removes them")


def _walk(args: argparse.Namespace, wrapper: SerdeL2AdapterWrapper, label: str,
          walk: Callable[[list[Any], Any], Any]) -> Any:
    """``walk(keys, advance)`` over the wrapper's keys, with a progress bar on a terminal (from
    ``_PROGRESS_FROM`` keys); closes the wrapper. Its report, or ``None`` once a usage error
    was printed."""
    try:
        keys = list(wrapper.list_l2_keys())
        show = not args.json and sys.stderr.isatty() and len(keys) >= _PROGRESS_FROM
        with _progress(show, len(keys), label) as advance:
            return walk(keys, advance)
    except (NotImplementedError, ValueError, OSError, RuntimeError) as exc:
        print(f"lmserde scrub: {exc}", file=sys.stderr)
        return None
    finally:
        wrapper.close()


def _exit_status(*, damaged: bool, unverified: bool) -> int:
    """The exit status of a finished scrub or migration (see the module docstring): damage seen
    wins over objects left unverified (or not migrated)."""
    if damaged:
        return EXIT_DAMAGE
    return EXIT_UNVERIFIED if unverified else 0


def _run_migrate(args: argparse.Namespace, wrapper: SerdeL2AdapterWrapper, limit: int) -> int:
    from lmserde.l2.serde.migrate import migrate_adapter

    report = _walk(args, wrapper, "migrating", lambda keys, advance: migrate_adapter(
        wrapper, keys=keys, batch=args.batch, on_progress=advance, max_object_bytes=limit))
    if report is None:
        return EXIT_USAGE
    _print_migrate_report(report, args.json)
    return _exit_status(damaged=report.damaged > 0, unverified=bool(report.failed))


def run(args: argparse.Namespace) -> int:
    from lmserde.l1.manager import L1Manager
    from lmserde.l2.serde.scrub import DEFAULT_MAX_OBJECT_BYTES, scrub_adapter

    if args.migrate and (args.delete or args.delete_foreign or args.delete_unkeyed or args.decode):
        print("lmserde scrub: --migrate rewrites and never deletes: run --delete, "
              "--delete-foreign or --decode as a separate scrub", file=sys.stderr)
        return EXIT_USAGE
    try:
        spec = _read_spec(args.spec)
        l1 = L1Manager(args.l1_bytes)
        wrapper = _build(spec, l1)
    except (OSError, ValueError) as exc:
        print(f"lmserde scrub: {exc}", file=sys.stderr)
        return EXIT_USAGE
    limit = DEFAULT_MAX_OBJECT_BYTES if args.max_object_bytes is None else args.max_object_bytes
    if args.migrate:
        return _run_migrate(args, wrapper, limit)
    report = _walk(args, wrapper, "scrubbing", lambda keys, advance: scrub_adapter(
        wrapper, keys=keys, decode=args.decode, delete=args.delete,
        delete_foreign=args.delete_foreign, delete_unkeyed=args.delete_unkeyed, batch=args.batch,
        on_progress=advance, max_object_bytes=limit))
    if report is None:
        return EXIT_USAGE
    _print_report(report, args.json)
    return _exit_status(damaged=report.found_damage, unverified=report.unverified > 0)
