"""hami-dcu's protocol: the wire language and HAMi's rules, as pure functions over plain data.

The annotation keys and resource names, the codecs of every annotation, request parsing (with
Kubernetes' quantity syntax, `kubequantity`), the admission checks, counting, quotas, the
one-writer rule, the errors, the typed views of the pods, nodes and ResourceClaims we read
(`objects`) and DRA mode's vocabulary (`dra/`). Nothing here opens a socket, starts a thread,
reads or writes a file, or loads the Kubernetes client, aiohttp or gRPC: a contract in
pyproject.toml says so, and mypy checks it strictly. What talks to the world is in
`hami_dcu.common.io`.
"""
