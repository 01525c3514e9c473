"""The kubelet's pod resources API (v1), vendored as a .proto written from the upstream field
table, with its generated Python stubs: which container on this node got which device ids
(device plugins) or which claim's devices (DRA).

Regenerate the stubs after editing the .proto (grpcio-tools, a test extra), from the checkout:

    python .ci/stubs.py
"""
