"""An in-process Kubernetes API server speaking the REST subset hami-dcu uses, on loopback.

`LocalApiServer` (server.py) serves `ApiApp` (app.py) over `Store` (store.py). Selectors,
patches, per-resource strategies, fault injection and the admission hook point each have
their own module.
"""

from hami_dcu.cli.localcluster.apiserver.faults import Faults
from hami_dcu.cli.localcluster.apiserver.hooks import AdmissionAttributes, AdmissionDenied, AdmissionHook
from hami_dcu.cli.localcluster.apiserver.patching import JSON_PATCH, MERGE, STRATEGIC
from hami_dcu.cli.localcluster.apiserver.server import LocalApiServer
from hami_dcu.cli.localcluster.apiserver.store import Change, Store, StoreError

__all__ = ["JSON_PATCH", "MERGE", "STRATEGIC", "AdmissionAttributes", "AdmissionDenied", "AdmissionHook", "Change",
           "Faults", "LocalApiServer", "Store", "StoreError"]
