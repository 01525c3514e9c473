"""The two pod-latency histograms that more than one component serves, defined once so the
name, labels and buckets agree wherever a dashboard reads them:

* `hami_dcu_pod_create_to_bound_seconds{mode}`: the extender at a successful /bind
  (devicePlugin), the DRA driver from the pod's PodScheduled condition (dra);
* `hami_dcu_pod_bound_to_allocated_seconds{node,mode}`: the device plugin when Allocate
  answers for a pod's last container (devicePlugin), the DRA driver when it has prepared a
  pod's claim (dra).

Their starting points are whole-second timestamps (common/protocol/podtimes.py), so a figure is late
by up to a second: no bucket below half a second would say anything.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

# A pod's wait to be placed: a second or two when a node has room, minutes to an hour when
# it waits for capacity or for victims to leave.
CREATE_TO_BOUND_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
# A bound pod's wait for its cards: the kubelet admits it within about a second, longer when
# it is busy or the plugin restarts; past 300 s hami-scheduler's node lock has expired.
BOUND_TO_ALLOCATED_BUCKETS = (0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300)

DEVICE_PLUGIN, DRA = "devicePlugin", "dra"  # the `mode` label's values, as the chart's `mode`


def create_to_bound(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "hami_dcu_pod_create_to_bound_seconds",
        "From the pod's creationTimestamp to its bind (whole-second timestamps: up to 1 s late)",
        ["mode"], buckets=CREATE_TO_BOUND_BUCKETS, registry=registry,
    )


def bound_to_allocated(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "hami_dcu_pod_bound_to_allocated_seconds",
        "From the pod's bind to its DCUs handed out (Allocate or NodePrepareResources answered)",
        ["node", "mode"], buckets=BOUND_TO_ALLOCATED_BUCKETS, registry=registry,
    )
