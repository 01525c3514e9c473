"""`hami-dcu cleanup`: what the chart's post-delete hook runs, and the operator's node cleanup."""

from hami_dcu.cli.main import main
from hami_dcu.common.protocol import keys

DCU = keys.DCU_NAMING  # the naming set these tests speak


def secret(kube, name):
    kube.request("POST", "/api/v1/namespaces/kube-system/secrets",
                 body={"metadata": {"name": name}, "data": {"x": "eQ=="}})


def secrets(kube):
    return {s["metadata"]["name"] for s in kube.request("GET", "/api/v1/namespaces/kube-system/secrets")["items"]}


def annotated_node(kube, name):
    kube.create_node({"metadata": {"name": name, "annotations": {
        DCU.node_register: "DCU-1,4,65520,100,DCU-K100_AI,0,true,0,hami:", keys.NODE_LOCK: "2026-01-01T00:00:00Z",
        "other.io/keep": "yes"}}})


def test_deletes_the_named_secrets_and_nothing_else(kube, api_server, capsys):
    for name in ("hami-dcu-webhook-tls", "hami-dcu-webhook-ca", "unrelated"):
        secret(kube, name)
    annotated_node(kube, "n1")
    argv = ["cleanup", "--kubeconfig", str(api_server.kubeconfig_path), "--namespace", "kube-system",
            "--secret", "hami-dcu-webhook-tls", "--secret", "hami-dcu-webhook-ca", "--secret", "never-created"]
    assert main(argv) == 0
    assert secrets(kube) == {"unrelated"}
    assert DCU.node_register in kube.get_node("n1")["metadata"]["annotations"]  # nodes only on request
    assert "secret kube-system/never-created: not there" in capsys.readouterr().out


def test_node_annotations_only_when_asked_and_dry_run_touches_nothing(kube, api_server, capsys):
    annotated_node(kube, "n1")
    kube.create_node({"metadata": {"name": "plain"}})
    base = ["cleanup", "--kubeconfig", str(api_server.kubeconfig_path), "--node-annotations"]
    assert main([*base, "--dry-run"]) == 0
    assert keys.NODE_LOCK in kube.get_node("n1")["metadata"]["annotations"]
    assert f"node n1: would remove {DCU.node_register}, {keys.NODE_LOCK}" in capsys.readouterr().out
    assert main(base) == 0
    assert kube.get_node("n1")["metadata"]["annotations"] == {"other.io/keep": "yes"}


def test_secret_without_namespace_is_a_usage_error(capsys):
    assert main(["cleanup", "--secret", "x"]) == 2
    assert capsys.readouterr().err.strip() == "hami-dcu cleanup: --secret needs --namespace"
