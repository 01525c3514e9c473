"""The node layer under both kubelet plugins: what this node's cards are (SMI backends,
discovery by PCI bus id, NUMA, health), how a share of one becomes a vDCU (the CU/pipe/vdev
allocator and the vdev file), what a container is given (the layout), and the flags and
start-up both plugins share. It speaks to no kubelet: `deviceplugin` (device plugin gRPC)
and `dra` (DRA kubelet plugin) stand on it, never on each other.
"""
