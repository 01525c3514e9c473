"""The kubelet's DRA plugin API (v1 and v1beta1) and plugin registration API (v1), vendored
as .proto files written from the upstream field tables, with their generated Python stubs.

Regenerate the stubs after editing a .proto (grpcio-tools, a test extra):

    python -m hami_dcu.dra.api.regenerate

The generated modules import each other by the proto's path below protoc's `-I`, so protoc
runs on a copy laid out as the import path (`hami_dcu/dra/api/...`).
"""
