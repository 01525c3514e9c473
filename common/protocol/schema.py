"""What every marshmallow schema of ours shares: the base class, a raw JSON object field, and
one way to say what was wrong.

Wire envelopes (the AdmissionReview, the extender's arguments) and durable records are
declared as schemas; the Kubernetes objects they carry (pods, nodes, userInfo) are not: a
`JsonObject` field checks that it is an object and hands it on untouched, so a review pays
for a dozen envelope fields, not for a pod's hundreds. The fields of an object that a
decision reads are checked where they are read (`common/protocol/podshape.py` for pods).

`one_line` turns marshmallow's nested messages into one line naming each field by its path
(`request.kind.version: Missing data for required field.`), with every key escaped: keys
come from the request (node names in a victims map) and end up in logs and replies. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from marshmallow import EXCLUDE, Schema, fields

from hami_dcu.common.protocol.untrusted import shown

NOT_AN_OBJECT = "Not a JSON object."
# A reply or a log line names the first few problems; a body with thousands of bad entries
# (a victims map over every node) does not make a message of thousands.
MAX_PROBLEMS = 5
_WHOLE = "_schema"  # marshmallow's key for a problem with the object itself, not one field


class Strict(Schema):
    """Unknown keys are dropped (newer API versions add fields; we read the ones we know),
    and an object that is not one says so in words."""

    class Meta:
        unknown = EXCLUDE

    error_messages = {"type": NOT_AN_OBJECT}


class JsonObject(fields.Field[dict[str, Any]]):
    """A JSON object passed on as it came: checked to be an object, never copied or walked."""

    default_error_messages = {"invalid": NOT_AN_OBJECT}

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None,
                     **kwargs: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.make_error("invalid")
        return value


class JsonBoolean(fields.Boolean):
    """true or false, as JSON writes them (marshmallow's Boolean also takes "yes", "on" and 1)."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


def load(schema: Schema, data: object) -> Any:
    """`schema.load` of decoded JSON, whatever its type: the schema itself refuses a value
    that is not an object ("Not a JSON object."), so no caller checks that by hand first."""
    return schema.load(cast("Mapping[str, Any]", data))


def one_line(messages: object, root: str = "") -> str:
    """marshmallow's `ValidationError.messages` as `path: message; path: message`, each path
    starting at `root` (list items as `[i]`), at most MAX_PROBLEMS of them."""
    problems: list[str] = []
    _walk(messages, root, problems)
    shown_problems = problems[:MAX_PROBLEMS]
    more = len(problems) - len(shown_problems)
    return "; ".join(shown_problems) + (f"; and {more} more" if more else "")


def _walk(messages: object, path: str, problems: list[str]) -> None:
    if isinstance(messages, dict):
        for key, inner in messages.items():
            _walk(inner, _joined(path, key), problems)
    elif isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        problems.append(f"{path}: {' '.join(messages)}" if path else " ".join(messages))
    elif isinstance(messages, list):
        for inner in messages:
            _walk(inner, path, problems)
    else:
        problems.append(f"{path}: {messages}" if path else str(messages))


def _joined(path: str, key: object) -> str:
    if key == _WHOLE:
        return path
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{shown(key)}" if path else shown(key)
