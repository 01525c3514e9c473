"""Upstream Volcano's extender plugin wire types (volcano v1.15.1,
pkg/scheduler/plugins/extender/argument.go), as its scheduler really sends them
(e2e/test_realcluster_volcano_peer.py records and asserts them): declared as marshmallow
schemas, the replies as plain dicts.

The request wrappers have lower-case JSON tags (`task`, `node`, `nodes`, `evictor`,
`evictees`); what they carry, Volcano's TaskInfo and NodeInfo, have no tags and go out with
their Go field names (`UID`, `Name`, `Namespace`, `NodeName`, `Status`, `Pod`). Go's decoder
matches keys case-insensitively, so we do too (`GoStruct`). Only the fields we read are
declared; the rest (a NodeInfo carries its whole Node and every task on it) is dropped.

Every reply is HTTP 200: Volcano's plugin treats any other status as a transport failure
(with `extender.ignorable: false`, a rejection without a reason), so an expected failure
travels in the reply's own error field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from marshmallow import ValidationError, fields, post_load

from hami_dcu.scheduler.cardvictims import priority_of
from hami_dcu.scheduler.extender import GoStruct, PodObject, load_wire

JSON = dict[str, Any]

# Volcano's TaskStatus (pkg/scheduler/api/types.go), a bit each.
PENDING, ALLOCATED, PIPELINED, BINDING, BOUND, RUNNING, RELEASING = 1, 2, 4, 8, 16, 32, 64
# api.Status codes of a predicate's answer (pkg/scheduler/api/types.go).
SUCCESS, ERROR, UNSCHEDULABLE, UNRESOLVABLE = 0, 1, 2, 3
# util.Permit / Abstain / Reject of preemptable and reclaimable.
REJECT, ABSTAIN, PERMIT = -1, 0, 1


@dataclass(frozen=True)
class Task:
    """The TaskInfo fields we read: the pod's identity, the session's node for it, its status."""

    uid: str
    namespace: str
    name: str
    node: str  # NodeName: the node the session put the task on ("" when none)
    status: int
    pod: JSON
    # Volcano's task priority (the pod's spec.priority, or its volcano.sh/task-priority
    # annotation; 1 without either): what its priority plugin compares within a job.
    priority: int = 1

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.name}"


class TaskSchema(GoStruct):
    UID = fields.String(required=True)
    Name = fields.String(required=True)
    Namespace = fields.String(required=True)
    NodeName = fields.String(load_default="", allow_none=True)
    Status = fields.Integer(strict=True, load_default=0)
    Priority = fields.Integer(strict=True, load_default=None, allow_none=True)
    Pod = PodObject(required=True)

    @post_load
    def _task(self, data: JSON, **_kwargs: Any) -> Task:
        priority = data["Priority"]
        if priority is None:  # Volcano always sends it; its own rule else (api.NewTaskInfo)
            spec = data["Pod"].get("spec") or {}
            priority = priority_of(data["Pod"]) if isinstance(spec.get("priority"), int) else 1
        return Task(data["UID"], data["Namespace"] or "default", data["Name"], data["NodeName"] or "",
                    data["Status"], data["Pod"], priority)


class NodeSchema(GoStruct):
    Name = fields.String(required=True)

    @post_load
    def _name(self, data: JSON, **_kwargs: Any) -> str:
        return str(data["Name"])


@dataclass(frozen=True)
class PredicateArgs:
    task: Task
    node: str


@dataclass(frozen=True)
class PrioritizeArgs:
    task: Task
    nodes: list[str]


@dataclass(frozen=True)
class EvictArgs:
    evictor: Task
    evictees: list[Task]
    # Each evictee's TaskInfo as it was sent, aligned with `evictees`: a victim goes back
    # whole, since Volcano evicts the TaskInfos of the first plugin of a tier that answers.
    sent: list[JSON]


class PredicateSchema(GoStruct):
    task = fields.Nested(TaskSchema, required=True)
    node = fields.Nested(NodeSchema, required=True)

    @post_load
    def _args(self, data: JSON, **_kwargs: Any) -> PredicateArgs:
        return PredicateArgs(data["task"], data["node"])


class PrioritizeSchema(GoStruct):
    task = fields.Nested(TaskSchema, required=True)
    nodes = fields.List(fields.Nested(NodeSchema), load_default=None)

    @post_load
    def _args(self, data: JSON, **_kwargs: Any) -> PrioritizeArgs:
        return PrioritizeArgs(data["task"], data["nodes"] or [])


class EventSchema(GoStruct):
    """allocateFunc and deallocateFunc: {"task": TaskInfo}."""

    task = fields.Nested(TaskSchema, required=True)

    @post_load
    def _task(self, data: JSON, **_kwargs: Any) -> Task:
        task: Task = data["task"]
        return task


class EvictSchema(GoStruct):
    """preemptable and reclaimable: {"evictor": TaskInfo, "evictees": [TaskInfo...]}."""

    evictor = fields.Nested(TaskSchema, required=True)
    evictees = fields.List(fields.Nested(TaskSchema), load_default=None)

    @post_load(pass_original=True)
    def _args(self, data: JSON, original: object, **_kwargs: Any) -> EvictArgs:
        evictees: list[Task] = data["evictees"] or []
        sent = _field(original, "evictees") if evictees else []
        if not isinstance(sent, list) or len(sent) != len(evictees):
            raise ValidationError("evictees: not as parsed", "evictees")
        return EvictArgs(data["evictor"], evictees, sent)


def _field(data: object, name: str) -> object:
    """The value of `name` in a JSON object, matched as Go's decoder matches it (exact first,
    then case-insensitively)."""
    if not isinstance(data, dict):
        return None
    if name in data:
        return data[name]
    return next((v for k, v in data.items() if isinstance(k, str) and k.casefold() == name.casefold()), None)


_PREDICATE = PredicateSchema()
_PRIORITIZE = PrioritizeSchema()
_EVENT = EventSchema()
_EVICT = EvictSchema()


def parse_predicate(body: object) -> PredicateArgs:
    args: PredicateArgs = load_wire(_PREDICATE, body, "PredicateRequest")
    return args


def parse_prioritize(body: object) -> PrioritizeArgs:
    args: PrioritizeArgs = load_wire(_PRIORITIZE, body, "PrioritizeRequest")
    return args


def parse_event(body: object) -> Task:
    task: Task = load_wire(_EVENT, body, "EventHandlerRequest")
    return task


def parse_evict(body: object) -> EvictArgs:
    args: EvictArgs = load_wire(_EVICT, body, "PreemptableRequest")
    return args


def predicate_reply(message: str = "", code: int = SUCCESS) -> JSON:
    """PredicateResponse: its error text goes out under the JSON name `status`."""
    return {"status": message, "code": code if message else SUCCESS}


def prioritize_reply(scores: Mapping[str, float], error: str = "") -> JSON:
    """PrioritizeResponse: a map always (a null map without an error is an error to Volcano)."""
    return {"nodeScore": dict(scores), "errorMessage": error}


def event_reply(error: str = "") -> JSON:
    return {"errorMessage": error}


def evict_reply(status: int = ABSTAIN, victims: list[JSON] | None = None) -> JSON:
    """PreemptableResponse / ReclaimableResponse: `status` is the vote (PERMIT, REJECT,
    ABSTAIN: Volcano skips an abstaining plugin); victims are TaskInfos (Volcano intersects
    them with the other plugins' by UID), each the evictee as it was sent."""
    return {"status": status, "victims": victims or []}


__all__ = [
    "ABSTAIN",
    "ALLOCATED",
    "PERMIT",
    "PIPELINED",
    "REJECT",
    "RELEASING",
    "EvictArgs",
    "PredicateArgs",
    "PrioritizeArgs",
    "Task",
    "event_reply",
    "evict_reply",
    "parse_event",
    "parse_evict",
    "parse_predicate",
    "parse_prioritize",
    "predicate_reply",
    "prioritize_reply",
]
