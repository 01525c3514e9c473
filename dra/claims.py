"""What a ResourceClaim allocated on this node asks of this driver: pure, no I/O.

The kube-scheduler wrote the allocation (`status.allocation.devices.results`): per result the
request, pool, device and, for a device that allows multiple allocations, the share's id and
the capacity it consumes. Each result of our driver becomes one `Share`: a whole card (no
consumed capacity, or all of it) or a vDCU of so many compute units and MiB of memory.
Anything that does not fit what this node publishes is refused with a message saying why.
"""

from __future__ import annotations

from dataclasses import dataclass

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.quantity import QuantityError, to_int
from hami_dcu.common.protocol.errors import DraError
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.node.discovery import DcuCard


class ClaimRefused(DraError, ValueError):
    """The claim cannot be prepared here; the message goes back to the kubelet and the pod."""


@dataclass(frozen=True)
class Share:
    request: str  # the request (or "request/subrequest") this result answers
    pool: str
    device: str
    share_id: str | None
    card: DcuCard
    cu_count: int  # compute units of the vDCU (all of the card's when whole)
    memory_mib: int
    whole: bool  # the whole card: device nodes only, no vDCU
    admin: bool = False  # adminAccess: monitoring access, never a vDCU and never exclusive


def who(claim: JSON) -> str:
    return f"ResourceClaim {objects.namespace(claim)}/{objects.name(claim)}"


def cards_by_device(cards: list[DcuCard]) -> dict[str, DcuCard]:
    return {names.device_name(c.card.pci_bus_id): c for c in cards}


def plan_claim(claim: JSON, node: str, cards: dict[str, DcuCard]) -> list[Share]:
    """The shares of `claim` this driver prepares on `node`; `cards` maps device name -> card."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimRefused(f"{who(claim)} is not allocated")
    results = [r for r in ((allocation.get("devices") or {}).get("results") or []) if r.get("driver") == names.DRIVER]
    if not results:
        raise ClaimRefused(f"{who(claim)} has no device of driver {names.DRIVER}")
    return [_share(claim, result, node, cards) for result in results]


def _share(claim: JSON, result: JSON, node: str, cards: dict[str, DcuCard]) -> Share:
    pool, device = result.get("pool"), result.get("device")
    if pool != node:
        raise ClaimRefused(f"{who(claim)}: device {device} is in pool {pool}, not this node's ({node})")
    card = cards.get(str(device))
    if card is None:
        raise ClaimRefused(f"{who(claim)}: device {device} is not served on node {node}")
    request = str(result.get("request") or "")
    admin = bool(result.get("adminAccess"))
    consumed = result.get("consumedCapacity")
    units, memory = card.card.compute_units, card.card.memory_mib
    cu_count, memory_mib = units, memory
    if consumed and not admin:
        try:
            cu_count = to_int(consumed.get(names.CAP_CORES, units), f"{who(claim)}: consumed {names.CAP_CORES}")
            memory_bytes = to_int(consumed.get(names.CAP_MEMORY, memory * names.MEMORY_STEP),
                                  f"{who(claim)}: consumed {names.CAP_MEMORY}")
        except QuantityError as exc:
            raise ClaimRefused(str(exc)) from exc
        # The policy's 1 MiB step makes this exact; a cluster without it still never gets more than asked.
        memory_mib = memory_bytes // names.MEMORY_STEP
        if not 0 < cu_count <= units:
            raise ClaimRefused(f"{who(claim)}: device {device} has {units} compute units, {cu_count} consumed")
        if not 0 < memory_mib <= memory:
            raise ClaimRefused(f"{who(claim)}: device {device} has {memory} MiB, {memory_mib} MiB consumed")
    share_id = result.get("shareID")
    return Share(request=request, pool=str(pool), device=str(device), share_id=str(share_id) if share_id else None,
                 card=card, cu_count=cu_count, memory_mib=memory_mib,
                 whole=admin or (cu_count == units and memory_mib == memory), admin=admin)
