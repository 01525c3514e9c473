"""The kubelet device plugin API (v1beta1) and its generated Python stubs.

Regenerate the stubs after editing `v1beta1/api.proto` (the module path of the generated
code comes from the proto's path below `-I`, so it is laid out as the import path first):

    d=$(mktemp -d) && mkdir -p $d/hami_dcu/deviceplugin/api/v1beta1 &&
    cp deviceplugin/api/v1beta1/api.proto $d/hami_dcu/deviceplugin/api/v1beta1/ &&
    python -m grpc_tools.protoc -I $d --python_out=$d --pyi_out=$d --grpc_python_out=$d \\
        $d/hami_dcu/deviceplugin/api/v1beta1/api.proto &&
    cp $d/hami_dcu/deviceplugin/api/v1beta1/api_pb2* deviceplugin/api/v1beta1/
"""
