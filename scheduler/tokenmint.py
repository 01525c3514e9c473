"""The extender's ServiceAccount token, minted beside it in the scheduler pod.

A pod's projected token is always its own ServiceAccount's, and one pod holds both the bundled
kube-scheduler and the extender, which must not share an identity (the extender faces the
network; kube-scheduler holds system:kube-scheduler). The pod's ServiceAccount is therefore
kube-scheduler's, on a projected, expiring token the kubelet keeps fresh; a small container
holding that token asks the TokenRequest API for an expiring token of the extender's
ServiceAccount (kube-scheduler's Role allows exactly that one) and writes it, with the cluster CA
and the namespace, where the extender reads its in-cluster credentials. The extender's client
reads the token file again every minute, so a renewal reaches it without a restart.

Decisions here (when to renew, what to write) are pure; `mint` is the one API call.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hami_dcu.common.io.kube import Kube

# The kubelet renews projected tokens at 80 % of their life: so do we.
RENEW_AT = 0.8
MIN_EXPIRATION_SECONDS = 600  # the TokenRequest API's own minimum
MAX_RETRY_SECONDS = 30.0
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Minted:
    token: str
    issued: dt.datetime
    expires: dt.datetime


def renew_in(minted: Minted, now: dt.datetime) -> float:
    """Seconds until the token should be replaced: at 80 % of its life, at once if that passed."""
    due = minted.issued + (minted.expires - minted.issued) * RENEW_AT
    return max(0.0, (due - now).total_seconds())


def retry_in(minted: Minted | None, now: dt.datetime) -> float:
    """After a failed renewal: soon, and sooner than the current token expires."""
    if minted is None:
        return 2.0
    left = (minted.expires - now).total_seconds()
    return max(1.0, min(MAX_RETRY_SECONDS, left / 10))


def token_request(expiration_seconds: int) -> dict[str, Any]:
    if expiration_seconds < MIN_EXPIRATION_SECONDS:
        raise ValueError(f"--expiration-seconds {expiration_seconds}: at least {MIN_EXPIRATION_SECONDS} "
                         f"(the API server's minimum)")
    # No audiences: the API server's own, as for a projected token. No bound object: the API
    # server binds a token to a pod only for the pod's own ServiceAccount, which is not this one.
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds}}


def minted_from(review: dict[str, Any], now: dt.datetime) -> Minted:
    status = review.get("status") if isinstance(review, dict) else None
    token = status.get("token") if isinstance(status, dict) else None
    expires = status.get("expirationTimestamp") if isinstance(status, dict) else None
    if not isinstance(token, str) or not token or not isinstance(expires, str):
        raise ValueError("the TokenRequest answer holds no token or no expirationTimestamp")
    return Minted(token, now, dt.datetime.fromisoformat(expires.replace("Z", "+00:00")))


def mint(kube: Kube, namespace: str, service_account: str, expiration_seconds: int,
         now: dt.datetime | None = None) -> Minted:
    review = kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                          body=token_request(expiration_seconds))
    return minted_from(review, now or dt.datetime.now(dt.UTC))


def credential_files(minted: Minted, ca_cert: bytes, namespace: str) -> dict[str, bytes]:
    """What the extender's in-cluster configuration reads, as a projected volume holds it."""
    return {"token": minted.token.encode(), "ca.crt": ca_cert, "namespace": namespace.encode()}


def write_files(directory: Path, files: dict[str, bytes]) -> None:
    """Each file replaced at once (a reader sees the old token or the new, never half of one),
    readable by this user only (the extender runs as the same user)."""
    for name, data in files.items():
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.chmod(temporary, 0o400)
            os.replace(temporary, directory / name)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
