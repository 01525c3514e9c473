"""The committed gRPC stubs of every vendored proto are what grpcio-tools generates from the
committed proto (.ci/stubs.py), and that script finds and rewrites a stale one."""

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("stubs", ROOT / ".ci" / "stubs.py")
assert _spec is not None and _spec.loader is not None
stubs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stubs)


def needs_protoc() -> None:
    pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools is a test dependency")


@pytest.mark.parametrize("proto", stubs.PROTOS, ids=str)
def test_stubs_match_a_fresh_generation(proto: Path, tmp_path: Path):
    needs_protoc()
    generated = stubs.generate(tmp_path, [proto])
    assert sorted(generated) == sorted(proto.parent / name for name in stubs.OUTPUTS)
    assert stubs.stale(generated) == [], "stale: python .ci/stubs.py"


def test_every_vendored_proto_is_regenerated():
    tracked = subprocess.run(["git", "ls-files", "*.proto"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert {Path(line) for line in tracked.stdout.split()} == set(stubs.PROTOS)


def test_a_changed_stub_is_reported_stale(tmp_path: Path):
    needs_protoc()
    generated = stubs.generate(tmp_path, stubs.PROTOS[:1])
    some = next(iter(generated))
    generated[some] += "# edited\n"
    assert stubs.stale(generated) == [some]


def test_check_lists_a_stale_stub_and_a_run_rewrites_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    needs_protoc()
    proto = stubs.PROTOS[0]
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / proto.parent, root / proto.parent)
    stub = root / proto.parent / "api_pb2_grpc.py"
    committed = stub.read_text()
    stub.write_text(committed + "# edited\n")
    assert stubs.main(["--check"], root=root, protos=[proto]) == 1
    assert stub.read_text() == committed + "# edited\n"  # --check writes nothing
    assert f"stale: {proto.parent / 'api_pb2_grpc.py'}" in capsys.readouterr().out
    assert stubs.main([], root=root, protos=[proto]) == 0
    assert stub.read_text() == committed
    assert stubs.main(["--check"], root=root, protos=[proto]) == 0
