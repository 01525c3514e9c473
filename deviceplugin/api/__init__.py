"""The kubelet device plugin API (v1beta1) and its generated Python stubs.

Regenerate the stubs after editing `v1beta1/api.proto` (grpcio-tools, a test extra), from
the checkout:

    python .ci/stubs.py
"""
