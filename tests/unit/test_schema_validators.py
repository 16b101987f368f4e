"""Validators are built once per schema, and still judge every value."""

from __future__ import annotations

from lockgate.core import validation
from lockgate.core.validation import validator

SCHEMA = {"type": "object", "properties": {"note": {"type": "string", "maxLength": 5}},
          "required": ["note"]}


def test_an_equal_schema_gets_the_same_validator() -> None:
    again = {"required": ["note"], "type": "object",
             "properties": {"note": {"maxLength": 5, "type": "string"}}}
    assert validator(SCHEMA) is validator(again)
    assert validator(SCHEMA) is not validator({**SCHEMA, "required": []})


def test_a_kept_validator_judges_each_value() -> None:
    check = validator(SCHEMA)
    assert list(check.iter_errors({"note": "hi"})) == []
    assert [e.path[0] for e in validator(SCHEMA).iter_errors({"note": "too long"})] == ["note"]
    assert [e.validator for e in validator(SCHEMA).iter_errors({})] == ["required"]


def test_validators_kept_are_bounded() -> None:
    for n in range(validation.KEPT + 10):
        validator({"type": "object", "maxProperties": n})
    assert len(validation._validators) == validation.KEPT
