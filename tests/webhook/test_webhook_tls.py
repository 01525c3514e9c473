"""TLS on the webhook's real listener (the extender serves with the same ReloadingTLS):
TLS 1.2 offers AEAD suites only, older versions are refused."""

import socket
import ssl

import pytest

from hami_dcu.common.io.tls import ReloadingTLS

# Every TLS 1.2 CBC suite OpenSSL offers for an ECDSA or RSA certificate.
CBC_SUITES = ("ECDHE-ECDSA-AES256-SHA384:ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA:ECDHE-ECDSA-AES128-SHA:"
              "ECDHE-RSA-AES256-SHA384:ECDHE-RSA-AES128-SHA256:ECDHE-RSA-AES256-SHA:ECDHE-RSA-AES128-SHA:"
              "DHE-RSA-AES256-SHA256:DHE-RSA-AES128-SHA256:AES256-SHA256:AES128-SHA256:AES256-SHA:AES128-SHA")


def handshake(served, *, ciphers: str | None = None, version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2) -> str:
    """The negotiated cipher's name; raises ssl.SSLError when the server refuses."""
    context = ssl.create_default_context(cafile=str(served.ca_file))
    context.minimum_version = context.maximum_version = version
    if ciphers:
        context.set_ciphers(ciphers)
    host, port = served.url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return tls.cipher()[0]


def test_tls12_client_offering_only_cbc_is_refused(served_webhook):
    with pytest.raises(ssl.SSLError):
        handshake(served_webhook, ciphers=CBC_SUITES)


@pytest.mark.parametrize("suite", ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384"])
def test_the_two_cbc_suites_the_issue_found_are_gone(served_webhook, suite):
    with pytest.raises(ssl.SSLError):
        handshake(served_webhook, ciphers=suite)


def test_tls12_aead_and_tls13_still_work(served_webhook):
    assert "GCM" in handshake(served_webhook) or "CHACHA20" in handshake(served_webhook)
    assert handshake(served_webhook, version=ssl.TLSVersion.TLSv1_3).startswith("TLS_")


def test_context_lists_only_aead_suites_for_tls12(served_webhook):
    tls: ReloadingTLS = served_webhook.tls
    suites = [c for c in tls.context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert suites and all(c["aead"] for c in suites), [c["name"] for c in suites if not c["aead"]]
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
