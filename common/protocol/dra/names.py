"""Every name DRA mode puts on the wire, defined once: the driver and DeviceClass, device,
attribute and capacity names (Hygon's `dra.hygon.com` driver shape, so a
ResourceClaim written for either driver works with the other), the CDI kind, the sockets.
"""

from __future__ import annotations

DRIVER = "dra.hygon.com"
DEVICE_CLASS = DRIVER  # Hygon names its DeviceClass after the driver
DEVICE_TYPE = "hcu"  # the `type` attribute Hygon's DeviceClass and example claims select on

# Attributes: Hygon's five, then ours (model, serial, PCI bus id, NUMA node) for selectors.
ATTR_TYPE = "type"
ATTR_UUID = "uuid"
ATTR_PRODUCT_NAME = "productName"
ATTR_ARCHITECTURE = "architecture"
ATTR_BRAND = "brand"
ATTR_MODEL = "model"
ATTR_SERIAL = "serial"
ATTR_PCI_BUS_ID = "pciBusID"
ATTR_NUMA_NODE = "numaNode"
BRAND = "Hygon"

# Capacities: compute units, memory in bytes, and vDCU slots (each claim takes one).
CAP_CORES = "cores"
CAP_MEMORY = "memory"
CAP_SLICES = "slices"
MEMORY_STEP = 1024 * 1024  # memory is granted in whole MiB, the unit of the vdev file

# CDI: one spec file per prepared claim, one CDI device per allocated device in it.
CDI_VENDOR = DRIVER
CDI_CLASS = "dcu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
CDI_VERSION = "0.6.0"

# Kubelet plugin registration (pluginregistration.v1).
PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # newest first: the kubelet takes the first it knows
REGISTRATION_SOCKET = f"{DRIVER}-reg.sock"  # in the kubelet's plugins_registry directory
PLUGIN_SOCKET = "dra.sock"  # in <kubelet plugins dir>/<driver>/

RESOURCE_API = "/apis/resource.k8s.io/v1"

# What hami-dcu creates (the ResourceSlices, the webhook's ResourceClaimTemplates) carries this
# label; a template is reused only when it carries it and its spec is the one we would write.
OWNER_LABEL = "app.kubernetes.io/managed-by"
OWNER = "hami-dcu"

# On a pod the webhook rewrote into claims while no caller was proven the API server: the
# templates it names that did not exist yet, as `{name: spec}` JSON, for the extender to create
# once its watch shows the pod stored (webhook/pendingtemplates.py). Not `hami.io/`: the
# extender's pod cache keeps none of it.
PENDING_TEMPLATES = "dcu.hami.io/claim-templates"


def device_name(pci_bus_id: str) -> str:
    """`0000:3D:00.0` -> `hcu-0000-3d-00-0`: a DNS label from the PCI bus id, as Hygon's
    driver names devices, so the name survives SMI index changes."""
    return "hcu-" + pci_bus_id.strip().lower().replace(":", "-").replace(".", "-")


def slice_name(node: str) -> str:
    """This node's one ResourceSlice (a DNS subdomain: node names are, and so is the driver)."""
    return f"{node}-{DRIVER}"
