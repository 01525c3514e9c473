"""DRA mode's I/O for the webhook: the card sizes published in ResourceSlices (which the pure
decision needs to turn a cores percentage into compute units) and the get-or-create of the
ResourceClaimTemplates a rewritten pod names. The decision itself stays pure (decision.py).

Templates are named by a hash of their spec (dra/translate.py), so a template found under the
name is the one wanted: creating is idempotent, and a create racing another replica's (409)
is success. A review with dryRun creates nothing (the configuration declares NoneOnDryRun).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from hami_dcu.common.kube import AsyncKube, ConflictError, KubeError, NotFoundError
from hami_dcu.dra import names
from hami_dcu.dra.quantity import to_int

log = logging.getLogger(__name__)
JSON = dict[str, Any]
SLICES = f"{names.RESOURCE_API}/resourceslices"
# Card sizes change only when nodes with new models join: a minute-old view costs a pod at most
# a retry, while listing every slice on every review would cost the API server per pod.
UNITS_MAX_AGE = 60.0


def templates_path(namespace: str) -> str:
    return f"{names.RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"


def units_of(slices: list[JSON]) -> tuple[int, ...]:
    """The distinct compute-unit counts of the DCUs our driver publishes, smallest first."""
    found: set[int] = set()
    for published in slices:
        spec = published.get("spec") or {}
        if spec.get("driver") != names.DRIVER:
            continue
        for device in spec.get("devices") or []:
            cores = ((device.get("capacity") or {}).get(names.CAP_CORES) or {}).get("value")
            if cores is None:
                continue
            try:
                found.add(to_int(cores, names.CAP_CORES))
            except ValueError:
                log.warning("ResourceSlice %s: device %s has unreadable cores %r", published.get("metadata", {})
                            .get("name"), device.get("name"), cores)
    return tuple(sorted(found))


class DraClaims:
    def __init__(self, kube: AsyncKube, clock: Callable[[], float] = time.monotonic,
                 max_age: float = UNITS_MAX_AGE) -> None:
        self.kube = kube
        self.clock = clock
        self.max_age = max_age
        self._units: tuple[int, ...] = ()
        self._listed_at: float | None = None

    async def card_units(self) -> tuple[int, ...]:
        """Cached for `max_age`; none known yet is re-listed every time (the first driver may
        have just published, and a share asking cores cannot be admitted without it)."""
        now = self.clock()
        if self._units and self._listed_at is not None and now - self._listed_at < self.max_age:
            return self._units
        try:
            listed = await self.kube.call(self.kube.kube.request, "GET", SLICES,
                                          query={"fieldSelector": f"spec.driver={names.DRIVER}"})
        except KubeError as exc:
            # The last view is better than none; with none the decision says what is missing.
            log.warning("cannot list ResourceSlices for the card sizes: %s", exc)
            return self._units
        self._units, self._listed_at = units_of(listed.get("items") or []), now
        return self._units

    async def ensure_templates(self, namespace: str, templates: list[JSON]) -> None:
        """Get-or-create each template in `namespace`. Raises KubeError when one cannot be made."""
        for template in templates:
            path = templates_path(namespace)
            name = template["metadata"]["name"]
            try:
                await self.kube.call(self.kube.kube.request, "GET", f"{path}/{name}")
                continue
            except NotFoundError:
                pass
            try:
                await self.kube.call(self.kube.kube.request, "POST", path, body=template)
                log.info("created ResourceClaimTemplate %s/%s", namespace, name)
            except ConflictError:
                pass  # another review (or replica) created it between our get and create
