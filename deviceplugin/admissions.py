"""Asks the kubelet which pod it is admitting, when several await an Allocate on this node and
no node lock names one (Volcano mode, a gang placed together: docs/architecture.md, Which pod
an Allocate serves without the lock). The I/O only: the kubelet's pod resources `List`, asked
during the call, and this node's pods from the API server; admitting.py decides from them.

`chooser(count)` is what lockless.py's `identify` and core.py's `advice_target` call with the
awaiting pods: it returns the one the kubelet's answer names, or raises AdmittingRefused (a
`List` that cannot be had is refused too, as ambiguous: without it no pod is proven).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from hami_dcu.common.protocol.objects import JSON
from hami_dcu.deviceplugin.admitting import AdmittingRefused, admitting_pod, listings
from hami_dcu.node.api.podresources.v1 import api_pb2
from hami_dcu.node.podresources import PodResourcesError

log = logging.getLogger(__name__)

Answer = Callable[[], api_pb2.ListPodResourcesResponse]


class KubeletAdmissions:
    def __init__(self, answer: Answer, node_pods: Callable[[], list[JSON]], node: str, resource: str) -> None:
        self.answer = answer  # the kubelet's List, as it came (node/podresources.py, `answer`)
        self.node_pods = node_pods  # every pod bound to this node, any phase (KubeError propagates)
        self.node = node
        self.resource = resource

    def chooser(self, count: int) -> Callable[[list[JSON]], JSON]:
        """Names the pod of `awaiting` the kubelet admits for a container asking `count`."""
        def choose(awaiting: list[JSON]) -> JSON:
            return self.admitting(awaiting, count)
        return choose

    def admitting(self, awaiting: list[JSON], count: int) -> JSON:
        # The List first, then the pods: the API read is then at least as new as what the
        # kubelet shows (a pod the kubelet admits was bound before it took it up).
        try:
            response = self.answer()
        except PodResourcesError as exc:
            raise AdmittingRefused(f"the kubelet's pod resources API, which names the pod being admitted, did not "
                                   f"answer on node {self.node} ({exc})", ambiguous=True) from exc
        bound = self.node_pods()
        pod = admitting_pod(awaiting, bound, listings(response, self.resource), self.resource, count)
        meta = pod.get("metadata") or {}
        log.info("node %s: the kubelet's pod resources List names %s/%s as the pod being admitted (of %d awaiting a "
                 "%s allocation)", self.node, meta.get("namespace"), meta.get("name"), len(awaiting), self.resource)
        return pod
