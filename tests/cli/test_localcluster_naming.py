"""The local cluster names the naming set its components speak: no default set."""

import pytest

from hami_dcu.cli.localcluster.cluster import LocalCluster


def test_the_local_cluster_names_its_naming_set_explicitly():
    """A forgotten argument must fail, never silently speak the dcu set."""
    with pytest.raises(TypeError, match="'naming'"):
        LocalCluster({})  # type: ignore[call-arg]
