"""`hami-dcu token`: keep the extender's ServiceAccount token fresh in a directory
(scheduler/tokenmint.py says why)."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import threading
from pathlib import Path

from hami_dcu.common.io.cannotstart import CannotStart
from hami_dcu.common.io.kube import Kube, KubeError, user_agent
from hami_dcu.common.protocol.errors import CliError
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
    """Mint and write until stopped (or once). What keeps it from starting is one line and
    exit 2, a failed `--once` one line and exit 1 (cli/errors.py); a failed renewal while
    running is a warning and a retry."""
    stop = stop or threading.Event()
    pod = os.environ.get("HOSTNAME", "")
    where = f"pod {pod}: " if pod else ""
    try:
        token_request(args.expiration_seconds)
    except ValueError as exc:
        raise CannotStart(str(exc)) from None
    namespace = args.namespace or _own_file("namespace", ", or give --namespace").decode().strip()
    ca_cert = _own_file("ca.crt", " (the extender is given the cluster CA beside its token)")
    kube = Kube.from_kubeconfig(args.kubeconfig, agent=user_agent("token"))
    minted: Minted | None = None
    while not stop.is_set():
        now = dt.datetime.now(dt.UTC)
        try:
            minted = mint(kube, namespace, args.service_account, args.expiration_seconds, now)
            write_files(args.dir, credential_files(minted, ca_cert, namespace))
        except (KubeError, OSError, ValueError) as exc:
            if args.once:
                raise CliError(f"no token for {namespace}/{args.service_account}: {_said(exc)}") from exc
            wait = retry_in(minted, now)
            log.warning("token: %srenewing the token of %s/%s failed (%s); again in %.0f s", where, namespace,
                        args.service_account, _said(exc), wait)
            stop.wait(wait)
            continue
        log.info("token: %stoken of %s/%s written to %s, valid until %s", where, namespace,
                 args.service_account, args.dir, f"{minted.expires:%Y-%m-%dT%H:%M:%SZ}")
        if args.once:
            return 0
        stop.wait(renew_in(minted, dt.datetime.now(dt.UTC)))
    return 0


def _own_file(name: str, remedy: str) -> bytes:
    """A file of this pod's own ServiceAccount, which the kubelet mounts in SA_DIR; outside a
    pod there is none, which is what the line says."""
    if not SA_DIR.is_dir():
        raise CannotStart(f"no ServiceAccount token at {SA_DIR}: run it inside the scheduler pod, where the "
                          "kubelet mounts the pod's token, CA and namespace there")
    path = SA_DIR / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CannotStart(f"no ServiceAccount {name} at {path}: run it inside the scheduler pod{remedy}") from None
    except OSError as exc:
        raise CannotStart(f"{path}: {exc.strerror or exc}") from None


def _said(exc: Exception) -> str:
    """An OSError as `<file>: <reason>`, not Python's `[Errno 13] Permission denied: '<file>'`."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)
