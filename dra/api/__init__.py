"""The kubelet's DRA plugin API (v1 and v1beta1) and plugin registration API (v1), vendored
as .proto files written from the upstream field tables, with their generated Python stubs.

Regenerate the stubs after editing a .proto (grpcio-tools, a test extra), from the checkout:

    python .ci/stubs.py
"""
