"""Serving TLS whose certificate follows the files on disk (a rotated Secret updates them).
Used by the webhook and the scheduler extender."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

log = logging.getLogger(__name__)
# What Go's crypto/tls (kube-apiserver, kube-scheduler) offers first, for ECDSA and RSA keys.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def pem_pair_problem(cert_file: Path, key_file: Path) -> str | None:
    """Why `cert_file`/`key_file` cannot serve TLS, in words (OpenSSL says only "PEM lib"),
    or None. The files are known to be readable."""
    try:
        certificate = x509.load_pem_x509_certificates(cert_file.read_bytes())[0]
    except ValueError:
        return f"--tls-cert {cert_file}: not a PEM certificate (expected a -----BEGIN CERTIFICATE----- block)"
    try:
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except TypeError:
        return f"--tls-key {key_file}: the key is encrypted; the server needs it unencrypted"
    except (ValueError, UnsupportedAlgorithm):
        return f"--tls-key {key_file}: not a PEM private key (expected a -----BEGIN ... PRIVATE KEY----- block)"
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if certificate.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        return f"--tls-key {key_file} is not the key of --tls-cert {cert_file} (their public keys differ)"
    return None


class ReloadingTLS:
    """Serving TLS that follows cert and key on disk (and `client_ca`, when given: a client may
    then present a certificate, verified against it; whether one must is the server's to say,
    per path, e.g. the webhook's for /webhook and not for the kubelet's probes). Each reload builds a new context and,
    only once the pair has loaded whole, makes it the one new handshakes use (the listener's
    `context` hands each handshake to the current one from its SNI callback, which OpenSSL
    calls for every ClientHello, with or without a server name). Loading into the live
    context instead would not be atomic: OpenSSL takes the certificate first and drops the
    loaded key if it does not match, so a certificate read beside the old key (a volume
    caught mid-update) would leave no usable key and fail every handshake until the next
    good reload."""

    def __init__(self, cert_file: str, key_file: str, client_ca: str | None = None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca = client_ca
        self._stamp = self._mtimes()
        self._current = self._load()  # raises when the pair cannot serve: the caller says why
        self.context = self._load()
        self.context.sni_callback = self._hand_over

    @staticmethod
    def _new_context() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # TLS 1.2: ECDHE with AEAD only (OpenSSL's default also offers CBC suites, open to
        # padding-oracle attacks). TLS 1.3 suites are all AEAD and not set here.
        context.set_ciphers(TLS12_CIPHERS)
        return context

    def _load(self) -> ssl.SSLContext:
        context = self._new_context()
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca is not None:
            # Optional at the handshake, verified when presented: a certificate the CA did not
            # sign fails the handshake; none at all is the request handler's to refuse. Every
            # context gets it alike (the listener's, and each one a handshake is handed over to).
            context.load_verify_locations(cafile=self.client_ca)
            context.verify_mode = ssl.CERT_OPTIONAL
        return context

    def _hand_over(self, connection: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None,
                   _listener: ssl.SSLContext) -> None:
        if connection.context is not self._current:
            connection.context = self._current

    def _mtimes(self) -> tuple[float, ...]:
        files = (self.cert_file, self.key_file, *((self.client_ca,) if self.client_ca is not None else ()))
        return tuple(os.stat(f).st_mtime_ns for f in files)

    def reload_if_changed(self) -> bool:
        try:
            stamp = self._mtimes()
        except OSError as exc:
            log.warning("TLS files unreadable, keeping the loaded certificate: %s", exc)
            return False
        if stamp == self._stamp:
            return False
        try:
            loaded = self._load()
        except (ssl.SSLError, OSError) as exc:
            # A half-written pair (cert updated, key not yet): try again on the next tick.
            log.warning("TLS reload failed, keeping the loaded certificate: %s", exc)
            return False
        self._current = loaded
        self._stamp = stamp
        log.info("reloaded TLS certificate from %s", self.cert_file)
        return True

    async def watch(self, interval: float = 10.0) -> None:
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                self.reload_if_changed()


def add_client_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """The webhook's client authentication flags (webhook/callers.py), taken by `hami-dcu
    webhook` and by `hami-dcu scheduler`, which serves the webhook in its process."""
    parser.add_argument("--client-ca", default=None, metavar="FILE",
                        help="the webhook answers reviews only from clients presenting a certificate this CA (PEM) "
                             "signed: the API server's, as its --admission-control-config-file gives it one "
                             "(reloaded when it changes); without it no caller is proven, and the webhook creates "
                             "nothing while reviewing and names no quota figure")
    parser.add_argument("--client-name", action="append", default=None, metavar="NAME",
                        help="with --client-ca: the client certificate's common name or a DNS name must be one of "
                             "these (repeatable; default: any certificate the CA signed)")
    parser.add_argument("--api-server-cidr", action="append", default=None, metavar="CIDR",
                        help="where the API server's reviews come from (repeatable; the chart passes the "
                             "addresses its NetworkPolicy admits): without --client-ca only a review from these "
                             "holds its namespace's quota while its object is stored; a review from elsewhere is "
                             "still answered (default: every review holds it)")
