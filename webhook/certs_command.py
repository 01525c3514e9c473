"""`hami-dcu certs`: create or renew the webhook certificate and inject its CA."""

from __future__ import annotations

import argparse

from hami_dcu.common.io.kube import Kube, user_agent
from hami_dcu.webhook.certs import ca_secret_name, ensure


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", required=True, help="namespace of the webhook Service and the Secret")
    parser.add_argument("--service", required=True, help="webhook Service name (the certificate is for S.NS.svc)")
    parser.add_argument("--secret", required=True,
                        help="Secret that holds tls.crt, tls.key, ca.crt (the webhook mounts it)")
    parser.add_argument("--ca-secret", default=None,
                        help="Secret that holds the CA's ca.crt and ca.key, read by this job only and mounted "
                             "nowhere (default: <secret>-ca)")
    parser.add_argument("--webhook-config", default=None,
                        help="MutatingWebhookConfiguration whose caBundle is set (omit to only write the Secret)")


def run(args: argparse.Namespace) -> int:
    """What goes wrong (a kubeconfig, the API server) is raised: the CLI says it on one line
    with its exit code (cli/errors.py), as the README promises."""
    kube = Kube.from_kubeconfig(args.kubeconfig, agent=user_agent("certs"))
    _, action = ensure(kube, args.namespace, args.service, args.secret, args.webhook_config,
                       ca_secret=args.ca_secret or ca_secret_name(args.secret))
    print(f"secret {args.namespace}/{args.secret}: certificate {action}")
    return 0
