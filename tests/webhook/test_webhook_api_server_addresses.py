"""Issue 35, the Medium left open: without a client certificate anything that reaches the
webhook port can post a review, and a forged review for another namespace's claim held that
namespace's DCU quota for 30 s (the reservation kept until a list shows the claim), again and
again. With the API server's addresses given (`--api-server-cidr`, the chart passes those its
NetworkPolicy admits), a review from elsewhere is still answered but reserves nothing: only the
API server's reviews, whose objects are about to be stored, hold quota."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from test_webhook_dra import FakeKube
from test_webhook_dra_quota_race import SETTINGS, answer, claim, claim_review

from hami_dcu.cli.main import build_parser
from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.webhook.callers import ApiServerAddresses
from hami_dcu.webhook.command import api_server_from
from hami_dcu.webhook.draclaims import DraClaims
from hami_dcu.webhook.server import build_app


@pytest.mark.parametrize(("cidrs", "peer", "included"), [
    (["10.0.0.0/8"], "10.1.2.3", True),
    (["10.0.0.0/8"], "192.168.0.1", False),
    (["172.18.0.3"], "172.18.0.3", True),  # a bare address is a /32
    (["172.18.0.3"], "::ffff:172.18.0.3", True),  # IPv4 seen on an IPv6 socket
    (["fd00::/64"], "fd00::5", True),
    (["fd00::/64"], "fe80::1%eth0", False),
    (["10.0.0.0/8"], None, False),
    (["10.0.0.0/8"], "not-an-address", False),
])
def test_addresses_include_exactly_the_listed_networks(cidrs: list[str], peer: str | None, included: bool) -> None:
    assert ApiServerAddresses.parse(cidrs).includes(peer) is included


def test_a_malformed_cidr_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=re.escape("--api-server-cidr '10.0.0.300/8'")):
        ApiServerAddresses.parse(["10.0.0.0/8", "10.0.0.300/8"])


def test_the_flag_repeats_and_takes_comma_lists_for_both_commands() -> None:
    parser, _ = build_parser()
    for command in (["webhook", "--tls-cert", "c", "--tls-key", "k"], ["scheduler"]):
        args = parser.parse_args([*command, "--api-server-cidr", "10.0.0.0/8,172.18.0.3",
                                  "--api-server-cidr", "fd00::/64"])
        addresses = api_server_from(args)
        assert addresses is not None and len(addresses.networks) == 3
        assert api_server_from(parser.parse_args(command)) is None  # not given: every review holds quota


async def webhook(aiohttp_client: Any, api_server: ApiServerAddresses | None) -> Any:
    dra = DraClaims(AsyncKube(FakeKube()))  # type: ignore[arg-type]
    return await aiohttp_client(build_app(SETTINGS, CollectorRegistry(), dra=dra, api_server=api_server))


async def test_a_review_from_elsewhere_is_answered_and_holds_no_quota(aiohttp_client: Any) -> None:
    """The test client connects from 127.0.0.1: not the API server's here. Two claims of 8 GiB
    against 10 GiB, neither stored yet: each is admitted on its own, as neither reserves."""
    client = await webhook(aiohttp_client, ApiServerAddresses.parse(["10.96.0.1/32"]))
    for uid in ("forged-1", "forged-2"):
        admitted = await answer(client, claim_review(claim(), uid))
        assert admitted["allowed"] and not admitted.get("patch")  # no reservation stamped
    # A claim past the quota on its own is still refused, whoever asks.
    assert not (await answer(client, claim_review(claim("12Gi"), "too-big")))["allowed"]


async def test_a_review_from_the_api_servers_address_holds_the_quota(aiohttp_client: Any) -> None:
    client = await webhook(aiohttp_client, ApiServerAddresses.parse(["127.0.0.0/8"]))
    first = await answer(client, claim_review(claim(), "r1"))
    assert first["allowed"] and first.get("patch")  # stamped with its reservation
    assert not (await answer(client, claim_review(claim(), "r2")))["allowed"]  # r1 holds 8 of 10 GiB
