"""The I/O kit every component shares: the Kubernetes client (`kube`), the node lock's
writes, the guarded HTTP servers, TLS, request bodies, the metrics server and metrics, logging,
the failure reporter, the flags, and the process's garbage-collector policy. It stands on
`hami_dcu.common.protocol` (never the other way round).
"""
