"""A peer's CustomResourceDefinitions, as its release ships them, created on the real control
plane and waited for until they serve (Volcano's and Kueue's)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from e2e.realcluster.processes import wait_for
from hami_dcu.common.io.kube import ConflictError, Kube

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def install(kube: Kube, files: Iterable[Path], what: str) -> None:
    """Create each CRD (one already there is kept: a cluster kept between runs) and wait until
    every one is Established."""
    names = []
    for path in files:
        crd = yaml.safe_load(path.read_text())
        try:
            kube.request("POST", CRD_PATH, body=crd)
        except ConflictError:
            pass
        names.append(crd["metadata"]["name"])

    def established() -> bool:
        for name in names:
            conditions = (kube.request("GET", f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                return False
        return True

    wait_for(f"{what} CRDs established", established, 60)
