"""The committed gRPC stubs of every vendored .proto, regenerated from the committed protos.

Usage (from the checkout, in the project's virtual environment; grpcio-tools is a test extra):
    python .ci/stubs.py          # rewrite the stale stubs in place
    python .ci/stubs.py --check  # list the stale stubs; exit 1 if there is one

A developer's tool, not the product's: it writes into the checkout, runs from it, and nothing
installed calls it (tests/test_stubs.py runs it over every proto in the fast suite).

A generated module imports its siblings by the proto's path below protoc's `-I`, so protoc runs
on a copy of each proto laid out as its import path: the folder `dra/api/v1` is the package
`hami_dcu.dra.api.v1` (each top-level folder is `hami_dcu.<folder>`, pyproject's package-dir).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOS = (
    Path("deviceplugin/api/v1beta1/api.proto"),
    Path("node/api/podresources/v1/api.proto"),
    Path("dra/api/v1/api.proto"),
    Path("dra/api/v1beta1/api.proto"),
    Path("dra/api/pluginregistration/api.proto"),
)
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")
NAMESPACE = Path("hami_dcu")


def generate(out: Path, protos: Iterable[Path] = PROTOS, root: Path = ROOT) -> dict[Path, str]:
    """Run protoc on copies of `protos` (paths below `root`) under `out`; return each stub's
    path below `root` -> its text."""
    from grpc_tools import protoc  # a test extra: imported only when generating

    protos = list(protos)
    for proto in protos:
        (out / NAMESPACE / proto).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / proto, out / NAMESPACE / proto)
    status = protoc.main(["protoc", f"-I{out}", f"--python_out={out}", f"--pyi_out={out}",
                          f"--grpc_python_out={out}", *(str(out / NAMESPACE / p) for p in protos)])
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}")
    return {proto.parent / name: (out / NAMESPACE / proto.parent / name).read_text()
            for proto in protos for name in OUTPUTS}


def stale(stubs: dict[Path, str], root: Path = ROOT) -> list[Path]:
    """The committed stubs (below `root`) that are missing or differ from `stubs`."""
    return [p for p, text in stubs.items() if not (root / p).is_file() or (root / p).read_text() != text]


def main(argv: list[str] | None = None, root: Path = ROOT, protos: Iterable[Path] = PROTOS) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only list the stale stubs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        stubs = generate(Path(tmp), protos, root)
    outdated = stale(stubs, root)
    if args.check:
        for path in outdated:
            print(f"stale: {path} (regenerate: python .ci/stubs.py)")
        return 1 if outdated else 0
    for path in outdated:
        (root / path).write_text(stubs[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
