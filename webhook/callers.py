"""Who is calling the webhook: the API server, proven by its client certificate, or anyone
(pure: the peer certificate in, a verdict out).

An AdmissionReview says who made the write (`userInfo`), never who sent the review: anything that
reaches the webhook's port can post one, naming any namespace and any user. The API server
presents a client certificate only when its operator gives it one (kube-apiserver's
`--admission-control-config-file`, which a Helm chart cannot set; README, Webhook client
authentication). With `--client-ca` the webhook's TLS asks every client for a certificate that
CA signed, and /webhook answers a review only over a connection that presented one (and, with
`--client-name`, one naming an allowed subject); the probes on the same port stay open to the
kubelet. Without it every caller is unproven, and the webhook acts accordingly: it creates
nothing while reviewing (webhook/draclaims.py) and its quota refusals carry no figures of the
namespace's quota (common/protocol/quota.py).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol.untrusted import shown


@dataclass(frozen=True)
class ClientAuth:
    """The webhook requires a client certificate (verified against the CA at the handshake);
    `names`, when given, are the subjects allowed: a certificate's common name or one of its
    DNS names must be among them (a CA that signs other clients' certificates too, such as the
    cluster's own, then proves nothing by itself)."""

    names: frozenset[str] = frozenset()

    def refusal(self, peer: Any) -> str | None:
        """Why a review over a connection whose verified peer certificate is `peer` (as
        `ssl.SSLObject.getpeercert()` returns it; None: none presented) is not answered."""
        if not isinstance(peer, dict) or not peer:
            return ("this webhook answers only the API server: present the client certificate configured for "
                    "it (webhook.clientAuth)")
        if not self.names:
            return None
        subjects = certificate_names(peer)
        if subjects & self.names:
            return None
        seen = ", ".join(sorted(shown(s) for s in subjects)) or "none"
        return f"client certificate names {seen}, none of them allowed to call this webhook"


def certificate_names(peer: dict[str, Any]) -> frozenset[str]:
    """The common names and DNS subject alternative names of a decoded peer certificate
    (`subject`: a tuple of RDNs, each a tuple of (key, value) pairs; `subjectAltName`: pairs)."""
    names: set[str] = set()
    for rdn in _items(peer.get("subject")):
        names.update(value for key, value in _pairs(rdn) if key == "commonName")
    names.update(value for key, value in _pairs(peer.get("subjectAltName")) if key == "DNS")
    return frozenset(names)


def _items(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, tuple | list) else ()


def _pairs(value: Any) -> list[tuple[str, str]]:
    return [(item[0], item[1]) for item in _items(value)
            if isinstance(item, tuple | list) and len(item) == 2 and all(isinstance(i, str) for i in item)]


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ApiServerAddresses:
    """Where the API server's reviews come from (the chart gives the addresses its
    NetworkPolicy lets in: `networkPolicy.apiServer.cidrs`, or the `kubernetes` Endpoints).
    Without a client certificate a review proves nothing of its sender, but its TCP peer
    cannot be forged: a review from elsewhere is answered, and holds none of its namespace's
    quota while its object is being stored (a forged one would hold another namespace's quota
    for nothing, issue 35)."""

    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, cidrs: Iterable[str]) -> ApiServerAddresses:
        """From CIDRs or bare addresses. Raises ValueError naming a malformed one."""
        networks: list[Network] = []
        for cidr in cidrs:
            try:
                networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
            except ValueError as exc:
                raise ValueError(f"--api-server-cidr {cidr!r}: not an address or CIDR ({exc})") from None
        return cls(tuple(networks))

    def includes(self, peer: str | None) -> bool:
        """Whether a connection from `peer` (the socket's address; None when unknown) is the
        API server's. An IPv4 address seen on an IPv6 socket (::ffff:a.b.c.d) is itself."""
        if not peer:
            return False
        try:
            address = ipaddress.ip_address(peer.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)
