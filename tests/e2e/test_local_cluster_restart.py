"""The local cluster's extender restart survives its old port being taken meanwhile (seen in CI:
an ephemeral port freed by the old extender was bound by another process before the restart)."""

import socket

from e2e.scenarios import wait_running
from hami_dcu.cli.localcluster.cluster import LocalCluster
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.protocol import keys


def test_restart_moves_the_extender_when_its_port_was_taken():
    with LocalCluster({"node0": default_cards("node0", 1)}, naming=keys.DCU_NAMING) as cluster:
        old_port = cluster.scheduler_port
        cluster.scheduler.stop()
        cluster.scheduler = None
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", old_port))
            squatter.listen()
            cluster.restart_scheduler()
            assert cluster.scheduler_port != old_port
            cluster.kube.create_pod(cluster.namespace, pod_manifest("after", [Ctr("c", 1, 1000, 10)]))
            assert wait_running(cluster, "after", timeout=30)["spec"]["nodeName"] == "node0"
