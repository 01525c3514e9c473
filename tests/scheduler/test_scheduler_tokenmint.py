"""The extender's token, minted with kube-scheduler's (issue 21: kube-scheduler ran on a legacy,
never-expiring token Secret because the pod's projected token was the extender's)."""

from __future__ import annotations

import argparse
import datetime as dt
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from hami_dcu.common.io.cannotstart import CannotStart
from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol.errors import CliError
from hami_dcu.scheduler import token_command, tokenmint
from hami_dcu.scheduler.tokenmint import Minted

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def test_renewal_is_due_at_four_fifths_of_the_life():
    minted = Minted("t", T0, T0 + HOUR)
    assert tokenmint.renew_in(minted, T0) == 2880
    assert tokenmint.renew_in(minted, T0 + dt.timedelta(minutes=47)) == 60
    assert tokenmint.renew_in(minted, T0 + dt.timedelta(minutes=59)) == 0


@pytest.mark.parametrize(("minted", "now", "expected"), [
    (None, T0, 2.0),
    (Minted("t", T0, T0 + HOUR), T0 + dt.timedelta(minutes=50), 30.0),  # 10 min left: capped
    (Minted("t", T0, T0 + HOUR), T0 + dt.timedelta(seconds=3500), 10.0),  # 100 s left: a tenth
    (Minted("t", T0, T0 + HOUR), T0 + 2 * HOUR, 1.0),  # expired: keep trying, not in a tight loop
])
def test_a_failed_renewal_is_retried_before_the_token_expires(minted, now, expected):
    assert tokenmint.retry_in(minted, now) == expected


def test_the_request_asks_for_an_unbound_expiring_token_of_the_api_servers_audience():
    assert tokenmint.token_request(3600) == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                             "spec": {"expirationSeconds": 3600}}
    with pytest.raises(ValueError, match="at least 600"):
        tokenmint.token_request(599)


@pytest.mark.parametrize("review", [{}, {"status": None}, {"status": {"token": ""}},
                                    {"status": {"token": "t"}}, {"status": {"expirationTimestamp": "x"}}, []])
def test_an_answer_without_a_token_is_an_error(review):
    with pytest.raises(ValueError, match="no token"):
        tokenmint.minted_from(review, T0)


def test_files_are_replaced_whole_and_readable_by_their_owner_only(tmp_path: Path):
    (tmp_path / "token").write_text("old")
    files = tokenmint.credential_files(Minted("new-token", T0, T0 + HOUR), b"CA", "kube-system")
    tokenmint.write_files(tmp_path, files)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {
        "token": b"new-token", "ca.crt": b"CA", "namespace": b"kube-system"}
    assert stat.S_IMODE((tmp_path / "token").stat().st_mode) == 0o400


class FakeApi:
    """The TokenRequest endpoint: tokens that live `life` seconds, or errors while `failing`."""

    def __init__(self, life: float = 1.0, failing: int = 0) -> None:
        self.life, self.failing = life, failing
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path, body))
        if self.failing:
            self.failing -= 1
            raise KubeError(403, "Forbidden", "cannot create serviceaccounts/token")
        expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.life)
        return {"status": {"token": f"token-{len(self.calls)}",
                           "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


@pytest.fixture
def own_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    own = tmp_path / "own"
    own.mkdir()
    (own / "ca.crt").write_bytes(b"CLUSTER CA")
    (own / "namespace").write_text("kube-system\n")
    monkeypatch.setattr(token_command, "SA_DIR", own)
    return own


def _args(out: Path, **overrides: Any) -> argparse.Namespace:
    values = {"kubeconfig": None, "service_account": "hami-dcu-scheduler", "namespace": None, "dir": out,
              "expiration_seconds": 3600, "once": False}
    return argparse.Namespace(**{**values, **overrides})


def test_once_writes_one_token_of_the_named_account(tmp_path, own_credentials, monkeypatch):
    api = FakeApi(life=3600)
    monkeypatch.setattr(token_command.Kube, "from_kubeconfig", classmethod(lambda cls, *a, **k: api))
    out = tmp_path / "minted"
    out.mkdir()
    assert token_command.run(_args(out, once=True)) == 0
    assert api.calls == [("POST", "/api/v1/namespaces/kube-system/serviceaccounts/hami-dcu-scheduler/token",
                          tokenmint.token_request(3600))]
    assert (out / "token").read_text() == "token-1" and (out / "ca.crt").read_bytes() == b"CLUSTER CA"


def test_once_fails_when_no_token_is_given(tmp_path, own_credentials, monkeypatch):
    monkeypatch.setattr(token_command.Kube, "from_kubeconfig", classmethod(lambda cls, *a, **k: FakeApi(failing=1)))
    out = tmp_path / "minted"
    out.mkdir()
    with pytest.raises(CliError, match="no token for kube-system/hami-dcu-scheduler: 403 Forbidden"):
        token_command.run(_args(out, once=True))  # the CLI says it in one line, exit 1
    assert not (out / "token").exists()


def test_a_short_lifetime_is_refused_before_any_call(tmp_path, own_credentials, monkeypatch):
    api = FakeApi()
    monkeypatch.setattr(token_command.Kube, "from_kubeconfig", classmethod(lambda cls, *a, **k: api))
    with pytest.raises(CannotStart, match="--expiration-seconds 60: at least 600"):
        token_command.run(_args(tmp_path, expiration_seconds=60))  # the CLI says it in one line, exit 2
    assert api.calls == []


def test_the_token_is_renewed_and_a_failure_retried(tmp_path, own_credentials, monkeypatch):
    """Tokens living 1 s are replaced about every 0.8 s; a refused request is retried."""
    api = FakeApi(life=1.0, failing=0)
    monkeypatch.setattr(token_command.Kube, "from_kubeconfig", classmethod(lambda cls, *a, **k: api))
    monkeypatch.setattr(tokenmint, "MAX_RETRY_SECONDS", 0.1)
    out = tmp_path / "minted"
    out.mkdir()
    stop = threading.Event()
    worker = threading.Thread(target=token_command.run, args=(_args(out), stop))
    worker.start()
    try:
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=10)
        while len(api.calls) < 2 and dt.datetime.now(dt.UTC) < deadline:
            stop.wait(0.05)
        api.failing = 1
        while len(api.calls) < 4 and dt.datetime.now(dt.UTC) < deadline:
            stop.wait(0.05)
    finally:
        stop.set()
        worker.join(5)
    assert len(api.calls) >= 4
    assert (out / "token").read_text() == f"token-{len(api.calls)}"
