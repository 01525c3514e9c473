"""Webhook certificates: a private CA and a serving certificate for the webhook Service.

`issue` is pure (cryptography only) and is what the local cluster reuses. `ensure` is the
idempotent cluster-side job behind `hami-dcu certs`: keep what is in the Secrets while it is
valid for the Service name and has more than 30 days left, otherwise issue anew, then make
sure the MutatingWebhookConfiguration's caBundle is that CA.

Two Secrets, so the CA key never reaches a serving pod: the serving Secret (`tls.crt`,
`tls.key`, `ca.crt`) is what the webhook mounts; the CA Secret (`ca.crt`, `ca.key`) is read
and written by this job only and mounted nowhere. Whoever holds the CA key can mint a
certificate the API server trusts for the webhook, so it must not sit beside a network-facing
process. A serving Secret of the old layout (with `ca.key`) is migrated: its CA moves to the
CA Secret and the key is dropped from the serving Secret.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hami_dcu.common.io.kube import ConflictError, Kube, KubeError, NotFoundError

log = logging.getLogger(__name__)

CA_DAYS = 3650
SERVING_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True)
class CertBundle:
    ca_cert: bytes  # PEM
    ca_key: bytes
    cert: bytes
    key: bytes

    def secret_data(self) -> dict[str, str]:
        """The serving Secret: what the webhook mounts. Never the CA key."""
        return {"tls.crt": _b64(self.cert), "tls.key": _b64(self.key), "ca.crt": _b64(self.ca_cert)}

    def ca_secret_data(self) -> dict[str, str]:
        """The CA Secret: read by the certs job only, to sign renewals."""
        return {"ca.crt": _b64(self.ca_cert), "ca.key": _b64(self.ca_key)}

    @classmethod
    def from_secrets(cls, serving: dict[str, Any] | None, ca: dict[str, Any] | None) -> CertBundle | None:
        """The bundle the two Secrets hold, or None when either part is missing. The CA comes
        from the CA Secret, else (old layout) from the serving Secret's `ca.key`."""
        data = (serving or {}).get("data") or {}
        ca_data = (ca or {}).get("data") or {}
        source = ca_data if "ca.key" in ca_data else data
        try:
            return cls(*(base64.b64decode(d[k]) for d, k in ((source, "ca.crt"), (source, "ca.key"),
                                                            (data, "tls.crt"), (data, "tls.key"))))
        except (KeyError, ValueError):
            return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ca_secret_name(serving_secret: str) -> str:
    """The default name of the CA Secret beside a serving Secret."""
    return f"{serving_secret}-ca"


KEY_MODE = 0o400  # only the owner reads a private key; nobody, the owner included, rewrites it in place
CERT_MODE = 0o644


