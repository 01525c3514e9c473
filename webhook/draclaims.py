"""DRA mode's I/O for the webhook: the card sizes published in ResourceSlices (which the pure
decision needs to turn a cores percentage into compute units, and the quota to turn compute
units back into a percentage), a namespace's ResourceClaims (what its quota counts), and the
get-or-create of the ResourceClaimTemplates a rewritten pod names. The decision itself stays pure (decision.py).

Templates are named by a hash of their spec (common/protocol/dra/translate.py): creating is idempotent, and a
create racing another replica's (409) finds the same template. A template found under the name
is reused only when it is ours (webhook/templatetrust.py): anyone who can create templates in
the namespace can compute the name. A review with dryRun creates nothing (the configuration
declares NoneOnDryRun).

In the extender's process its watch of templates answers first (`known_template`): a template
the watch shows as ours is used without a read, one it does not show, or shows as not ours, is
read as before. The watch trails the API by its delivery time; the read had the same gap
already, between the review and kube-controller-manager making the claim from the template.

The card sizes, too, come from the extender's watch of ResourceSlices when it has listed them
(`known_cards`: per slice, its `published_cards`, and a version that changes with any slice):
the list they were read from otherwise is every slice of our driver whole, 17 MB of JSON and
41 MiB decoded at 1,000 nodes x 8 cards, and when the minute-old view expired during a burst,
every review waiting on it listed at once on the API client's thread pool: the extender's RSS
went from 340 to 1,091 MiB in 5 s (issue 40, item 6). Without a watch (the standalone webhook),
or while it shows none of our cards, the list is read as before, one at a time: a review that
finds a list under way waits for it instead of starting its own.

Claims in flight (issue 35, finding 3). The quota counts the claims kube-apiserver has stored,
one review at a time per namespace; but kube-apiserver stores a claim only after its review is
answered, so the next review's list may not show it yet: 8 claims of 8 GiB created at once
against a 10 GiB quota were admitted two at a time. So each claim this process admits stays
reserved (`reserve`) until a list of the namespace's claims shows it (the webhook stamps the
claim with `hami.io/quota-reservation: <review uid>`), or RESERVATION_TTL passes: a claim
refused after our review (Kubernetes' own quota, another webhook) is never stored. The
reservations live in this process; with the chart's one scheduler replica it decides every
review (README, the namespace DCU quota in DRA mode, says what two replicas leave open).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from hami_dcu.common.io.kube import AsyncKube, ConflictError, KubeError, NotFoundError
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.errors import WebhookError
from hami_dcu.common.protocol.keys import QUOTA_RESERVATION
from hami_dcu.webhook.draquota import ClaimAmount, PublishedCards, merged_cards, published_cards
from hami_dcu.webhook.templatetrust import foreign_template

log = logging.getLogger(__name__)


class ForeignTemplate(WebhookError):
    """A template under the name we would use is not ours; the message says what to do."""

    http_status = 409
    grpc_code = "ALREADY_EXISTS"


JSON = dict[str, Any]
# A watch's view of our cards: a version that changes whenever a slice does, and each slice's
# `published_cards`; None until the watch has listed the slices.
KnownCards = Callable[[], tuple[int, Iterable[PublishedCards]] | None]
SLICES = f"{names.RESOURCE_API}/resourceslices"
# Card sizes change only when nodes with new models join: a minute-old view costs a pod at most
# a retry, while listing every slice on every review would cost the API server per pod.
UNITS_MAX_AGE = 60.0
RESERVATION_TTL = 30.0  # seconds an admitted claim stays reserved when no list shows it


def templates_path(namespace: str) -> str:
    return f"{names.RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"


def units_of(slices: list[JSON]) -> tuple[int, ...]:
    """The distinct compute-unit counts of the DCUs our driver publishes, smallest first."""
    return published_cards(slices).units


def claims_path(namespace: str) -> str:
    return f"{names.RESOURCE_API}/namespaces/{namespace}/resourceclaims"


class DraClaims:
    def __init__(self, kube: AsyncKube, clock: Callable[[], float] = time.monotonic,
                 max_age: float = UNITS_MAX_AGE,
                 known_template: Callable[[str, str], JSON | None] | None = None,
                 reservation_seen: Callable[[str], bool] | None = None,
                 known_cards: KnownCards | None = None) -> None:
        self.kube = kube
        self.known_cards = known_cards
        self._watched: tuple[int, PublishedCards] | None = None  # known_cards merged, at its version
        self._listing = asyncio.Lock()  # one list of the slices at a time
        # In the extender's process: has its watch shown a claim carrying this reservation?
        self.reservation_seen = reservation_seen
        self.known_template = known_template  # (namespace, name) -> the template as a watch shows it
        self.clock = clock
        self.max_age = max_age
        self._cards = PublishedCards()
        self._listed_at: float | None = None
        self._namespace_locks: dict[str, asyncio.Lock] = {}
        # Per namespace, the claims admitted here and not listed yet: reservation id -> (amount, deadline).
        self._reserved: dict[str, dict[str, tuple[ClaimAmount, float]]] = {}

    async def card_units(self) -> tuple[int, ...]:
        return (await self.cards()).units

    async def cards(self) -> PublishedCards:
        """The watch's view when it shows any card (`known_cards`); else a list, cached for
        `max_age`, one at a time; none known yet is re-listed every time (the first driver may
        have just published, and a share asking cores cannot be admitted without it)."""
        watched = self._watched_cards()
        if watched is not None and watched.by_device:
            return watched
        if self._fresh(self.clock()):
            return self._cards
        async with self._listing:
            now = self.clock()
            if self._fresh(now):  # listed while this review waited for the lock
                return self._cards
            return await self._list_cards(now)

    def _watched_cards(self) -> PublishedCards | None:
        """The watch's view merged, once per version of it; None without one."""
        known = self.known_cards() if self.known_cards is not None else None
        if known is None:
            return None
        version, parts = known
        if self._watched is None or self._watched[0] != version:
            self._watched = (version, merged_cards(parts))
        return self._watched[1]

    def _fresh(self, now: float) -> bool:
        return bool(self._cards.by_device) and self._listed_at is not None and now - self._listed_at < self.max_age

    async def _list_cards(self, now: float) -> PublishedCards:
        try:
            listed = await self.kube.call(self.kube.kube.request, "GET", SLICES,
                                          query={"fieldSelector": f"spec.driver={names.DRIVER}"})
        except KubeError as exc:
            # The last view is better than none; with none the decision says what is missing.
            log.warning("cannot list ResourceSlices for the card sizes: %s", exc)
            return self._cards
        self._cards, self._listed_at = published_cards(listed.get("items") or []), now
        return self._cards

    async def claims_in(self, namespace: str) -> list[JSON]:
        """The namespace's ResourceClaims, read now (the quota counts them). Raises KubeError."""
        listed = await self.kube.call(self.kube.kube.request, "GET", claims_path(namespace))
        return list(listed.get("items") or [])

    def namespace_lock(self, namespace: str) -> asyncio.Lock:
        """One quota check at a time per namespace in this process: a review counts the claims
        the previous one admitted, listed once stored, reserved (`in_flight`) until then."""
        return self._namespace_locks.setdefault(namespace, asyncio.Lock())

    def seen_by_watch(self, namespace: str) -> set[str]:
        """The reservations held in `namespace` whose claims the extender's watch has shown by
        now. Call it under the namespace's lock, before reading the list `in_flight` weighs:
        only a claim the watch showed before the list began is in that list unless deleted."""
        watched = self.reservation_seen
        held = self._reserved.get(namespace)
        if watched is None or not held:
            return set()
        return {r for r in held if watched(r)}

    def in_flight(self, namespace: str, claims: list[JSON], seen_before_list: set[str]) -> ClaimAmount:
        """What the claims admitted here in `namespace` hold that `claims`, a list read after
        they were admitted, does not show yet; reservations it shows, or the extender's watch
        had shown before the list was read (`seen_by_watch`: a claim stored and deleted before
        this list), or past their deadline, are dropped. A claim the watch showed only while
        the list was on the wire may be stored after the list's read: it stays reserved (two of
        eight 8 GiB claims passed a 10 GiB quota when it did not). Call it under the
        namespace's lock."""
        held = self._reserved.get(namespace)
        if not held:
            return ClaimAmount()
        listed = {_reservation_of(claim) for claim in claims}
        now = self.clock()
        for reservation in [r for r, (_amount, deadline) in held.items()
                            if deadline <= now or r in listed or r in seen_before_list]:
            del held[reservation]
        if not held:
            del self._reserved[namespace]
        return sum((amount for amount, _deadline in held.values()), start=ClaimAmount())

    def reserve(self, namespace: str, reservation: str, amount: ClaimAmount) -> None:
        """Count `amount` in `namespace` until a list shows the claim stamped `reservation`.
        Call it under the namespace's lock, before the review is answered."""
        self._reserved.setdefault(namespace, {})[reservation] = (amount, self.clock() + RESERVATION_TTL)

    async def ensure_templates(self, namespace: str, templates: list[JSON]) -> None:
        """Get-or-create each template in `namespace`. Raises ForeignTemplate when one found
        under the name is not ours (webhook/templatetrust.py), KubeError when one cannot be made."""
        for template in templates:
            if await self._stored(namespace, template) is None:
                await self.create_template(namespace, template)

    async def missing_templates(self, namespace: str, templates: list[JSON]) -> list[JSON]:
        """Of `templates`, those `namespace` does not hold yet; nothing is created (a review no
        caller has proven to be the API server's, webhook/callers.py). Raises ForeignTemplate
        when one found under the name is not ours, KubeError when one cannot be read."""
        return [t for t in templates if await self._stored(namespace, t) is None]

    async def create_template(self, namespace: str, template: JSON) -> None:
        """Create `template`; one already there under its name (another review, another replica,
        or planted) is read and must be ours. Raises ForeignTemplate or KubeError."""
        path, name = templates_path(namespace), template["metadata"]["name"]
        try:
            await self.kube.call(self.kube.kube.request, "POST", path, body=template)
            log.info("created ResourceClaimTemplate %s/%s", namespace, name)
            return
        except ConflictError:
            found = await self.kube.call(self.kube.kube.request, "GET", f"{path}/{name}")
        self._check_ours(namespace, found, template)

    async def _stored(self, namespace: str, template: JSON) -> JSON | None:
        """The template stored under `template`'s name when it is ours, None when there is none.
        Raises ForeignTemplate when it is not ours."""
        name = template["metadata"]["name"]
        watched = self.known_template(namespace, name) if self.known_template is not None else None
        if watched is not None and foreign_template(watched, template, namespace) is None:
            return watched
        try:
            found = await self.kube.call(self.kube.kube.request, "GET", f"{templates_path(namespace)}/{name}")
        except NotFoundError:
            return None
        self._check_ours(namespace, found, template)
        return found

    @staticmethod
    def _check_ours(namespace: str, found: JSON, template: JSON) -> None:
        problem = foreign_template(found, template, namespace)
        if problem is not None:
            log.warning("ResourceClaimTemplate %s/%s is not hami-dcu's: not reused", namespace,
                        template["metadata"]["name"])
            raise ForeignTemplate(problem)


def _reservation_of(claim: JSON) -> str | None:
    meta = claim.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(QUOTA_RESERVATION) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else None
