"""Certificate files on disk: private keys 0400, certificates 0644, replaced atomically."""

import os
import stat

from hami_dcu.common.io.tls import ReloadingTLS
from hami_dcu.webhook.certs import issue, write_pem_files


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_keys_are_0400_and_certificates_0644_whatever_the_umask(tmp_path):
    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    old = os.umask(0)  # the loosest umask must not make a key world-readable
    try:
        write_pem_files(tmp_path / "tls", {"tls.crt": bundle.cert, "tls.key": bundle.key, "ca.crt": bundle.ca_cert})
    finally:
        os.umask(old)
    assert mode(tmp_path / "tls" / "tls.key") == 0o400
    assert mode(tmp_path / "tls" / "tls.crt") == 0o644 and mode(tmp_path / "tls" / "ca.crt") == 0o644
    assert (tmp_path / "tls" / "tls.key").read_bytes() == bundle.key
    ReloadingTLS(str(tmp_path / "tls" / "tls.crt"), str(tmp_path / "tls" / "tls.key"))  # loads as written


def test_rewrite_replaces_a_0400_key_and_leaves_no_temporary_files(tmp_path):
    first, second = issue(["a"]), issue(["b"])
    write_pem_files(tmp_path, {"tls.crt": first.cert, "tls.key": first.key})
    write_pem_files(tmp_path, {"tls.crt": second.cert, "tls.key": second.key})
    assert (tmp_path / "tls.key").read_bytes() == second.key and mode(tmp_path / "tls.key") == 0o400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.crt", "tls.key"]
