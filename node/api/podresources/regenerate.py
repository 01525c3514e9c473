"""Regenerate the committed pod resources stubs from the committed .proto (needs grpcio-tools).

    python -m hami_dcu.node.api.podresources.regenerate          # rewrite in place
    python -m hami_dcu.node.api.podresources.regenerate --check  # exit 1 if stale
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

API_DIR = Path(__file__).parent
# Generated modules import each other by the proto's path below protoc's -I: laid out as the
# import path, the stubs import `hami_dcu.node.api.podresources.v1`.
PACKAGE = Path("hami_dcu/node/api/podresources")
PROTOS = ("v1/api.proto",)
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(out: Path) -> dict[Path, str]:
    """Run protoc on a copy of the protos under `out`; return relative stub path -> text."""
    from grpc_tools import protoc  # a test extra: imported only when regenerating

    for proto in PROTOS:
        (out / PACKAGE / proto).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(API_DIR / proto, out / PACKAGE / proto)
    status = protoc.main(["protoc", f"-I{out}", f"--python_out={out}", f"--pyi_out={out}",
                          f"--grpc_python_out={out}", *(str(out / PACKAGE / p) for p in PROTOS)])
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}")
    return {Path(proto).parent / name: (out / PACKAGE / Path(proto).parent / name).read_text()
            for proto in PROTOS for name in OUTPUTS}


def stale(stubs: dict[Path, str]) -> list[Path]:
    """The committed stubs that differ from `stubs`."""
    return [p for p, text in stubs.items() if not (API_DIR / p).is_file() or (API_DIR / p).read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale stubs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        stubs = generate(Path(tmp))
    outdated = stale(stubs)
    if args.check:
        for path in outdated:
            print(f"stale: {API_DIR / path}")
        return 1 if outdated else 0
    for path in outdated:
        (API_DIR / path).write_text(stubs[path])
        print(f"wrote {API_DIR / path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
