"""Redis key names: reversible, injective, namespaced, and never a Redis Cluster hash tag."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lmserde import ObjectKey
from lmserde_redis import RedisKeyNamer

any_char = st.characters(blacklist_categories=())  # surrogates and control characters included
models = st.text(any_char, max_size=40).filter(lambda s: "@" not in s)
salts = st.text(any_char, max_size=40).filter(lambda s: not any(c in s for c in "@/\\\x00"))
object_keys = st.builds(
    ObjectKey,
    chunk_hash=st.binary(max_size=48),
    model_name=models,
    kv_rank=st.integers(min_value=-(2**40), max_value=2**40),
    object_group_id=st.integers(min_value=0, max_value=2**20),
    cache_salt=salts,
)
namespaces = st.text(any_char, max_size=20)


@given(key=object_keys, namespace=namespaces)
def test_name_parses_back_to_the_same_key(key: ObjectKey, namespace: str) -> None:
    namer = RedisKeyNamer(namespace)
    assert namer.key_of(namer.name_of(key)) == key


@given(a=object_keys, b=object_keys)
def test_different_keys_get_different_names(a: ObjectKey, b: ObjectKey) -> None:
    namer = RedisKeyNamer("ns")
    assert (namer.name_of(a) == namer.name_of(b)) == (a == b)


@given(key=object_keys, namespace=namespaces)
def test_names_never_form_a_cluster_hash_tag(key: ObjectKey, namespace: str) -> None:
    name = RedisKeyNamer(namespace).name_of(key)
    assert b"{" not in name and b"}" not in name


@given(key=object_keys)
def test_namespaces_separate_keys(key: ObjectKey) -> None:
    a, b = RedisKeyNamer("a"), RedisKeyNamer("a:b")
    assert a.name_of(key) != b.name_of(key)
    with pytest.raises(ValueError):
        RedisKeyNamer("other").key_of(a.name_of(key))


@given(key=object_keys, namespace=namespaces.filter(bool))
def test_the_empty_namespace_never_reads_a_namespaced_name(key: ObjectKey, namespace: str) -> None:
    """A name of any non-empty namespace is no name of the empty namespace, and back."""
    empty, named = RedisKeyNamer(""), RedisKeyNamer(namespace)
    with pytest.raises(ValueError):
        empty.key_of(named.name_of(key))
    with pytest.raises(ValueError):
        named.key_of(empty.name_of(key))


@pytest.mark.parametrize("name", [b"m@00@0@ab", b"m@-0@0@ab", b"m%3a@0@0@ab", b"ns:x@0@0@"])
def test_only_the_exact_name_of_a_key_parses(name: bytes) -> None:
    """Non-canonical spellings (leading zeros, lower-case escapes, a raw ':') are no key names."""
    with pytest.raises(ValueError):
        RedisKeyNamer("").key_of(name)


def test_name_layout_is_readable() -> None:
    key = ObjectKey(b"\x01\xab", "org/model", 0x01020304, 3, "tenant-1")
    assert RedisKeyNamer("kv").name_of(key) == b"kv:org/model@1020304@3@01ab@tenant-1"
    assert RedisKeyNamer("").name_of(ObjectKey(b"", "m", 0)) == b"m@0@0@"


def test_special_characters_are_escaped() -> None:
    key = ObjectKey(b"\x00", "a{b}:c %d", 0, 0, "t{x}")
    assert RedisKeyNamer("n{s}").name_of(key) == b"n%7Bs%7D:a%7Bb%7D%3Ac%20%25d@0@0@00@t%7Bx%7D"


def test_scan_pattern_escapes_glob_characters() -> None:
    assert RedisKeyNamer("a*b?[c]").scan_pattern() == b"a\\*b\\?\\[c\\]:*"


@pytest.mark.parametrize("name", [
    b"kv:m@0@0", b"kv:m@0@0@zz", b"kv:m@x@0@00", b"kv:m@0@0@0", b"kv:m@0@0@00@",
    b"kv:m@0@0@00@s@t", b"kv:m%G1@0@0@00", b"other:m@0@0@00",
])
def test_malformed_names_are_rejected(name: bytes) -> None:
    with pytest.raises(ValueError):
        RedisKeyNamer("kv").key_of(name)
