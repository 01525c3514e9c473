"""The quota reservations (keys.QUOTA_RESERVATION) a watch has shown on stored objects (no I/O).

The webhook reserves what it admits against a namespace DCU quota until the object is seen
stored (scheduler/quotas.py for Volcano's pods, webhook/draclaims.py for DRA claims). An object
stored and deleted at once may be gone before the next review looks: so a reservation seen
once stays seen, here, even after its object goes. The newest `cap` are kept; a reservation
lapses after 30 s anyway, so only that many admissions within 30 s could outrun it.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
CAP = 50_000


class SeenReservations:
    def __init__(self, key: str, cap: int = CAP) -> None:
        self.key = key
        self.cap = cap
        self._seen: dict[str, None] = {}  # insertion-ordered: the oldest first

    def note(self, obj: JSON) -> None:
        """Record the reservation `obj` carries, if any."""
        meta = obj.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        value = annotations.get(self.key) if isinstance(annotations, dict) else None
        if isinstance(value, str) and value and value not in self._seen:
            self._seen[value] = None
            if len(self._seen) > self.cap:
                del self._seen[next(iter(self._seen))]

    def __contains__(self, reservation: object) -> bool:
        return reservation in self._seen

    def __len__(self) -> int:
        return len(self._seen)
