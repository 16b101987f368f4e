"""JSON Schema validators, built once per schema.

Building a ``Draft202012Validator`` costs more than most validations it then runs (it
sets up a reference resolver over the schema); intake validates every candidate's
arguments and the executor every result against a contract's schema, and a contract's
schemas are few and change rarely. So validators are kept, keyed by the schema's
canonical encoding (a contract decoded again gives an equal schema, not the same
object), the least recently used forgotten past ``KEPT``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import msgspec
from jsonschema import Draft202012Validator

from lockgate.core.bounded import keep

#: Validators kept per process.
KEPT = 512

_validators: OrderedDict[bytes, Draft202012Validator] = OrderedDict()


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """The Draft 2020-12 validator of ``schema`` (made on first use, then kept)."""
    key = msgspec.json.encode(schema, order="sorted")
    found = _validators.get(key)
    if found is None:
        found = Draft202012Validator(schema)
        keep(_validators, key, found, KEPT)
    else:
        _validators.move_to_end(key)
    return found
