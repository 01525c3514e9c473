"""Every annotation key, label, resource name and fixed wire string of the HAMi DCU protocol.

This is the one place a reader finds a key. The values are HAMi's, byte for byte
(docs/architecture.md, Wire formats), so our components run beside HAMi's.

Two naming sets exist (docs/architecture.md, Naming sets): `dcu` (HAMi v2.10) and `hcu` (HAMi master,
Hygon's own plugin v3). They differ in the resource names, the node registration and
handshake keys, the pod allocation keys, the type-selection keys and the device id prefix;
the node lock, the bind keys and the uuid selection keys are shared. Each component process
speaks one set, chosen once at start-up (`hami-dcu --naming dcu|hcu`, chart value `naming`,
looked up with `naming_by_name`) and handed to whatever reads or writes a key of it, as a
`Naming` value: nothing here changes after import, so no reader depends on when it ran.
Both sets stay available as `DCU_NAMING` and `HCU_NAMING` for what must see both (the
webhook's renaming, the start-up mismatch check, the one-writer rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# --- extended resources -------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceNames:
    """The three DCU resource names of a naming set (`Naming.resources`). Only `count` is a
    kubelet resource (the plugin advertises it); `memory` (MiB) and `cores` (% of one card)
    exist only in pod specs and are ignored by kube-scheduler through the extender's
    managedResources."""

    count: str
    memory: str
    cores: str

    def all(self) -> tuple[str, str, str]:
        return (self.count, self.memory, self.cores)


# --- device identity ----------------------------------------------------------------------

# The request type, the card id prefix and the card model prefix are the naming set's
# (`Naming.device_type`, `id_prefix`, `model_prefix`): "DCU", "DCU-<serial>", "DCU-K100_AI".
# Mode the DCU plugin writes in the 9-field node record; the 7-field legacy record means hami-core.
DEVICE_MODE = "hami"
LEGACY_DEVICE_MODE = "hami-core"
# Slots (vDCUs) per card the plugin advertises; HAMi's plugin hard-codes 4.
DEFAULT_SLOTS_PER_CARD = 4
# PCI vendor id of Hygon DCUs as sysfs shows it.
HYGON_PCI_VENDOR = "0x1d94"

# --- node annotations ---------------------------------------------------------------------

# The registration and handshake keys are the naming set's (`Naming.node_register`,
# `node_handshake`): "hami.io/node-dcu-register", "hami.io/node-handshake-dcu".
NODE_LOCK = "hami.io/mutex.lock"

HANDSHAKE_REPORTED = "Reported"
HANDSHAKE_REQUESTING = "Requesting"
HANDSHAKE_DELETED = "Deleted"

# --- pod annotations and labels written by the scheduler ----------------------------------

POD_NODE = "hami.io/vgpu-node"  # annotation, and a label of the same name
POD_TIME = "hami.io/vgpu-time"
# The device lists are the naming set's (`Naming.pod_devices_to_allocate`,
# `pod_devices_allocated`): "hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated".
POD_BIND_PHASE = "hami.io/bind-phase"
POD_BIND_TIME = "hami.io/bind-time"

BIND_PHASE_ALLOCATING = "allocating"
BIND_PHASE_SUCCESS = "success"
BIND_PHASE_FAILED = "failed"

# Annotations only hami-scheduler may write: SCHEDULER_OWNED_POD_ANNOTATIONS, with the naming
# sets below. A pod that carries any of them at CREATE is forging allocation state
# (HAMi let such pods through, Project-HAMi/HAMi#3042), so the webhook refuses it.

# --- pod annotations written by users -----------------------------------------------------

# The type selection keys are the naming set's (`Naming.use_type`, `nouse_type`):
# "hygon.com/use-dcutype", "hygon.com/nouse-dcutype". The uuid selection keys are shared.
USE_DCU_UUID = "hygon.com/use-gpuuuid"
NOUSE_DCU_UUID = "hygon.com/nouse-gpuuuid"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
DEVICE_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"
# NVIDIA's key, but HAMi's scheduler reads it on every pod as NumaBind (NUMA first in the
# card order), so a DCU pod carrying it is ordered that way under HAMi too.
NUMA_BIND = "nvidia.com/numa-bind"

# --- naming sets --------------------------------------------------------------------------


@dataclass(frozen=True)
class Naming:
    """Everything that differs between the `dcu` and `hcu` naming sets."""

    name: str  # "dcu" or "hcu"
    resources: ResourceNames
    node_register: str
    node_handshake: str
    pod_devices_to_allocate: str
    pod_devices_allocated: str
    use_type: str
    nouse_type: str
    device_type: str  # request type in the pod device list, and the vendor key in HAMi
    id_prefix: str  # card ids are <prefix><serial>
    model_prefix: str  # card models are <prefix><model>

    @property
    def pod_allocation_keys(self) -> frozenset[str]:
        return frozenset({self.pod_devices_to_allocate, self.pod_devices_allocated})

    @property
    def node_keys(self) -> frozenset[str]:
        return frozenset({self.node_register, self.node_handshake})


def _naming(word: str) -> Naming:
    upper = word.upper()
    return Naming(
        name=word,
        resources=ResourceNames(f"hygon.com/{word}num", f"hygon.com/{word}mem", f"hygon.com/{word}cores"),
        node_register=f"hami.io/node-{word}-register",
        node_handshake=f"hami.io/node-handshake-{word}",
        pod_devices_to_allocate=f"hami.io/{word}-devices-to-allocate",
        pod_devices_allocated=f"hami.io/{word}-devices-allocated",
        use_type=f"hygon.com/use-{word}type",
        nouse_type=f"hygon.com/nouse-{word}type",
        device_type=upper,
        id_prefix=f"{upper}-",
        model_prefix=f"{upper}-",
    )


DCU_NAMING = _naming("dcu")  # HAMi v2.10.0, and what a component speaks unless told otherwise
HCU_NAMING = _naming("hcu")  # HAMi master (PR #2969), Hygon's k8s-hcu-device-plugin v3
NAMINGS: Mapping[str, Naming] = MappingProxyType({n.name: n for n in (DCU_NAMING, HCU_NAMING)})


def naming_by_name(name: str) -> Naming:
    """The naming set called `name` ("dcu" or "hcu"), e.g. the value of `--naming`."""
    try:
        return NAMINGS[name]
    except KeyError:
        raise ValueError(f"unknown naming set {name!r}: expected one of {', '.join(sorted(NAMINGS))}") from None


def other_naming(naming: Naming) -> Naming:
    """The set a component speaking `naming` does not speak (there are exactly two)."""
    return HCU_NAMING if naming.name == DCU_NAMING.name else DCU_NAMING


# Annotations only hami-dcu may write, in both naming sets: a tenant must not forge an
# allocation for a HAMi component of the other set either (common/protocol/writers.py).
SCHEDULER_OWNED_POD_ANNOTATIONS: frozenset[str] = frozenset(
    {POD_NODE, POD_TIME, POD_BIND_PHASE, POD_BIND_TIME}
    | DCU_NAMING.pod_allocation_keys | HCU_NAMING.pod_allocation_keys
)

# The card selection lists a pod author writes, in both naming sets (the webhook bounds them
# before renaming, as written: common/protocol/preferences.py).
CARD_SELECTION_KEYS: tuple[str, ...] = (
    DCU_NAMING.use_type, DCU_NAMING.nouse_type, HCU_NAMING.use_type, HCU_NAMING.nouse_type,
    USE_DCU_UUID, NOUSE_DCU_UUID,
)

# --- namespace DCU quota ------------------------------------------------------------------

# Set by the webhook on a pod (Volcano mode) or a ResourceClaim (DRA mode) it admits against a
# namespace DCU quota: the review's uid, which names the reservation the webhook keeps until its
# watch or its list of claims shows the object stored (webhook/quotacheck.py, webhook/draclaims.py).
QUOTA_RESERVATION = "hami.io/quota-reservation"

# --- webhook opt-out ----------------------------------------------------------------------

WEBHOOK_LABEL = "hami.io/webhook"
WEBHOOK_IGNORE = "ignore"

# --- names shared by the components -------------------------------------------------------

DEFAULT_SCHEDULER_NAME = "hami-scheduler"
KUBE_DEFAULT_SCHEDULER = "default-scheduler"
