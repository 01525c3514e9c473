"""`hami-dcu token`: keep the extender's ServiceAccount token fresh in a directory
(scheduler/tokenmint.py says why)."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import threading
from pathlib import Path

from hami_dcu.common.kube import Kube, KubeConfigError, KubeError, user_agent
from hami_dcu.scheduler.tokenmint import (
    SA_DIR,
    Minted,
    credential_files,
    mint,
    renew_in,
    retry_in,
    token_request,
    write_files,
)

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service-account", required=True, help="the ServiceAccount whose token is written")
    parser.add_argument("--namespace", default=None,
                        help=f"its namespace (default: this pod's, from {SA_DIR}/namespace)")
    parser.add_argument("--dir", required=True, type=Path,
                        help="where token, ca.crt and namespace are written (the other container's "
                             f"{SA_DIR})")
    parser.add_argument("--expiration-seconds", type=int, default=3600,
                        help="lifetime of each token; it is renewed at 80 %% of it")
    parser.add_argument("--once", action="store_true",
                        help="write one token and exit (an init container: the extender starts with one)")


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    stop = stop or threading.Event()
    pod = os.environ.get("HOSTNAME", "?")
    try:
        token_request(args.expiration_seconds)
    except ValueError as exc:
        log.error("token: %s", exc)
        return 2
    try:
        namespace = args.namespace or (SA_DIR / "namespace").read_text().strip()
        ca_cert = (SA_DIR / "ca.crt").read_bytes()
        kube = Kube.from_kubeconfig(args.kubeconfig, agent=user_agent("token"))
    except (OSError, KubeConfigError) as exc:
        log.error("token: pod %s: %s", pod, exc)
        return 1
    minted: Minted | None = None
    while not stop.is_set():
        now = dt.datetime.now(dt.UTC)
        try:
            minted = mint(kube, namespace, args.service_account, args.expiration_seconds, now)
            write_files(args.dir, credential_files(minted, ca_cert, namespace))
        except (KubeError, OSError, ValueError) as exc:
            if args.once:
                log.error("token: pod %s: no token for %s/%s: %s", pod, namespace, args.service_account, exc)
                return 1
            wait = retry_in(minted, now)
            log.warning("token: pod %s: renewing the token of %s/%s failed (%s); again in %.0f s", pod, namespace,
                        args.service_account, exc, wait)
            stop.wait(wait)
            continue
        log.info("token: pod %s: token of %s/%s written to %s, valid until %s", pod, namespace,
                 args.service_account, args.dir, f"{minted.expires:%Y-%m-%dT%H:%M:%SZ}")
        if args.once:
            return 0
        stop.wait(renew_in(minted, dt.datetime.now(dt.UTC)))
    return 0
