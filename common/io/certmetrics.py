"""`hami_dcu_certificate_expiry_timestamp_seconds`: when each serving certificate expires.

Read from the certificate file at every scrape, so the value follows a renewal the moment
the kubelet updates the mounted Secret (the servers reload the same files, common/io/tls.py).
An alert on `... - time() < 14 * 86400` catches a renewal that stopped working.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

EXPIRY_METRIC = "hami_dcu_certificate_expiry_timestamp_seconds"


def expiry_timestamp(pem: bytes) -> float:
    """notAfter of the first certificate in `pem`, as Unix seconds."""
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc.timestamp()


class CertificateExpiry(Collector):
    """One sample per certificate file: `certificate` names its role, `file` its path."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = dict(files)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(EXPIRY_METRIC, "When the certificate in use expires (Unix seconds, read from "
                                   "its file at scrape time)", labels=["certificate", "file"])
        for role, path in self.files.items():
            try:
                with open(path, "rb") as f:
                    family.add_metric([role, path], expiry_timestamp(f.read()))
            except (OSError, ValueError) as exc:
                # No sample rather than a wrong one: `absent()` in an alert catches it.
                log.warning("certificate %s (%s) unreadable for metrics: %s", role, path, exc)
        yield family
