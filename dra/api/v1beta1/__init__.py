"""Generated stubs; see hami_dcu.dra.api."""
