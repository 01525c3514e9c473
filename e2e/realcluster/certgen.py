"""What HAMi's chart runs as its certificate hooks, for the real-cluster suite: the two commands
of kube-webhook-certgen that `charts/hami/templates/scheduler/job-patch` calls, as that tool
does them (its image cannot be pulled here).

    certgen.py create --host=a,b --namespace=ns --secret-name=s [--cert-name=tls.crt --key-name=tls.key]
    certgen.py patch --webhook-name=w --namespace=ns --secret-name=s [--patch-validating=false]

`create` makes a CA and a serving certificate for the hosts and stores them in the Secret
(keys `ca`, and the certificate and key names), unless the Secret exists already; `patch` sets
that CA as the caBundle of every webhook of the MutatingWebhookConfiguration. Run inside a pod
by the kubelet stand-in, with the pod's ServiceAccount token (in-cluster configuration).
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hami_dcu.common.io.kube import Kube, NotFoundError


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _issue(hosts: list[str]) -> dict[str, bytes]:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nil1")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "nil2")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return {"ca": _pem(ca), "cert": _pem(cert), "key": key_pem}


def _client() -> Kube:
    """In-cluster configuration: the pod's ServiceAccount token, as the real tool uses."""
    return Kube.from_kubeconfig(None)


def create(kube: Kube, args: argparse.Namespace) -> None:
    path = f"/api/v1/namespaces/{args.namespace}/secrets"
    try:
        kube.request("GET", f"{path}/{args.secret_name}")
        print(f"secret {args.namespace}/{args.secret_name} already exists")
        return
    except NotFoundError:
        pass
    issued = _issue([h for h in args.host.split(",") if h])
    data = {"ca": issued["ca"], args.cert_name: issued["cert"], args.key_name: issued["key"]}
    kube.request("POST", path, body={"apiVersion": "v1", "kind": "Secret",
                                     "metadata": {"name": args.secret_name},
                                     "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
    print(f"created secret {args.namespace}/{args.secret_name}")


def patch(kube: Kube, args: argparse.Namespace) -> None:
    secret = kube.request("GET", f"/api/v1/namespaces/{args.namespace}/secrets/{args.secret_name}")
    ca = secret["data"]["ca"]
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{args.webhook_name}"
    config = kube.request("GET", path)
    for webhook in config.get("webhooks") or []:
        webhook.setdefault("clientConfig", {})["caBundle"] = ca
    kube.request("PUT", path, body=config)
    print(f"patched the caBundle of {args.webhook_name}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kube-webhook-certgen")
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("create")
    c.add_argument("--host", required=True)
    c.add_argument("--namespace", required=True)
    c.add_argument("--secret-name", required=True)
    c.add_argument("--cert-name", default="cert")
    c.add_argument("--key-name", default="key")
    p = commands.add_parser("patch")
    p.add_argument("--webhook-name", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--secret-name", required=True)
    p.add_argument("--patch-validating", default="true")
    p.add_argument("--patch-mutating", default="true")
    p.add_argument("--patch-failure-policy", default="")
    args = parser.parse_args(argv)
    kube = _client()
    create(kube, args) if args.command == "create" else patch(kube, args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
