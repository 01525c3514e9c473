"""The local cluster writes the webhook's serving pair as a Secret volume would: key 0400,
and never the CA key."""

import os
import stat

from hami_dcu.cli.localcluster.cluster import LocalCluster
from hami_dcu.common.protocol import keys


def test_local_cluster_webhook_key_is_0400_and_ca_key_stays_in_the_secret():
    with LocalCluster({}, naming=keys.DCU_NAMING) as cluster:
        tls_dir = cluster.workdir / "webhook-tls"
        assert stat.S_IMODE(os.stat(tls_dir / "tls.key").st_mode) == 0o400
        assert sorted(p.name for p in tls_dir.iterdir()) == ["tls.crt", "tls.key"]
