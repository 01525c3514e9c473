"""DRA mode, in the extender's process: create the ResourceClaimTemplates a stored pod waits for.

When no caller is proven the API server's (webhook/callers.py), the webhook creates nothing
while reviewing: it rewrites the pod and lists the templates still missing on the pod itself
(`dcu.hami.io/claim-templates`, webhook/pendingtemplates.py). Only a pod the API server stored
shows up in the extender's pod watch, so a review posted to the webhook's port by anyone else
makes nothing at all; a genuine pod's templates are created one watch event after it is stored,
and kube-controller-manager, which watches templates, then makes its claims.

`seen` is called with every pod the extender's watch or list shows (scheduler/informer.py): it
returns at once for a pod that names no template the template watch does not already show, and
otherwise starts the creation in the background.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol.dra import names
from hami_dcu.webhook.draclaims import DraClaims, ForeignTemplate
from hami_dcu.webhook.pendingtemplates import decode

log = logging.getLogger(__name__)
JSON = dict[str, Any]
# A template created (or found, or refused) is not tried again for this long: the template watch
# shows it well within it. A failed create is tried again at the pod's next event or relist.
SETTLED_FOR = 60.0
MAX_REMEMBERED = 4096


class DeferredTemplates:
    def __init__(self, dra: DraClaims, clock: Callable[[], float] = time.monotonic) -> None:
        self.dra = dra
        self.clock = clock
        self._settled: dict[tuple[str, str], float] = {}
        self._in_flight: set[tuple[str, str]] = set()
        self._warned: dict[str, float] = {}  # pod uid -> when its unusable annotation was logged
        self._tasks: set[asyncio.Task[None]] = set()

    def seen(self, pod: JSON) -> None:
        meta = pod.get("metadata")
        if not isinstance(meta, dict) or meta.get("deletionTimestamp"):
            return
        annotations = meta.get("annotations")
        if not isinstance(annotations, dict) or names.PENDING_TEMPLATES not in annotations:
            return
        namespace = meta.get("namespace")
        if not isinstance(namespace, str) or not namespace:
            return
        waiting = self._waiting_for(namespace, pod)
        if not waiting:
            return
        templates, problems = decode(annotations[names.PENDING_TEMPLATES], waiting)
        if problems:
            self._warn(pod, namespace, problems)
        for template in templates:
            key = (namespace, template["metadata"]["name"])
            self._settled_since(key)  # forget what is old
            if key in self._in_flight or key in self._settled:
                continue
            self._in_flight.add(key)
            task = asyncio.ensure_future(self._create(namespace, template))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def idle(self) -> None:
        """Wait for the creations under way (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _waiting_for(self, namespace: str, pod: JSON) -> set[str]:
        """The templates the pod names that the template watch does not show yet."""
        spec = pod.get("spec")
        claims = spec.get("resourceClaims") if isinstance(spec, dict) else None
        named = {c.get("resourceClaimTemplateName") for c in claims or () if isinstance(c, dict)}
        known = self.dra.known_template
        return {n for n in named if isinstance(n, str) and (known is None or known(namespace, n) is None)}

    def _settled_since(self, key: tuple[str, str]) -> None:
        now = self.clock()
        at = self._settled.get(key)
        if at is not None and now - at > SETTLED_FOR:
            del self._settled[key]
        if len(self._settled) > MAX_REMEMBERED:
            self._settled = {k: t for k, t in self._settled.items() if now - t <= SETTLED_FOR}

    async def _create(self, namespace: str, template: JSON) -> None:
        key = (namespace, template["metadata"]["name"])
        try:
            await self.dra.create_template(namespace, template)
            self._settled[key] = self.clock()
        except ForeignTemplate as exc:
            # Planted between the review, which found none, and now: the pod's claim will be
            # made from it. Said loudly; the same name is never created over it.
            self._settled[key] = self.clock()
            log.warning("a pod waits for ResourceClaimTemplate %s/%s, which someone else created meanwhile: %s",
                        namespace, key[1], exc)
        except KubeError as exc:
            log.warning("cannot create ResourceClaimTemplate %s/%s for the pods that name it: %s; trying again at "
                        "their next event", namespace, key[1], exc)
        finally:
            self._in_flight.discard(key)

    def _warn(self, pod: JSON, namespace: str, problems: list[str]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or f"{namespace}/{meta.get('name')}")
        now = self.clock()
        if now - self._warned.get(uid, -SETTLED_FOR - 1) <= SETTLED_FOR:
            return
        if len(self._warned) > MAX_REMEMBERED:
            self._warned = {u: t for u, t in self._warned.items() if now - t <= SETTLED_FOR}
        self._warned[uid] = now
        log.warning("pod %s/%s: %s not created: %s", namespace, meta.get("name"), names.PENDING_TEMPLATES,
                    "; ".join(problems)[:500])
