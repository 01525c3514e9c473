"""A Secret mounted as files, kept up to date the way the kubelet does it.

In a cluster the kubelet rewrites a Secret volume's files some time after the Secret changes
(its sync period, about a minute); the servers reload the files (common/io/tls.py). The local
cluster has no kubelet for its own servers, so tests that rotate a Secret use this: `sync()`
copies the Secret's keys to files atomically (certs.write_pem_files), `start()` does so on
an interval from a thread, which is the kubelet's lag made short.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.webhook.certs import write_pem_files

log = logging.getLogger(__name__)


class SecretVolume:
    def __init__(self, kube: Kube, namespace: str, name: str, directory: str | Path,
                 keys: Sequence[str] = ("tls.crt", "tls.key")) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.directory = Path(directory)
        self.keys = tuple(keys)
        self._written: dict[str, bytes] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sync(self) -> bool:
        """Write the Secret's keys that changed; True when something was written."""
        try:
            secret = self.kube.request("GET", f"/api/v1/namespaces/{self.namespace}/secrets/{self.name}")
        except NotFoundError:
            return False
        data = secret.get("data") or {}
        wanted = {key: base64.b64decode(data[key]) for key in self.keys if key in data}
        changed = {key: value for key, value in wanted.items() if self._written.get(key) != value}
        if not changed:
            return False
        # One file after the other: unlike the kubelet's swap of the whole volume (its ..data
        # symlink), a reader can see the new certificate beside the old key, which the
        # servers' reload must survive (common/io/tls.py).
        write_pem_files(self.directory, wanted)
        self._written = wanted
        log.info("secret volume %s/%s: updated %s", self.namespace, self.name, ", ".join(sorted(changed)))
        return True

    def start(self, interval: float) -> SecretVolume:
        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sync()
                except KubeError as exc:
                    log.warning("secret volume %s/%s: sync failed: %s", self.namespace, self.name, exc)

        self._thread = threading.Thread(target=loop, name=f"secret-volume-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
