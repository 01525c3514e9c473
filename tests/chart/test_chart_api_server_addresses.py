"""The extender is told where the API server's reviews come from: the addresses the
NetworkPolicy admits to the webhook port (SECURITY.md, issue 35). Only those reviews hold
a namespace's quota while their objects are stored; with webhook.clientAuth the certificate
proves the caller and no address is passed."""

from __future__ import annotations

from collections.abc import Callable

from hami_dcu.cli.main import build_parser
from hami_dcu.webhook.command import api_server_from

Render = Callable[..., list[dict]]
CIDRS = "networkPolicy.apiServer.cidrs={10.0.0.0/8,172.18.0.3/32}"


def extender_args(docs: list[dict]) -> list[str]:
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-scheduler")]
    [extender] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"]
    return extender["args"]


def admitted(docs: list[dict]) -> list[str]:
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-scheduler")]
    return [peer["ipBlock"]["cidr"] for rule in policy["spec"]["ingress"] for peer in rule.get("from", [])
            if "ipBlock" in peer]


def test_the_extender_gets_the_addresses_the_networkpolicy_admits(render: Render) -> None:
    docs = render("--set", CIDRS)
    args = extender_args(docs)
    assert "--api-server-cidr=10.0.0.0/8,172.18.0.3/32" in args
    assert admitted(docs) == ["10.0.0.0/8", "172.18.0.3/32"]
    # and the extender's command line takes it
    addresses = api_server_from(build_parser()[0].parse_args(args))
    assert addresses is not None and addresses.includes("172.18.0.3") and not addresses.includes("172.18.0.4")


def test_no_address_known_or_no_networkpolicy_passes_none(render: Render) -> None:
    # `helm template` reads no EndpointSlice: every review holds quota, as before.
    assert not [a for a in extender_args(render()) if a.startswith("--api-server-cidr")]
    off = render("--set", CIDRS, "--set", "networkPolicy.enabled=false")
    assert not [a for a in extender_args(off) if a.startswith("--api-server-cidr")]


def test_with_client_auth_the_certificate_decides_not_the_address(render: Render) -> None:
    docs = render("--set", CIDRS, "--set", "webhook.clientAuth.enabled=true",
                  "--set", "webhook.clientAuth.existingConfigMap=apiserver-ca")
    args = extender_args(docs)
    assert "--client-ca=/client-ca/ca.crt" in args
    assert not [a for a in args if a.startswith("--api-server-cidr")]
