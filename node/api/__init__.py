"""The kubelet APIs both node plugins speak, vendored as .proto files with generated stubs."""
