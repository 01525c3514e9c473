"""Who holds each card among the claims a driver has prepared (pure): a card held whole by one
claim is nobody else's, and a card shared by some claims is nobody's whole.

The kube-scheduler's allocation should never mix the two on one card; a driver that trusted
it anyway handed a vDCU on a card another claim's container already sees whole (issue 21),
which no compute-unit mask can fence. adminAccess (monitoring) holds nothing either way.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami_dcu.dra.claims import Share
from hami_dcu.dra.records import PreparedClaim


def conflict(shares: Iterable[Share], prepared: Iterable[PreparedClaim], uid: str) -> str | None:
    """Why `shares` (of claim `uid`) cannot be prepared beside the other prepared claims, or None."""
    whole: dict[str, PreparedClaim] = {}
    shared: dict[str, PreparedClaim] = {}
    for record in prepared:
        if record.uid == uid:
            continue
        for device in record.devices:
            if device.admin:
                continue
            holders = whole if device.vdev is None else shared
            holders.setdefault(device.pci_bus_id.upper(), record)
    for share in shares:
        if share.admin:
            continue
        bus_id = share.card.card.pci_bus_id.upper()
        holder = whole.get(bus_id)
        if holder is not None:
            return (f"device {share.device} is held whole by ResourceClaim {holder.namespace}/{holder.name}: "
                    f"no share of it can be prepared until that claim is released")
        holder = shared.get(bus_id)
        if share.whole and holder is not None:
            return (f"device {share.device} is shared (ResourceClaim {holder.namespace}/{holder.name} holds a vDCU "
                    f"on it): it cannot be prepared whole until its shares are released")
    return None
