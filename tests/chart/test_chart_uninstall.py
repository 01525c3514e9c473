"""`helm uninstall` leaves nothing behind that the chart created: hook objects delete themselves
once their phase succeeded, and a post-delete hook removes the Secrets the certs job wrote."""

from test_chart_cli import parsed_invocations

HOOK = "helm.sh/hook"
POLICY = "helm.sh/hook-delete-policy"


def hooks(docs):
    return [d for d in docs if HOOK in (d["metadata"].get("annotations") or {})]


def test_every_hook_object_is_deleted_once_its_phase_succeeded(render):
    found = hooks(render())
    assert len(found) >= 10  # certs jobs and their RBAC, the cleanup job and its RBAC, the helm test pod
    for doc in found:
        policy = doc["metadata"]["annotations"].get(POLICY, "")
        assert "hook-succeeded" in policy.split(","), f"{doc['kind']}/{doc['metadata']['name']}: {policy!r}"


def test_post_delete_hook_removes_the_certificate_secrets(render):
    docs = render()
    invocations = parsed_invocations(docs)
    ((_, cleanup),) = [(owner, args) for (owner, command), args in invocations.items() if command == "cleanup"]
    assert cleanup.namespace == "kube-system"
    assert cleanup.secret == ["hami-dcu-webhook-tls", "hami-dcu-webhook-ca"] and not cleanup.node_annotations
    post_delete = [d for d in hooks(docs) if d["metadata"]["annotations"][HOOK] == "post-delete"]
    assert sorted(d["kind"] for d in post_delete) == ["Job", "Role", "RoleBinding", "ServiceAccount"]
    (role,) = [d for d in post_delete if d["kind"] == "Role"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": ["hami-dcu-webhook-tls", "hami-dcu-webhook-ca"],
                              "verbs": ["get", "delete"]}]


def test_secrets_can_be_kept_and_cert_manager_owns_its_own(render):
    for values in (["--set", "certs.deleteSecretsOnUninstall=false"], ["--set", "certs.mode=certManager"]):
        assert not [d for d in hooks(render(*values)) if d["metadata"]["annotations"][HOOK] == "post-delete"]
