"""A ResourceClaim review whose metadata is not an object, or whose namespace is not a string,
is answered, never with a 5xx (security round 5). Its metadata is not shape-checked as a pod's
is: the quota check read `object.metadata.namespace` and raised AttributeError (500) when the
request named no namespace and metadata was a string or a number, and a list as namespace
reached the quota lookup's dict (unhashable: 500)."""

from __future__ import annotations

from typing import Any

import pytest
from test_webhook_dra import FakeKube
from test_webhook_dra_quota_race import claim, claim_review, webhook

from hami_dcu.common.protocol import keys
from hami_dcu.webhook.decision import DRA, Settings

QUOTAS: dict[str, Any] = {}


def lookup(namespace: str) -> Any:
    return QUOTAS.get(namespace)  # a dict, as the extender's QuotaBook: an unhashable key raises


STRICT = Settings(naming=keys.DCU_NAMING, mode=DRA, quota=lookup)


@pytest.mark.parametrize("meta", ["x", 5, [], None, {"namespace": ["a"]}, {"namespace": 7},
                                  {"namespace": {"a": 1}}, {"annotations": "x"}])
async def test_a_claim_review_with_odd_metadata_is_answered(aiohttp_client: Any, meta: Any) -> None:
    client, _ = await webhook(aiohttp_client, FakeKube(), settings=STRICT)
    obj = claim()
    obj["metadata"] = meta
    body = claim_review(obj, "odd")
    body["request"]["namespace"] = ""
    response = await client.post("/webhook", json=body)
    assert response.status < 500, await response.text()

