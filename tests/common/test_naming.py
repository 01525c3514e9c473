"""The two naming sets (docs/architecture.md, Naming sets) and the one switch between them."""

from collections.abc import Iterator

import pytest

from hami_dcu.common import keys, writers
from hami_dcu.common.codec import decode_node_devices
from hami_dcu.common.requests import DcuRequest, parse_container_request


@pytest.fixture
def hcu() -> Iterator[keys.Naming]:
    yield keys.select_naming("hcu")
    keys.select_naming("dcu")


def test_the_table_of_the_reference():
    dcu, hcu = keys.DCU_NAMING, keys.HCU_NAMING
    assert dcu.resources.all() == ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores")
    assert hcu.resources.all() == ("hygon.com/hcunum", "hygon.com/hcumem", "hygon.com/hcucores")
    assert (dcu.node_register, dcu.node_handshake) == ("hami.io/node-dcu-register", "hami.io/node-handshake-dcu")
    assert (hcu.node_register, hcu.node_handshake) == ("hami.io/node-hcu-register", "hami.io/node-handshake-hcu")
    assert (hcu.pod_devices_to_allocate, hcu.pod_devices_allocated) == (
        "hami.io/hcu-devices-to-allocate", "hami.io/hcu-devices-allocated")
    assert (hcu.use_type, hcu.nouse_type) == ("hygon.com/use-hcutype", "hygon.com/nouse-hcutype")
    assert (dcu.id_prefix, hcu.id_prefix, hcu.device_type) == ("DCU-", "HCU-", "HCU")


def test_selecting_a_set_switches_every_key_and_name(hcu):
    assert keys.active_naming() is keys.HCU_NAMING and keys.other_naming() is keys.DCU_NAMING
    assert (keys.NODE_REGISTER, keys.NODE_HANDSHAKE) == ("hami.io/node-hcu-register", "hami.io/node-handshake-hcu")
    assert (keys.POD_DEVICES_TO_ALLOCATE, keys.POD_DEVICES_ALLOCATED) == (
        "hami.io/hcu-devices-to-allocate", "hami.io/hcu-devices-allocated")
    assert (keys.USE_DCU_TYPE, keys.NOUSE_DCU_TYPE) == ("hygon.com/use-hcutype", "hygon.com/nouse-hcutype")
    assert (keys.DEVICE_TYPE, keys.DEVICE_ID_PREFIX, keys.DEVICE_MODEL_PREFIX) == ("HCU", "HCU-", "HCU-")
    assert keys.DEFAULT_RESOURCES.all() == hcu.resources.all()
    assert keys.DEFAULT_COUNT_RESOURCE == "hygon.com/hcunum"
    # Shared by both sets.
    assert (keys.NODE_LOCK, keys.USE_DCU_UUID) == ("hami.io/mutex.lock", "hygon.com/use-gpuuuid")
    # Readers that take no names use the set of the process.
    hcu_pod = {"name": "c", "resources": {"limits": {"hygon.com/hcunum": "1", "hygon.com/hcumem": "2k"}}}
    assert parse_container_request(hcu_pod) == DcuRequest(1, 2000, 100)
    dcu_pod = {"name": "c", "resources": {"limits": {"hygon.com/dcunum": "1"}}}
    assert parse_container_request(dcu_pod) is None


def test_restoring_the_default_set(hcu):
    keys.select_naming("dcu")
    assert keys.NODE_REGISTER == "hami.io/node-dcu-register" and keys.DEFAULT_COUNT_RESOURCE == "hygon.com/dcunum"


def test_an_unknown_set_is_refused_and_changes_nothing():
    with pytest.raises(ValueError, match="unknown naming set 'xcu'"):
        keys.select_naming("xcu")
    assert keys.active_naming() is keys.DCU_NAMING and keys.NODE_REGISTER == "hami.io/node-dcu-register"


def test_both_sets_allocation_state_is_hami_dcus_to_write():
    for naming in (keys.DCU_NAMING, keys.HCU_NAMING):
        assert naming.pod_allocation_keys <= keys.SCHEDULER_OWNED_POD_ANNOTATIONS == writers.POD_KEYS
        assert naming.node_keys <= writers.NODE_KEYS
        assert naming.pod_devices_to_allocate in writers.PLUGIN_POD_KEYS


def test_hygon_v3s_registration_decodes():
    """Hygon's k8s-hcu-device-plugin v3 (strategy=hami): nine fields, mode `hami`, HCU- ids and
    models, the NUMA node dcgm reports (-1 when the platform has none)."""
    value = ("HCU-TPXS320016070601,4,65520,100,HCU-K100_AI,1,true,0,hami:"
             "HCU-TPXS320010040501,4,65520,100,HCU-K100_AI,-1,false,1,hami:")
    first, second = decode_node_devices(value, keys.HCU_NAMING.node_register)
    assert (first.id, first.type, first.numa, first.health, first.index, first.mode) == (
        "HCU-TPXS320016070601", "HCU-K100_AI", 1, True, 0, "hami")
    assert (second.numa, second.health, second.index) == (-1, False, 1)
