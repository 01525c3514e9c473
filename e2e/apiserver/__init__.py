"""An in-process Kubernetes API server speaking the REST subset hami-dcu uses, on loopback.

`LocalApiServer` (server.py) serves `ApiApp` (app.py) over `Store` (store.py); selectors,
patches and fault injection each have their own module."""

from hami_dcu.e2e.apiserver.app import AdmissionDenied, AdmissionHook
from hami_dcu.e2e.apiserver.faults import Faults
from hami_dcu.e2e.apiserver.server import LocalApiServer
from hami_dcu.e2e.apiserver.store import Store, StoreError

__all__ = ["AdmissionDenied", "AdmissionHook", "Faults", "LocalApiServer", "Store", "StoreError"]
