"""The plugin never loads a library a container or another user could have replaced (issue 11,
finding 5: /opt/dtk, where librocm_smi64.so comes from, was mounted read-write into tenants)."""

import os

import pytest

from hami_dcu.node import libpath
from hami_dcu.node.smi import RsmiBackend, SmiError

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ownership checks need files owned by root")


def library(tmp_path, dir_mode=0o755, file_mode=0o644):
    lib_dir = tmp_path / "dtk" / "lib"
    lib_dir.mkdir(parents=True)
    lib = lib_dir / "librocm_smi64.so"
    lib.write_bytes(b"not really a library")
    lib.chmod(file_mode)
    lib_dir.chmod(dir_mode)
    tmp_path.chmod(0o755)
    (tmp_path / "dtk").chmod(0o755)
    return lib


def test_a_root_owned_library_in_root_owned_directories_is_safe(tmp_path):
    lib = library(tmp_path)
    assert libpath.find("librocm_smi64.so", f"/nonexistent:{lib.parent}") == lib
    assert libpath.unsafe(lib) is None


@pytest.mark.parametrize(("dir_mode", "file_mode", "reason"), [
    (0o777, 0o644, "lib is writable by others"),  # what a read-write mount into tenants amounts to
    (0o775, 0o644, "lib is writable by its group"),
    (0o755, 0o666, "librocm_smi64.so is writable by others"),
])
def test_a_writable_library_or_directory_is_unsafe(tmp_path, dir_mode, file_mode, reason):
    lib = library(tmp_path, dir_mode, file_mode)
    assert reason in libpath.unsafe(lib)


def test_a_library_owned_by_another_user_is_unsafe(tmp_path):
    lib = library(tmp_path)
    os.chown(lib, 1000, 1000)
    assert "owned by uid 1000" in libpath.unsafe(lib)
    os.chown(lib, 0, 0)
    link = tmp_path / "link.so"
    link.symlink_to(lib)
    os.chown(lib.parent, 1000, 0)
    assert "owned by uid 1000" in libpath.unsafe(link)  # judged where the link leads


def test_rsmi_refuses_to_load_a_planted_library(tmp_path, monkeypatch):
    lib = library(tmp_path, dir_mode=0o777)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(lib.parent))
    with pytest.raises(SmiError, match=r"refusing to load .*writable by others"):
        RsmiBackend("librocm_smi64.so")
