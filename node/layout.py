"""Where a DCU container finds what it is given, the same in device-plugin and DRA mode:
the device nodes every DCU process opens, the vDCU directory, the driver directories."""

from __future__ import annotations

KFD = "/dev/kfd"
MKFD = "/dev/mkfd"
VDEV_CONTAINER_DIR = "/etc/vdev/docker/"  # the vDCU's directory (its vdev0.conf), read-only
DRIVER_CONTAINER_DIR = "/opt/hygondriver"  # the host's DTK, read-only
HYHAL_DIR = "/opt/hyhal"  # the host's hyhal, read-only, at the same path
