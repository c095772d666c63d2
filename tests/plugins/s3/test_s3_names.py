"""Object names: injective, reversible, safe for any key content, tenant salt never in clear."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lmserde import ObjectKey
from lmserde_s3.object_names import (
    MAX_NAME_BYTES,
    ObjectNamer,
    decode_salt_metadata,
    encode_salt_metadata,
    salt_tag,
)

_text = st.text(st.characters(codec="utf-8", exclude_characters="@"), max_size=40)
_salt = st.text(st.characters(codec="utf-8", exclude_characters="@/\\\x00"), max_size=40)
keys = st.builds(ObjectKey, st.binary(max_size=40), _text, st.integers(-(2**40), 2**40),
                 st.integers(0, 2**40), _salt)


@given(keys, st.sampled_from(["", "lmserde/", "a/b c/"]))
def test_names_round_trip_and_are_safe(key: ObjectKey, prefix: str) -> None:
    namer = ObjectNamer(prefix)
    name = namer.name_of(key)
    assert name.isascii() and name.isprintable()
    rest = name[len(prefix):]
    segments = rest.split("/")
    assert len(segments) == 2 and all(s not in ("", ".", "..") for s in segments)
    if key.cache_salt:
        assert segments[0] == salt_tag(key.cache_salt)  # the tenant part is only the hash
    assert namer.parse(name).key(key.cache_salt) == key


@given(keys, keys)
def test_names_are_injective(a: ObjectKey, b: ObjectKey) -> None:
    namer = ObjectNamer("p/")
    assert (namer.name_of(a) == namer.name_of(b)) == (a == b)


@given(_salt)
def test_salt_metadata_round_trips_as_ascii(salt: str) -> None:
    value = encode_salt_metadata(salt)
    assert value.isascii() and value.isprintable()
    assert decode_salt_metadata(value) == salt


def test_salt_tags_are_hashes_not_the_salt() -> None:
    assert salt_tag("") == "shared"
    tag = salt_tag("tenant-a")
    assert tag.startswith("t-") and len(tag) == 34 and "tenant" not in tag
    assert salt_tag("tenant-a") == tag != salt_tag("tenant-b")


def test_a_parsed_name_needs_the_matching_salt() -> None:
    namer = ObjectNamer("")
    parsed = namer.parse(namer.name_of(ObjectKey(b"\x01", "m", 0, 0, "alpha")))
    with pytest.raises(ValueError, match="does not match"):
        parsed.key("beta")


@pytest.mark.parametrize("name", [
    "other/shared/m@0@0@00", "lmserde/m@0@0@00", "lmserde/shared/m@0@0", "lmserde/shared/m@x@0@00",
    "lmserde/shared/m@0@@00", "lmserde/shared/m@0@0@0", "lmserde/shared/m%ZZ@0@0@00",
    "lmserde/shared/m/x@0@0@00", "lmserde/t-123/m@0@0@00", "lmserde/shared/m!@0@0@00",
])
def test_foreign_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        ObjectNamer("lmserde/").parse(name)


@given(keys, st.sampled_from(["lmserde/", "shared/", "t-" + "0" * 32 + "/", "a/b/"]))
def test_the_empty_prefix_never_reads_a_prefixed_name(key: ObjectKey, prefix: str) -> None:
    """Issue 27 item 7: prefixes are isolated, the empty one included (prefixes that look like
    a tenant part too)."""
    with pytest.raises(ValueError):
        ObjectNamer("").parse(ObjectNamer(prefix).name_of(key))
    with pytest.raises(ValueError):
        ObjectNamer(prefix).parse(ObjectNamer("").name_of(key))


@pytest.mark.parametrize("name", ["shared/m@00@0@ab", "shared/m@-0@0@ab", "shared/m%c3%a9@0@0@ab",
                                  "shared/m@0@00@ab"])
def test_only_the_exact_name_of_a_key_parses(name: str) -> None:
    with pytest.raises(ValueError):
        ObjectNamer("").parse(name)


def test_overlong_names_are_refused() -> None:
    namer = ObjectNamer("")
    namer.name_of(ObjectKey(b"", "m" * 900, 0))
    with pytest.raises(ValueError, match=str(MAX_NAME_BYTES)):
        namer.name_of(ObjectKey(b"", "m" * (MAX_NAME_BYTES + 1), 0))
