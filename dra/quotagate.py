"""The namespace DCU quota, checked again at Prepare (pure, no I/O): issue 36, item 5.

The webhook admits a claim against its namespace's DCU quota (webhook/draquota.py), counting
the claims kube-apiserver has stored and, in its own process, those it admitted but that are
not stored yet. Two claims reviewed in the same instant by two webhook replicas, or a review
the webhook never saw (a namespace it skips, its failurePolicy Ignore during an outage), can
each take what is left of the quota: both are stored, kube-scheduler allocates both (it knows
nothing of our quota), and both pods would run.

So the drivers keep one ledger of what they prepared in namespaces with a DCU quota: a
ConfigMap in the release namespace (the chart creates it; the drivers may only read and
replace that one object), one data key per namespace, holding per claim UID what it holds in
the quota's units. A Prepare in a namespace with a DCU quota adds its claim to the ledger with
a compare-and-swap (the replace names the resourceVersion it read) only when the ledger's
other claims of that namespace plus this one fit; two Prepares on any two nodes cannot both
see the other's claim missing, since one of the two replaces fails and reads again. The entry
is the commit point: written before the vDCU is made, removed after it is freed.

What a claim holds is counted as the webhook counts an allocated claim: memory in MiB, cores as
compute units over the card's in % of one card (exact fractions), adminAccess nothing; the
limits are read as the webhook reads them (common/protocol/quota.py: `limits_from`, `exceeded`). A
namespace without a DCU limit has no ledger entries and costs one cached read of its quotas.
Claims prepared before their namespace had a DCU quota are not in the ledger (the webhook
still counts them at admission).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.quota import QuotaLimits, exceeded
from hami_dcu.dra.claims import Share

JSON = dict[str, Any]
WHOLE = Fraction(100)
# An entry of this node older than this whose claim this node has not prepared is a leftover
# (its removal was lost to a crash or an API error): dropped at the next write. The age leaves
# alone an entry whose Prepare is still making the vDCU (written first, recorded next).
LEFTOVER_AGE = 120.0


@dataclass(frozen=True, slots=True)
class Held:
    memory: int = 0  # MiB
    cores: Fraction = Fraction(0)  # % of one card

    def __add__(self, other: Held) -> Held:
        return Held(self.memory + other.memory, self.cores + other.cores)

    def __bool__(self) -> bool:
        return bool(self.memory or self.cores)


@dataclass(frozen=True, slots=True)
class Entry:
    claim: str  # the claim's name, for a person reading the ledger
    node: str
    held: Held
    since: float  # wall-clock seconds when it was written


def held_by(shares: Iterable[Share]) -> Held:
    """What a claim's shares hold in the quota's units (the webhook's rule for an allocated claim)."""
    total = Held()
    for share in shares:
        if share.admin:
            continue
        units = share.card.card.compute_units
        cores = min(Fraction(share.cu_count * 100, units), WHOLE) if units > 0 else WHOLE
        total = total + Held(share.memory_mib, cores)
    return total


def refusal(limits: QuotaLimits, entries: dict[str, Entry], uid: str, held: Held,
            resources: ResourceNames) -> str | None:
    """Why a claim `uid` holding `held` breaks `limits` beside the namespace's other `entries`;
    None when it fits."""
    used = sum((e.held for u, e in entries.items() if u != uid), start=Held())
    return exceeded(limits, used, held, resources)


def leftovers(entries: dict[str, Entry], node: str, prepared: Iterable[str], now: float) -> list[str]:
    """This node's entries no prepared claim of it explains any more, past LEFTOVER_AGE."""
    live = set(prepared)
    return [uid for uid, e in entries.items() if e.node == node and uid not in live and now - e.since > LEFTOVER_AGE]


# --- the ConfigMap's data -------------------------------------------------------------------------


def read_namespace(data: JSON, namespace: str) -> dict[str, Entry]:
    """The entries of `namespace` in the ledger's data; an unreadable entry is skipped (a person
    edited it), never the whole namespace."""
    try:
        raw = json.loads(str(data.get(namespace) or "{}"))
    except ValueError:
        return {}
    entries: dict[str, Entry] = {}
    if not isinstance(raw, dict):
        return entries
    for uid, value in raw.items():
        try:
            entries[str(uid)] = Entry(claim=str(value["claim"]), node=str(value["node"]),
                                      held=Held(int(value["memoryMiB"]), Fraction(str(value["cores"]))),
                                      since=float(value["since"]))
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue
    return entries


def write_namespace(data: JSON, namespace: str, entries: dict[str, Entry]) -> JSON:
    """The ledger's data with `namespace`'s entries replaced (the key dropped when none are left)."""
    out = {k: v for k, v in data.items() if k != namespace}
    if entries:
        out[namespace] = json.dumps({uid: {"claim": e.claim, "node": e.node, "memoryMiB": e.held.memory,
                                           "cores": str(e.held.cores), "since": round(e.since, 3)}
                                     for uid, e in sorted(entries.items())}, sort_keys=True, separators=(",", ":"))
    return out
