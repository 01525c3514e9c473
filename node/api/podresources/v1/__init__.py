"""Generated stubs; see hami_dcu.node.api.podresources."""
