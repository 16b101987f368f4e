"""The console API's OpenAPI document, generated from its routes (``schemas/openapi.json``)."""

from __future__ import annotations

import json

from lockgate.console.api import create_app


def document() -> str:
    """The OpenAPI document as the committed file holds it."""
    return json.dumps(create_app().openapi(), indent=2, sort_keys=True) + "\n"
