"""What the schemas share: one-line problems named by path (keys escaped, a bounded count),
JSON objects passed on untouched, and booleans only as JSON writes them."""

import pytest
from marshmallow import ValidationError, fields

from hami_dcu.common.protocol.schema import MAX_PROBLEMS, JsonBoolean, JsonObject, Strict, one_line


class Inner(Strict):
    name = fields.String(required=True)


class Outer(Strict):
    obj = JsonObject(load_default=None)
    flag = JsonBoolean(load_default=False)
    inner = fields.Nested(Inner, load_default=None)
    items = fields.List(fields.Nested(Inner), load_default=None)
    by_name = fields.Dict(keys=fields.String(), values=fields.Integer(strict=True), load_default=None)


def problems(data: object, root: str = "") -> str:
    with pytest.raises(ValidationError) as raised:
        Outer().load(data)
    return one_line(raised.value.messages, root)


def test_problems_are_named_by_their_path():
    assert problems({"inner": {}, "items": [{"name": "a"}, {}]}) == (
        "inner.name: Missing data for required field.; items[1].name: Missing data for required field.")
    assert problems({"inner": {}}, root="Envelope") == "Envelope.inner.name: Missing data for required field."


def test_a_value_that_is_not_an_object_says_so_at_its_place():
    assert problems([1]) == "Not a JSON object."
    assert problems([1], root="Envelope") == "Envelope: Not a JSON object."
    assert problems({"inner": "x"}) == "inner: Not a JSON object."
    assert problems({"obj": ["x"]}) == "obj: Not a JSON object."


def test_keys_from_the_request_are_escaped():
    message = problems({"by_name": {"n1\n2024-01-01 forged line\x1b[2J": "x"}})
    assert "\n" not in message and "\x1b" not in message
    assert message.startswith("by_name.n1\\n2024-01-01 forged line\\x1b[2J.value: Not a valid integer.")


def test_a_body_with_many_problems_names_the_first_few():
    message = problems({"items": [{}] * 1000})
    assert message.count("Missing data") == MAX_PROBLEMS
    assert message.endswith(f"; and {1000 - MAX_PROBLEMS} more")


def test_unknown_keys_are_dropped_and_objects_passed_on_as_they_came():
    obj = {"spec": {"containers": [{"name": "c", "anything": [1, {"x": None}]}]}}
    loaded = Outer().load({"obj": obj, "unknown": 1})
    assert loaded == {"obj": obj, "flag": False, "inner": None, "items": None, "by_name": None}
    assert loaded["obj"] is obj


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, "on"])
def test_a_boolean_is_true_or_false_only(value):
    assert problems({"flag": value}) == "flag: Not a valid boolean."


@pytest.mark.parametrize("value", [True, False])
def test_json_booleans_load(value):
    assert Outer().load({"flag": value})["flag"] is value
