"""Every public method of the contract ABCs states its contract in a docstring of its own."""

from __future__ import annotations

import inspect

import pytest
from lmserde import (
    Deserializer,
    MultiDeserializer,
    MultiSerializer,
    SerdeProcessor,
    Serializer,
)
from lmserde.l2 import L2AdapterInterface

CONTRACTS = (Serializer, Deserializer, SerdeProcessor, MultiSerializer, MultiDeserializer,
             L2AdapterInterface)


def _public_methods(cls: type) -> list[str]:
    """Public methods and properties the class itself defines (inherited ones are checked on
    the class that defines them)."""
    names = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member) or isinstance(member, property):
            names.append(name)
    return names


@pytest.mark.parametrize("cls", CONTRACTS, ids=lambda c: c.__name__)
def test_every_public_method_has_a_docstring(cls: type) -> None:
    methods = _public_methods(cls)
    assert methods
    missing = [name for name in methods
               if len((vars(cls)[name].__doc__ or "").split()) < 5]
    assert missing == [], f"{cls.__name__}: methods without a contract docstring: {missing}"


@pytest.mark.parametrize("cls", (SerdeProcessor, L2AdapterInterface), ids=lambda c: c.__name__)
def test_the_asynchronous_contracts_state_threading_and_ownership(cls: type) -> None:
    doc = inspect.getdoc(cls) or ""
    assert "Thread safety" in doc and "Ownership" in doc
