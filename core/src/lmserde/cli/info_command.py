"""``lmserde info TYPE``: a serde's options, size contract and whether it is lossy (``auto``:
its options, pointing at ``docs/adaptive.md``)."""

from __future__ import annotations

import argparse
import json
import sys

from lmserde.core_kernel import describe_core_kernel
from lmserde.registry import get_serde_spec, list_serdes
from lmserde.text_table import format_table

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="show a serde's options, size contract and lossiness")
    p.add_argument("type", help="serde type, e.g. identity or fp8")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=run)


def _describe_native(native: dict[str, object]) -> str:
    if "error" in native:
        return f"status unknown ({native['error']})"
    text = f"backend {native.get('backend')}"
    if native.get("simd"):
        text += f", simd {native['simd']}"
    if native.get("reason"):
        text += f" — {native['reason']}"
    return text


def _auto_info(as_json: bool) -> int:
    """``auto`` is no plugin serde: it chooses among candidate serdes in an adapter's wrapper."""
    from lmserde.adaptive import PolicySettings
    from lmserde.l2.build import AUTO_OPTIONS, AUTO_SERDE_TYPE

    defaults = PolicySettings().as_dict()
    data = {"type": AUTO_SERDE_TYPE, "description": "chooses, per store task, the candidate serde "
            "with the least expected store + load time on the adapter, measured while it runs "
            "(docs/adaptive.md)", "options": {name: defaults.get(name) for name in AUTO_OPTIONS}}
    if as_json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"{AUTO_SERDE_TYPE}: {data['description']}")
    print("  lossy: as its candidates (a quality bound, max_attention_error, refuses lossy ones)")
    print("  options (candidates is required; attention_errors declares lossy candidates' errors; "
          "the rest are the policy's settings):")
    print("    " + ", ".join(f"{n}={v!r}" if n != "candidates" else n
                             for n, v in data["options"].items()))
    return 0


def run(args: argparse.Namespace) -> int:
    from lmserde.l2.build import AUTO_SERDE_TYPE

    if args.type == AUTO_SERDE_TYPE:
        return _auto_info(args.json)
    try:
        spec = get_serde_spec(args.type)
    except ValueError as exc:
        print(f"lmserde info: {exc}", file=sys.stderr)
        return 2
    origin = next((i for i in list_serdes() if i.name == args.type), None)
    options = [
        {"name": o.name, "type": o.describe_type(), "default": o.default,
         "required": o.required, "help": o.help, "minimum": o.minimum, "maximum": o.maximum,
         "identity": o.identity}
        for o in (spec.options or ())
    ]
    data = {
        "type": args.type,
        "distribution": origin.distribution if origin else "",
        "version": origin.version if origin else "",
        "description": spec.description,
        "size_contract": spec.size_contract.value,
        "lossy": spec.lossy,
        "format_version": spec.format_version,
        "consumes": sorted(k.value for k in spec.consumes),
        "produces": spec.produces.value,
        "options_declared": spec.options is not None,
        "options": options,
        "native": spec.describe_native(),
        "core_checksum_kernel": describe_core_kernel(),
    }
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    print(f"{args.type}: {spec.description}")
    if origin:
        print(f"  distribution: {origin.distribution} {origin.version}")
    print(f"  size contract: {spec.size_contract.value}")
    print(f"  lossy: {'yes' if spec.lossy else 'no (exact round trip)'}")
    print(f"  consumes: {', '.join(data['consumes'])}; produces: {data['produces']}")
    print(f"  format version: {spec.format_version}")
    native = data["native"]
    if native is not None:
        print(f"  native code: {_describe_native(native)}")
    print(f"  core's stored-object checksum kernel: "
          f"{_describe_native(data['core_checksum_kernel'])}")
    if spec.options is None:
        print("  options: not declared (the factory receives the config kwargs as given)")
    elif options:
        print("  options:")
        rows = [[o["name"], o["type"], repr(o["default"]) if not o["required"] else "(required)",
                 o["help"]] for o in options]
        print("    " + format_table(("name", "type", "default", "help"), rows)
              .replace("\n", "\n    "))
    else:
        print("  options: none")
    return 0
