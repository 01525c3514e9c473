"""The certificate renews itself without a Helm upgrade: a CronJob runs the install hook's
`hami-dcu certs` on a schedule, as an ordinary release object with its own least-privilege
identity, so `helm uninstall` removes it."""

import pytest

HOOK = "helm.sh/hook"


def by_kind(docs, kind, suffix=""):
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]


def container_of(pod_spec):
    (container,) = pod_spec["containers"]
    return container


def test_renewal_cronjob_runs_the_post_install_command(render):
    docs = render()
    (cron,) = by_kind(docs, "CronJob")
    assert cron["spec"]["schedule"] == "17 3 * * *" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    template = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert template["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    (post,) = by_kind(docs, "Job", "-certs-post")
    post_args = container_of(post["spec"]["template"]["spec"])["args"]
    cron_args = container_of(template["spec"])["args"]
    assert [a for a in cron_args if not a.startswith("--log-level")] == post_args  # Secrets, CA, caBundle alike
    assert HOOK not in (cron["metadata"].get("annotations") or {})


def test_renewal_identity_is_its_own_and_least_privilege(render):
    docs = render()
    (cron,) = by_kind(docs, "CronJob")
    account = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"]
    (sa,) = [d for d in by_kind(docs, "ServiceAccount") if d["metadata"]["name"] == account]
    assert HOOK not in (sa["metadata"].get("annotations") or {})  # removed by helm uninstall
    (role,) = [d for d in by_kind(docs, "Role") if d["metadata"]["name"] == account]
    # No create: a Secret creatable by a daily job could be any Secret (issue 21).
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hami-dcu-webhook-tls", "hami-dcu-webhook-ca"],
         "verbs": ["get", "update"]}]
    (cluster_role,) = [d for d in by_kind(docs, "ClusterRole") if d["metadata"]["name"] == account]
    assert cluster_role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                                      "resources": ["mutatingwebhookconfigurations"],
                                      "resourceNames": ["hami-dcu-webhook"], "verbs": ["get", "patch"]}]
    bindings = [d for d in by_kind(docs, "RoleBinding") + by_kind(docs, "ClusterRoleBinding")
                if d["metadata"]["name"] == account]
    assert len(bindings) == 2 and all(b["subjects"][0]["name"] == account for b in bindings)


@pytest.mark.parametrize("values", [["--set", "certs.mode=certManager"], ["--set", "certs.renewal.enabled=false"]],
                         ids=["cert-manager-renews-itself", "turned-off"])
def test_no_renewal_cronjob_when_not_wanted(render, values):
    assert not by_kind(render(*values), "CronJob")


def test_schedule_is_configurable(render):
    (cron,) = by_kind(render("--set", "certs.renewal.schedule=@hourly"), "CronJob")
    assert cron["spec"]["schedule"] == "@hourly"
