"""Every annotation key, label, resource name and fixed wire string of the HAMi DCU protocol.

This is the one place a reader finds a key. The values are HAMi's, byte for byte
(reference: hami-wire-protocol.md §1-§2), so our components run beside HAMi's.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- extended resources -------------------------------------------------------------------

DEFAULT_COUNT_RESOURCE = "hygon.com/dcunum"
DEFAULT_MEMORY_RESOURCE = "hygon.com/dcumem"
DEFAULT_CORES_RESOURCE = "hygon.com/dcucores"


@dataclass(frozen=True)
class ResourceNames:
    """The three DCU resource names. Only `count` is a kubelet resource (the plugin advertises
    it); `memory` (MiB) and `cores` (% of one card) exist only in pod specs and are ignored by
    kube-scheduler through the extender's managedResources."""

    count: str = DEFAULT_COUNT_RESOURCE
    memory: str = DEFAULT_MEMORY_RESOURCE
    cores: str = DEFAULT_CORES_RESOURCE

    def all(self) -> tuple[str, str, str]:
        return (self.count, self.memory, self.cores)


DEFAULT_RESOURCES = ResourceNames()

# --- device identity ----------------------------------------------------------------------

# Request type written in the pod device list, and the key HAMi files DCU devices under.
DEVICE_TYPE = "DCU"
# Card ids are "DCU-<serial>"; card models are "DCU-<model>", e.g. "DCU-K100_AI".
DEVICE_ID_PREFIX = "DCU-"
DEVICE_MODEL_PREFIX = "DCU-"
# Mode the DCU plugin writes in the 9-field node record; the 7-field legacy record means hami-core.
DEVICE_MODE = "hami"
LEGACY_DEVICE_MODE = "hami-core"
# Slots (vDCUs) per card the plugin advertises; HAMi's plugin hard-codes 4.
DEFAULT_SLOTS_PER_CARD = 4
# PCI vendor id of Hygon DCUs as sysfs shows it.
HYGON_PCI_VENDOR = "0x1d94"

# --- node annotations ---------------------------------------------------------------------

NODE_REGISTER = "hami.io/node-dcu-register"
NODE_HANDSHAKE = "hami.io/node-handshake-dcu"
NODE_LOCK = "hami.io/mutex.lock"

HANDSHAKE_REPORTED = "Reported"
HANDSHAKE_REQUESTING = "Requesting"
HANDSHAKE_DELETED = "Deleted"

# --- pod annotations and labels written by the scheduler ----------------------------------

POD_NODE = "hami.io/vgpu-node"  # annotation, and a label of the same name
POD_TIME = "hami.io/vgpu-time"
POD_DEVICES_TO_ALLOCATE = "hami.io/dcu-devices-to-allocate"
POD_DEVICES_ALLOCATED = "hami.io/dcu-devices-allocated"
POD_BIND_PHASE = "hami.io/bind-phase"
POD_BIND_TIME = "hami.io/bind-time"

BIND_PHASE_ALLOCATING = "allocating"
BIND_PHASE_SUCCESS = "success"
BIND_PHASE_FAILED = "failed"

# Annotations only hami-scheduler may write. A pod that carries any of them at CREATE is
# forging allocation state (user-pain-points row 19), so the webhook refuses it.
SCHEDULER_OWNED_POD_ANNOTATIONS: frozenset[str] = frozenset(
    {
        POD_DEVICES_TO_ALLOCATE,
        POD_DEVICES_ALLOCATED,
        POD_NODE,
        POD_TIME,
        POD_BIND_PHASE,
        POD_BIND_TIME,
    }
)

# --- pod annotations written by users -----------------------------------------------------

USE_DCU_TYPE = "hygon.com/use-dcutype"
NOUSE_DCU_TYPE = "hygon.com/nouse-dcutype"
USE_DCU_UUID = "hygon.com/use-gpuuuid"
NOUSE_DCU_UUID = "hygon.com/nouse-gpuuuid"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
DEVICE_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"

# --- webhook opt-out ----------------------------------------------------------------------

WEBHOOK_LABEL = "hami.io/webhook"
WEBHOOK_IGNORE = "ignore"

# --- names shared by the components -------------------------------------------------------

DEFAULT_SCHEDULER_NAME = "hami-scheduler"
KUBE_DEFAULT_SCHEDULER = "default-scheduler"
