"""The webhook's certificate renews itself: the renewal job (`hami-dcu certs`, what the chart's
CronJob runs) replaces it before it expires, the Secret volume follows, the server reloads the
files, and pods are admitted throughout, across the old certificate's expiry. The expiry is
real (Python's TLS checks the clock): the certificates are issued so that they lapse a few
seconds into the test. Every admission is a new TLS handshake, so nothing rides on a
connection made while the old certificate was still valid."""

import asyncio
import base64
import datetime as dt
import itertools
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiohttp import web
from cryptography import x509

from e2e.secretvolume import SecretVolume
from hami_dcu.cli.localcluster.admission import WebhookDispatcher
from hami_dcu.cli.localcluster.apiserver import LocalApiServer
from hami_dcu.cli.localcluster.cluster import (
    SYSTEM_NAMESPACE,
    WEBHOOK_CONFIG,
    WEBHOOK_SECRET,
    WEBHOOK_SERVICE,
    webhook_configuration,
)
from hami_dcu.cli.localcluster.servers import AppThread, free_port
from hami_dcu.cli.main import main
from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.io.tls import ReloadingTLS
from hami_dcu.common.protocol import keys
from hami_dcu.webhook import certs
from hami_dcu.webhook.decision import Settings as WebhookSettings
from hami_dcu.webhook.server import build_app as build_webhook_app

RELOADER = web.AppKey("reloader", asyncio.Task)
LIFETIME_LEFT = dt.timedelta(seconds=5)  # of the certificates the test starts with
CERTS_ARGS = ["--namespace", SYSTEM_NAMESPACE, "--service", WEBHOOK_SERVICE, "--secret", WEBHOOK_SECRET,
              "--webhook-config", WEBHOOK_CONFIG]


@dataclass
class Admissions:
    """Pods created one after another from a thread, each admitted through the webhook."""

    kube: Kube
    results: list[tuple[float, str | None]] = field(default_factory=list)  # (unix time, error or None)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        for n in itertools.count():
            if self.stop.is_set():
                return
            started = time.time()
            try:
                self.kube.create_pod("team", {"metadata": {"name": f"p{n}"}, "spec": {"containers": [
                    {"name": "main", "image": "x", "resources": {"limits": {"hygon.com/dcunum": "1"}}}]}})
                self.results.append((started, None))
            except KubeError as exc:
                self.results.append((started, exc.message))
            time.sleep(0.05)

    def after(self, moment: float) -> list[str | None]:
        return [error for started, error in self.results if started > moment]

    def before(self, moment: float) -> list[str | None]:
        return [error for started, error in self.results if started < moment]


@dataclass
class Setup:
    api: LocalApiServer
    kube: Kube
    volume: SecretVolume
    served_url: tuple[str, int]
    old_expiry: float  # unix time the first serving certificate lapses
    admissions: Admissions

    def renew(self) -> None:
        """One run of the renewal CronJob."""
        assert main(["certs", "--kubeconfig", str(self.api.kubeconfig_path), *CERTS_ARGS]) == 0

    def served_certificate(self) -> x509.Certificate:
        pem = ssl.get_server_certificate(self.served_url)
        return x509.load_pem_x509_certificate(pem.encode())

    def ca_bundle(self) -> bytes:
        config = self.kube.request("GET", f"{certs.WEBHOOK_CONFIG_PATH}/{WEBHOOK_CONFIG}")
        return base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])

    def wait_until(self, moment: float) -> None:
        while time.time() < moment:
            time.sleep(0.1)


def _issue_expiring(kube: Kube, ca_expiring: bool) -> float:
    """Store a serving certificate (and, with `ca_expiring`, a CA) lapsing LIFETIME_LEFT from now;
    returns the serving certificate's expiry."""
    now = dt.datetime.now(dt.UTC)
    dns = certs.service_dns_names(WEBHOOK_SERVICE, SYSTEM_NAMESPACE)
    serving_start = now - dt.timedelta(days=certs.SERVING_DAYS) + LIFETIME_LEFT
    if ca_expiring:
        ca = certs.issue(dns, now=now - dt.timedelta(days=certs.CA_DAYS) + LIFETIME_LEFT)
        bundle = certs.issue(dns, now=serving_start, ca=(ca.ca_cert, ca.ca_key))
        certs.ensure(kube, SYSTEM_NAMESPACE, WEBHOOK_SERVICE, WEBHOOK_SECRET, WEBHOOK_CONFIG)  # creates the Secrets
        for name, data in ((WEBHOOK_SECRET, bundle.secret_data()), (certs.ca_secret_name(WEBHOOK_SECRET),
                                                                     bundle.ca_secret_data())):
            path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets/{name}"
            secret = kube.request("GET", path)
            kube.request("PUT", path, body={**secret, "data": data})
        certs.inject_ca_bundle(kube, WEBHOOK_CONFIG, bundle.ca_cert)
    else:
        bundle, _ = certs.ensure(kube, SYSTEM_NAMESPACE, WEBHOOK_SERVICE, WEBHOOK_SECRET, WEBHOOK_CONFIG,
                                 now=serving_start)
    return x509.load_pem_x509_certificate(bundle.cert).not_valid_after_utc.timestamp()


