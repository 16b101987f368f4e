"""One contract for the catalogues port: the in-memory fake and the LG_CATALOGUES bucket."""

from __future__ import annotations

import pytest

from lockgate.contracts.messages import Catalogue, Tool
from lockgate.core.ids import random_id
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.runs import InvalidKey

CATALOGUE = Catalogue(tools=(Tool("case.add_note", "Add a note", {"type": "object"}),),
                      revisions={"case.add_note": "rev-1"})


async def test_a_catalogue_stored_is_read_back_by_its_key(ports: Ports) -> None:
    key = random_id()
    assert await ports.catalogues.get(key) is None
    await ports.catalogues.put(key, CATALOGUE)
    await ports.catalogues.put(key, CATALOGUE)
    assert await ports.catalogues.get(key) == CATALOGUE


async def test_a_key_the_bucket_refuses_is_invalid(ports: Ports) -> None:
    with pytest.raises(InvalidKey):
        await ports.catalogues.put("not a key", CATALOGUE)
    with pytest.raises(InvalidKey):
        await ports.catalogues.get("not a key")
