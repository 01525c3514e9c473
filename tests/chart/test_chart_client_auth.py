"""webhook.clientAuth (issue 35, finding 5): the webhook answers only the API server's client
certificate. Off by default (the API server presents one only when its operator configures
--admission-control-config-file, which no chart can); on, the extender gets the CA and the
allowed names, and the CA reaches it as a ConfigMap."""

import subprocess

import kubernetes_validate
import pytest
import yaml
from chart_paths import CHART

from e2e.realcluster.pki import Pki
from e2e.tools import SET_IMAGE


def extender(docs: list[dict]) -> tuple[dict, dict]:
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-scheduler"))
    pod = deployment["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "extender"), pod


def config_maps(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}


def test_off_by_default(render):
    docs = render()
    container, pod = extender(docs)
    assert not any(a.startswith(("--client-ca", "--client-name")) for a in container["args"])
    assert "client-ca" not in {v["name"] for v in pod["volumes"]}
    assert "hami-dcu-webhook-client-ca" not in config_maps(docs)


def test_on_with_a_ca_bundle(render, tmp_path):
    pki = Pki(tmp_path)
    docs = render("--set", "webhook.clientAuth.enabled=true", "--set-file", f"webhook.clientAuth.caBundle={pki.ca}",
                  "--set", "webhook.clientAuth.allowedNames={kube-apiserver-webhook-client,apiserver.example}")
    container, pod = extender(docs)
    assert "--client-ca=/client-ca/ca.crt" in container["args"]
    assert [a for a in container["args"] if a.startswith("--client-name")] == [
        "--client-name=kube-apiserver-webhook-client", "--client-name=apiserver.example"]
    assert {"name": "client-ca", "mountPath": "/client-ca", "readOnly": True} in container["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    assert volume["configMap"]["name"] == "hami-dcu-webhook-client-ca"
    assert config_maps(docs)["hami-dcu-webhook-client-ca"]["data"]["ca.crt"] == pki.ca.read_text()
    for doc in docs:
        kubernetes_validate.validate(doc, "1.31.0", strict=True)


def test_on_with_an_existing_config_map(render):
    docs = render("--set", "webhook.clientAuth.enabled=true",
                  "--set", "webhook.clientAuth.existingConfigMap=apiserver-ca")
    container, pod = extender(docs)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    assert volume["configMap"] == {"name": "apiserver-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert "--client-ca=/client-ca/ca.crt" in container["args"]
    assert "hami-dcu-webhook-client-ca" not in config_maps(docs)


@pytest.mark.parametrize(("values", "words"), [
    (["--set", "webhook.clientAuth.enabled=true"], "needs the CA that signs the API server's webhook client"),
    (["--set", "webhook.clientAuth.enabled=true", "--set", "webhook.clientAuth.caBundle=not-a-pem"],
     "caBundle is not a PEM certificate"),
    (["--set", "webhook.clientAuth.enabled=true", "--set", "webhook.clientAuth.existingConfigMap=x",
      "--set", "webhook.clientAuth.caBundle=-----BEGIN CERTIFICATE-----"], "not both"),
    (["--set", "webhook.clientAuth.allowedNames={a b}"], "allowedNames"),
])
def test_refused_at_render(helm, values, words):
    result = subprocess.run([str(helm), "template", "hami-dcu", str(CHART), *SET_IMAGE, "--namespace", "kube-system",
                             *values], capture_output=True, text=True)
    assert result.returncode != 0 and words in result.stderr, result.stderr


def test_the_values_are_documented():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["webhook"]["clientAuth"] == {"enabled": False, "caBundle": "", "existingConfigMap": "",
                                               "allowedNames": []}
    readme = (CHART / "README.md").read_text()
    for key in ("webhook.clientAuth.enabled", "webhook.clientAuth.caBundle", "webhook.clientAuth.existingConfigMap",
                "webhook.clientAuth.allowedNames"):
        assert f"`{key}`" in readme, key
