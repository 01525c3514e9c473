"""What GetPreferredAllocation read, kept for the Allocate that follows it.

The kubelet admits a container in two calls, back to back: GetPreferredAllocation (which slots
of the free ones?) and Allocate (these slots). Both must know the pod being admitted, and the
plugin learns it the same way in both: the node (whose lock names the pod) and the node's
Pending pods (the pod itself, and any other pod that could be the one admitted), read together.
Reading them twice put a second API round trip on every pod's path from bound to running, and
two more requests per pod on the API server.

Allocate takes the advice's reads instead of reading again only when they can only describe
this same admission:
* Allocate asks for exactly the slots the advice gave: the kubelet followed that advice, for
  the container it asked about (another pod's Allocate would name its own slots);
* the reads are younger than MAX_AGE (the kubelet makes the two calls within milliseconds);
* nothing on this node changed the lock since (no Allocate, release or reconcile here:
  `generation` counts them, an Allocate at its start and at its end, since the advice is
  asked outside the plugin's lock and may overlap one), and the reads found the lock's pod
  Pending on this node.
The reads were made after the kubelet saw the pod bound, as Allocate's own would be, so they
show every pod that could be the one admitted. What is left is a lock that changes hands by
another writer within MAX_AGE, which needs its holder to no longer want it (gone, or
past its bind window): the same race a fresh read has between its answer and its use.
Anything else, and Allocate reads as before. Pure: the caller supplies the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_AGE = 0.5  # seconds

JSON = dict[str, Any]


@dataclass(frozen=True)
class AdviceReads:
    taken: float  # monotonic seconds
    generation: int  # the plugin's count of lock-changing steps when the reads began
    node: JSON
    pending: list[JSON]
    advice: tuple[str, ...]


def reusable(reads: AdviceReads | None, requests: list[list[str]], generation: int, now: float) -> bool:
    """May the Allocate asking for `requests` take `reads` instead of reading again?"""
    if reads is None or not reads.advice or len(requests) != 1:
        return False
    if sorted(requests[0]) != sorted(reads.advice):
        return False
    return reads.generation == generation and 0 <= now - reads.taken <= MAX_AGE
