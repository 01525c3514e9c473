"""What the driver writes on a ResourceClaim's `status.devices` (pure, no I/O): per device of
ours it prepared, the vDCU it made (card, PCI bus id, compute units and their mask, memory,
vdev id) in `data`, and a `Ready` condition; per device of ours it could not prepare, `Ready`
False with the reason. `kubectl get resourceclaim -o jsonpath='{.status.devices}'` then tells
an operator what a pod got without reading the node.

The entries are written with server-side apply on the `status` subresource under one field
manager (FIELD_MANAGER), so they are this driver's alone: applying an empty list removes them
and nothing another driver wrote. Kubernetes drops every `status.devices` entry itself when a
claim is deallocated; an Unprepare of a claim that stays allocated (a standalone claim whose pod
went away) removes ours, since the device is no longer prepared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from hami_dcu.common.protocol.dra import names
from hami_dcu.dra.records import PreparedClaim, PreparedDevice
from hami_dcu.node.discovery import DcuCard

JSON = dict[str, Any]
FIELD_MANAGER = "hami-dcu-dra-driver"
API_VERSION = names.RESOURCE_API.removeprefix("/apis/")  # resource.k8s.io/v1
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON
READY = "Ready"
PREPARED = "Prepared"
PREPARE_FAILED = "PrepareFailed"
QUOTA_EXCEEDED = "QuotaExceeded"
MESSAGE_MAX = 1024  # of the API's 32768: a status line, not a log


def condition(ready: bool, reason: str, message: str, now: str, generation: int) -> JSON:
    """A `Ready` condition (metav1.Condition); `now` in RFC 3339."""
    return {"type": READY, "status": "True" if ready else "False", "reason": reason,
            "message": message[:MESSAGE_MAX], "lastTransitionTime": now, "observedGeneration": generation}


def device_data(device: PreparedDevice, card: DcuCard | None) -> JSON:
    """`data` of one prepared device: the vDCU, or the whole card (adminAccess: the card, held
    by nobody). `card` None: a restored record whose card is no longer served."""
    data: JSON = {"pciBusID": device.pci_bus_id}
    if card is not None:
        data |= {"card": card.index, "model": card.card.model, "serial": card.card.serial}
    if device.vdev is not None:
        g = device.vdev
        return data | {"card": g.card_index, "vdev": g.vdev, "computeUnits": g.cu_count, "cuMask": hex(g.cu_mask),
                       "memoryMiB": g.memory_mib, "pipe": g.pipe}
    if device.admin:
        return data | {"adminAccess": True}
    if card is not None:
        data |= {"computeUnits": card.card.compute_units, "memoryMiB": card.card.memory_mib}
    return data | {"whole": True}


def describe(device: PreparedDevice) -> str:
    if device.vdev is None:
        return "admin access to the card" if device.admin else "the whole card"
    g = device.vdev
    return f"vDCU {g.vdev} on card {g.card_index}: {g.cu_count} compute units, {g.memory_mib} MiB"


def _key(driver_pool_device: tuple[str, str, str], share_id: str | None) -> JSON:
    driver, pool, device = driver_pool_device
    entry: JSON = {"driver": driver, "pool": pool, "device": device}
    if share_id:
        entry["shareID"] = share_id
    return entry


def prepared_entries(record: PreparedClaim, cards: dict[str, DcuCard], now: str, generation: int = 0) -> list[JSON]:
    """`status.devices` of a prepared claim: one entry per device, Ready."""
    return [_key((names.DRIVER, d.pool, d.device), d.share_id)
            | {"conditions": [condition(True, PREPARED, f"node {d.pool}: {describe(d)}", now, generation)],
               "data": device_data(d, cards.get(d.device))}
            for d in record.devices]


def failed_entries(claim: JSON, node: str, reason: str, message: str, now: str) -> list[JSON]:
    """`status.devices` of a claim this node could not prepare: each result of our driver in
    this node's pool, Ready False with `reason`. None outside this node's pool: the API server
    lets a driver write entries only for devices of the claim's allocation, and RBAC grants it
    only the claims allocated on its own node."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    generation = generation_of(claim.get("metadata") or {})
    entries = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if not isinstance(result, dict) or result.get("driver") != names.DRIVER or result.get("pool") != node:
            continue
        share_id = result.get("shareID")
        entries.append(_key((names.DRIVER, node, str(result.get("device"))), str(share_id) if share_id else None)
                       | {"conditions": [condition(False, reason, message, now, generation)]})
    return entries


def apply_body(claim_meta: JSON, entries: Iterable[JSON]) -> JSON:
    """The server-side apply of `status.devices` = `entries` (empty: remove ours). The UID makes
    the apply fail on a claim deleted and created again under the same name."""
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": claim_meta.get("name"), "namespace": claim_meta.get("namespace"),
                         "uid": claim_meta.get("uid")},
            "status": {"devices": list(entries)}}


def says_already(claim: JSON, entries: list[JSON]) -> bool:
    """Whether the claim's status.devices already has `entries` (the time of the condition
    aside): a Prepare refused again for the same reason writes nothing."""
    def shown(devices: object) -> set[str]:
        found = set()
        for entry in devices if isinstance(devices, list) else []:
            if not isinstance(entry, dict):
                continue
            conditions = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                          for c in entry.get("conditions") or [] if isinstance(c, dict)]
            found.add(json.dumps({**entry, "conditions": conditions}, sort_keys=True))
        return found

    wanted = shown(entries)
    return wanted <= shown((claim.get("status") or {}).get("devices"))


def generation_of(meta: JSON) -> int:
    value = meta.get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