def write_pem_files(directory: str | Path, files: Mapping[str, bytes]) -> None:
    """Write `files` (name -> PEM) into `directory`: private keys (`*.key`) mode 0400,
    certificates 0644, whatever the umask. Each file is written to a temporary name created
    with its final mode and renamed over the old one, so a reader never sees a half-written
    key, nor a moment where it is readable by others, and a 0400 file can be replaced."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        mode = KEY_MODE if name.endswith(".key") else CERT_MODE
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)  # created 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, directory / name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def service_dns_names(service: str, namespace: str) -> list[str]:
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", f"{service}.{namespace}", service]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def issue(
    dns_names: list[str],
    ip_addresses: list[str] | None = None,
    now: dt.datetime | None = None,
    ca: tuple[bytes, bytes] | None = None,
) -> CertBundle:
    """A serving certificate for `dns_names` (SANs; the first is also the CN), signed by `ca`
    (PEM cert, PEM key) or by a new CA."""
    import ipaddress

    now = now or dt.datetime.now(dt.UTC)
    if ca is None:
        ca_key = _key()
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hami-dcu-webhook-ca")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            # Key identifiers tell CAs of the same name apart: during a CA rotation the caBundle
            # holds the old and the new one, and OpenSSL picks the issuer by them.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        ca_pem, ca_key_pem = ca_cert.public_bytes(serialization.Encoding.PEM), _pem_key(ca_key)
    else:
        ca_pem, ca_key_pem = ca
        ca_cert = x509.load_pem_x509_certificate(ca_pem)
        loaded = serialization.load_pem_private_key(ca_key_pem, None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey), "the CA key must be an EC key"
        ca_key = loaded
    key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses or []]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVING_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    try:
        ca_key_id = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        pass  # a CA issued before key identifiers: nothing to point at
    else:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return CertBundle(
        ca_cert=ca_pem, ca_key=ca_key_pem, cert=cert.public_bytes(serialization.Encoding.PEM), key=_pem_key(key)
    )


def renewal_reason(bundle: CertBundle, dns_names: list[str], now: dt.datetime | None = None) -> str | None:
    """Why `bundle` must be replaced, or None when it is still good for `dns_names`."""
    now = now or dt.datetime.now(dt.UTC)
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert)
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
    except ValueError:
        return "unreadable certificate"
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return f"serving certificate expires {cert.not_valid_after_utc:%Y-%m-%d}"
    if ca.not_valid_after_utc - now < RENEW_BEFORE:
        return f"CA expires {ca.not_valid_after_utc:%Y-%m-%d}"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subjectAltName"
    missing = set(dns_names) - set(san.get_values_for_type(x509.DNSName))
    if missing:
        return f"not valid for {', '.join(sorted(missing))}"
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "not signed by the stored CA"
    return None


WEBHOOK_CONFIG_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def ensure(
    kube: Kube, namespace: str, service: str, secret: str, webhook_config: str | None, now: dt.datetime | None = None,
    ca_secret: str | None = None,
) -> tuple[CertBundle, str]:
    """Make the Secrets hold a valid bundle and the webhook trust its CA. Returns the bundle
    and what was done ("kept", "moved the CA key", or why it was issued)."""
    ca_secret = ca_secret or ca_secret_name(secret)
    dns_names = service_dns_names(service, namespace)
    existing = _get_secret(kube, namespace, secret)
    existing_ca = _get_secret(kube, namespace, ca_secret)
    bundle = CertBundle.from_secrets(existing, existing_ca)
    retiring_ca = b""  # a replaced CA, trusted beside the new one until the next run
    reason = (
        "no secret"
        if existing is None
        else ("secret incomplete" if bundle is None else renewal_reason(bundle, dns_names, now))
    )
    if reason is None and bundle is not None:
        action = "kept"
    else:
        ca = None
        if bundle is not None:
            ca_cert = x509.load_pem_x509_certificate(bundle.ca_cert)
            if ca_cert.not_valid_after_utc - (now or dt.datetime.now(dt.UTC)) > RENEW_BEFORE:
                ca = (bundle.ca_cert, bundle.ca_key)  # keep the CA: API servers keep trusting it
            elif ca_cert.not_valid_after_utc > (now or dt.datetime.now(dt.UTC)):
                # A new CA: the webhook serves the old certificate until the kubelet updates its
                # Secret volume (about a minute), so the API server trusts both CAs meanwhile;
                # the next run (the daily renewal CronJob) leaves the new one alone.
                retiring_ca = bundle.ca_cert
        bundle = issue(dns_names, now=now, ca=ca)
        action = f"issued ({reason})"
    # The CA Secret first: a crash between the two writes must never lose the only CA key.
    _put_secret(kube, namespace, ca_secret, existing_ca, bundle.ca_secret_data(), "Opaque")
    legacy = "ca.key" in ((existing or {}).get("data") or {})
    if action != "kept" or legacy:
        if not _put_secret(kube, namespace, secret, existing, bundle.secret_data(), "kubernetes.io/tls"):
            # Another replica of this job created it meanwhile: use what it stored.
            return ensure(kube, namespace, service, secret, webhook_config, now, ca_secret)
        if action == "kept":
            action = "kept (moved the CA key out of the serving secret)"
    if action != "kept":
        log.info("secret %s/%s: certificate %s; CA in secret %s", namespace, secret, action, ca_secret)
    if webhook_config:
        inject_ca_bundle(kube, webhook_config, bundle.ca_cert + retiring_ca)
    return bundle, action


def _get_secret(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except NotFoundError:
        return None


def _put_secret(kube: Kube, namespace: str, name: str, existing: dict[str, Any] | None, data: dict[str, str],
                secret_type: str) -> bool:
    """Create or replace the Secret with `data` unless it already holds exactly that. False
    when a create lost a race (the caller re-reads); True when written or already so."""
    if existing is not None and (existing.get("data") or {}) == data:
        return True
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "type": secret_type,
                            "metadata": {"name": name, "namespace": namespace}, "data": data}
    if existing is None:
        try:
            kube.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=body)
        except ConflictError:
            return False
        except KubeError as exc:
            if exc.status != 403:
                raise
            # The renewal CronJob may update the two Secrets but create none (SECURITY.md).
            raise KubeError(exc.status, exc.reason,
                            f"secret {namespace}/{name} is missing and this job may not create it (only the install "
                            f"and upgrade hooks may): run `helm upgrade` on the release to issue it again "
                            f"({exc.message})") from exc
        return True
    body["type"] = existing.get("type") or secret_type  # a Secret's type is immutable
    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    kube.request("PUT", f"/api/v1/namespaces/{namespace}/secrets/{name}", body=body)
    return True


def inject_ca_bundle(kube: Kube, name: str, ca_pem: bytes) -> bool:
    """Set clientConfig.caBundle of every webhook in the configuration. True if it changed."""
    path = f"{WEBHOOK_CONFIG_PATH}/{name}"
    wanted = base64.b64encode(ca_pem).decode()
    for _ in range(5):
        config = kube.request("GET", path)
        webhooks = config.get("webhooks") or []
        if all((w.get("clientConfig") or {}).get("caBundle") == wanted for w in webhooks):
            return False
        for w in webhooks:
            w.setdefault("clientConfig", {})["caBundle"] = wanted
        try:
            kube.request(
                "PATCH",
                path,
                body={"metadata": {"resourceVersion": config["metadata"]["resourceVersion"]}, "webhooks": webhooks},
                content_type="application/merge-patch+json",
            )
        except ConflictError:
            continue
        log.info("mutatingwebhookconfiguration %s: caBundle updated", name)
        return True
    raise RuntimeError(f"mutatingwebhookconfiguration {name}: caBundle not written (kept changing)")
