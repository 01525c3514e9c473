"""DRA mode's vocabulary, shared by the cluster side (webhook, extender, CLI) and the DRA driver:
the names DRA mode puts on the wire, Kubernetes quantities as integers, and the translation of a
HAMi-style pod into claims. Pure: no driver code, no I/O."""
