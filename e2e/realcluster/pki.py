"""Certificates and keys for a throw-away control plane: one CA, the apiserver's serving
certificate, client certificates per identity (admin, controller-manager, scheduler, each
node), and the service-account signing key pair.

Identities follow Kubernetes' conventions: the client certificate's CN is the user name and
its O fields the groups (`system:masters` for the admin, `system:node:<name>` in
`system:nodes` for a kubelet), so RBAC and the Node authorizer judge each process as they
would in a cluster.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class Pki:
    """A CA in `directory` and the certificates it signs (written next to it)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        name = _name("hami-dcu-e2e-ca")
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = self.dir / "ca.crt"
        self.ca.write_bytes(self._ca_cert.public_bytes(serialization.Encoding.PEM))
        self.service_account = self._service_account_keys()

    @property
    def ca_pem(self) -> bytes:
        return self.ca.read_bytes()

    def _service_account_keys(self) -> KeyPair:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private, public = self.dir / "sa.key", self.dir / "sa.pub"
        _write_key(private, key)
        public.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return KeyPair(cert=public, key=private)

    def _issue(self, stem: str, subject: x509.Name, usage: x509.ObjectIdentifier,
               sans: list[x509.GeneralName] | None = None) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        pair = KeyPair(cert=self.dir / f"{stem}.crt", key=self.dir / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair

    def server(self, stem: str, dns: list[str], ips: list[str]) -> KeyPair:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        return self._issue(stem, _name(dns[0] if dns else ips[0]), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def client(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        return self._issue(stem, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)


def kubeconfig(server: str, ca: Path, *, client: KeyPair | None = None, token: str | None = None) -> str:
    """A one-context kubeconfig (YAML is a superset of JSON, so JSON it is)."""
    user: dict[str, str] = {}
    if client is not None:
        user = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    if token is not None:
        user = {"token": token}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": "e2e", "user": user}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
            "current-context": "e2e",
        },
        indent=2,
    )
