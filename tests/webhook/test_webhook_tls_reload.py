"""A certificate reload that fails leaves the listener serving the certificate it had.

OpenSSL loads a pair into a context in two steps (certificate, then key), and a certificate
whose key differs from the loaded one drops that key: a reload that reads a new certificate
beside the old key (a volume caught mid-update) would leave the live context with no usable
key, and every handshake would fail until the next good reload. The CI flake of the renewal
test ("Cannot connect to host ... ssl" right after "TLS reload failed") was this."""

import socket
import ssl

from hami_dcu.webhook.certs import issue


def served_certificate(served) -> bytes:
    """What the listener serves, asked with a server name (SNI, as kube-apiserver sends for a
    Service's name) and without (an IP address); both must agree."""
    served_as = set()
    host, port = served.url.removeprefix("https://").split(":")
    for name in ("localhost", "127.0.0.1"):
        context = ssl.create_default_context(cafile=str(served.ca_file))
        with socket.create_connection((host, int(port)), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname=name) as tls:
            served_as.add(tls.getpeercert(binary_form=True))
    assert len(served_as) == 1, "with and without SNI the listener served different certificates"
    return served_as.pop()


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


def test_a_certificate_without_its_key_is_not_loaded_and_handshakes_go_on(served_webhook, tmp_path):
    old = served_webhook.bundle
    new = issue(["localhost"], ip_addresses=["127.0.0.1"], ca=(old.ca_cert, old.ca_key))
    cert_file, key_file = served_webhook.tls.cert_file, served_webhook.tls.key_file

    with open(cert_file, "wb") as f:  # the certificate renewed, its key not yet
        f.write(new.cert)
    assert served_webhook.tls.reload_if_changed() is False
    assert served_certificate(served_webhook) == der(old.cert)

    with open(key_file, "wb") as f:  # the pair complete again
        f.write(new.key)
    assert served_webhook.tls.reload_if_changed() is True
    assert served_certificate(served_webhook) == der(new.cert)


def test_an_unreadable_key_is_not_loaded_and_handshakes_go_on(served_webhook):
    with open(served_webhook.tls.key_file, "wb") as f:
        f.write(b"not a key")
    assert served_webhook.tls.reload_if_changed() is False
    assert served_certificate(served_webhook) == der(served_webhook.bundle.cert)
