"""`hami-dcu certs` and `hami-dcu webhook` through the CLI dispatcher."""

import base64

from hami_dcu.cli.main import main
from hami_dcu.webhook.certs import WEBHOOK_CONFIG_PATH


def test_certs_command_issues_then_keeps_and_injects_the_ca(api_server, kube, capsys):
    kube.request("POST", WEBHOOK_CONFIG_PATH, body={
        "metadata": {"name": "hook"},
        "webhooks": [{"name": "dcu.hami.io", "clientConfig": {"service": {"namespace": "kube-system", "name": "wh"}}}]})
    argv = ["certs", "--kubeconfig", str(api_server.kubeconfig_path), "--namespace", "kube-system",
            "--service", "wh", "--secret", "wh-tls", "--webhook-config", "hook"]
    assert main(argv) == 0
    assert "certificate issued (no secret)" in capsys.readouterr().out
    secret = kube.request("GET", "/api/v1/namespaces/kube-system/secrets/wh-tls")
    ca = kube.request("GET", f"{WEBHOOK_CONFIG_PATH}/hook")["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(ca) == base64.b64decode(secret["data"]["ca.crt"])

    assert main(argv) == 0
    assert "certificate kept" in capsys.readouterr().out
    assert kube.request("GET", "/api/v1/namespaces/kube-system/secrets/wh-tls")["data"] == secret["data"]


def test_certs_command_reports_a_missing_namespace(api_server, capsys):
    argv = ["certs", "--kubeconfig", str(api_server.kubeconfig_path), "--namespace", "nowhere", "--service", "wh",
            "--secret", "wh-tls"]
    assert main(argv) == 1
    assert 'namespaces "nowhere" not found' in capsys.readouterr().err


def test_certs_command_fails_cleanly_without_a_kubeconfig(tmp_path, capsys):
    argv = ["certs", "--kubeconfig", str(tmp_path / "missing"), "--namespace", "ops", "--service", "wh",
            "--secret", "wh-tls"]
    assert main(argv) == 2  # could not start (cli/errors.py)
    assert capsys.readouterr().err == f"hami-dcu certs: kubeconfig {tmp_path / 'missing'} does not exist\n"


def test_webhook_command_refuses_unreadable_certificates(tmp_path, capsys):
    argv = ["webhook", "--bind", "127.0.0.1:0", "--tls-cert", str(tmp_path / "no.crt"),
            "--tls-key", str(tmp_path / "no.key")]
    assert main(argv) == 2  # could not start (cli/errors.py), checked before anything starts
    assert f"--tls-cert {tmp_path / 'no.crt'}: no such file" in capsys.readouterr().err
