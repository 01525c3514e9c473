"""The local cluster `hami-dcu demo` runs: every hami-dcu component on this machine, with mock
DCUs, meeting only over the real protocols.

`LocalCluster` (cluster.py) starts an in-process API server (apiserver/) with admission
through the registered webhook (admission.py), the scheduler extender driven by a
kube-scheduler stand-in (scheduler_loop.py), and per node a kubelet stand-in (kubelet.py)
that drives the device plugin over gRPC. pods.py holds the mock cards and pod shapes; each
component serves from its own thread (servers.py).
"""