@contextmanager
def webhook_with_expiring_certificate(tmp_path, ca_expiring: bool = False) -> Iterator[Setup]:
    api = LocalApiServer(kubeconfig_path=tmp_path / "kubeconfig").start()
    threads: list[threading.Thread] = []
    webhook = volume = None
    admissions = None
    try:
        kube = Kube.from_kubeconfig(str(api.kubeconfig_path))
        kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
        kube.request("POST", certs.WEBHOOK_CONFIG_PATH, body=webhook_configuration())
        old_expiry = _issue_expiring(kube, ca_expiring)
        volume = SecretVolume(kube, SYSTEM_NAMESPACE, WEBHOOK_SECRET, tmp_path / "tls")
        volume.sync()
        tls = ReloadingTLS(str(tmp_path / "tls/tls.crt"), str(tmp_path / "tls/tls.key"))
        port = free_port()

        def make_app():
            app = build_webhook_app(WebhookSettings(naming=keys.DCU_NAMING))

            async def reload_files(_app):  # what `hami-dcu webhook` runs, on a short interval
                _app[RELOADER] = asyncio.create_task(tls.watch(interval=0.1))

            app.on_startup.append(reload_files)
            return app

        webhook = AppThread("webhook", make_app, port=port, ssl_context=tls.context).start()
        WebhookDispatcher(api, resolve_service=lambda ns, name, _port: f"https://127.0.0.1:{port}",
                          reuse_connections=False).install()
        admissions = Admissions(Kube.from_kubeconfig(str(api.kubeconfig_path)))
        threads.append(threading.Thread(target=admissions.run, daemon=True))
        threads[-1].start()
        yield Setup(api, kube, volume, ("127.0.0.1", port), old_expiry, admissions)
    finally:
        if admissions is not None:
            admissions.stop.set()
        for thread in threads:
            thread.join(10)
        if volume is not None:
            volume.stop()
        if webhook is not None:
            webhook.stop()
        api.stop()


def _every(interval: float, action, stop: threading.Event) -> threading.Thread:
    def loop() -> None:
        while not stop.wait(interval):
            action()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_serving_certificate_renews_before_expiry_and_admission_never_stops(tmp_path):
    with webhook_with_expiring_certificate(tmp_path) as setup:
        ca_before = setup.ca_bundle()
        setup.volume.start(interval=0.3)  # the kubelet
        cron_stop = threading.Event()
        cron = _every(1.0, setup.renew, cron_stop)  # the CronJob, its schedule shortened
        try:
            setup.wait_until(setup.old_expiry + 2)
        finally:
            cron_stop.set()
            cron.join(30)
        served = setup.served_certificate()
        assert served.not_valid_after_utc.timestamp() > time.time() + 300 * 86400
        assert setup.ca_bundle() == ca_before  # same CA: nothing for the API server to learn
        admitted_after_expiry = setup.admissions.after(setup.old_expiry)
    assert setup.admissions.results and all(error is None for _, error in setup.admissions.results), [
        e for _, e in setup.admissions.results if e][:3]
    assert len(admitted_after_expiry) >= 5


def test_without_renewal_admission_stops_at_expiry(tmp_path):
    """The control: the same setup, no renewal job. Shows the test above really crosses an
    expiry that would otherwise stop every DCU pod (failurePolicy Fail)."""
    with webhook_with_expiring_certificate(tmp_path) as setup:
        setup.wait_until(setup.old_expiry + 1.5)
    assert all(error is None for error in setup.admissions.before(setup.old_expiry - 0.5))
    failed = [error for error in setup.admissions.after(setup.old_expiry + 0.5) if error]
    assert failed and all("failed calling webhook" in error for error in failed)


def test_ca_rotation_keeps_the_old_ca_trusted_until_the_webhook_serves_the_new_certificate(tmp_path):
    # The Secret volume (kubelet) lags the caBundle (API server): both CAs are trusted meanwhile.
    with webhook_with_expiring_certificate(tmp_path, ca_expiring=True) as setup:
        old_serial = setup.served_certificate().serial_number
        setup.renew()  # a new CA and serving certificate; the webhook still serves the old one
        bundle = setup.ca_bundle()
        assert bundle.count(b"BEGIN CERTIFICATE") == 2  # new CA and the retiring one
        rotated_at = time.time()
        while len(setup.admissions.after(rotated_at)) < 5:  # admitted with the old certificate, new bundle
            time.sleep(0.05)
        assert setup.served_certificate().serial_number == old_serial
        setup.volume.start(interval=0.3)  # the kubelet catches up
        setup.wait_until(setup.old_expiry + 1.5)
        assert setup.served_certificate().serial_number != old_serial
        setup.renew()  # the next scheduled run trusts the new CA only
        assert setup.ca_bundle().count(b"BEGIN CERTIFICATE") == 1
        last_renewal = time.time()
        while len(setup.admissions.after(last_renewal)) < 5:
            time.sleep(0.05)
    errors = [error for _, error in setup.admissions.results if error]
    assert not errors, errors[:3]
