"""Every `hami-dcu` invocation the chart renders is accepted by the real command-line parser,
and the values the components must agree on come out the same in each of them."""

import json
import shlex
import subprocess

import pytest
import yaml
from chart_paths import CHART

from e2e.tools import IMAGE_REPOSITORY, SET_IMAGE
from hami_dcu.cli.main import build_parser
from hami_dcu.cli.startup import CHART_BOUNDS, chart_bound_problems
from hami_dcu.common.protocol import keys

DCU = keys.DCU_NAMING  # the naming set these tests speak

IMAGE = f"{IMAGE_REPOSITORY}:"  # the one the render fixture sets


def pod_specs(docs):
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet", "Job"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]
        elif doc["kind"] == "CronJob":
            yield doc["metadata"]["name"], doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif doc["kind"] == "Pod":
            yield doc["metadata"]["name"], doc["spec"]


def hami_dcu_argv(container) -> list[str] | None:
    """The argv after `hami-dcu`: the image's entrypoint with args, or the `exec hami-dcu`
    line of a shell wrapper (mock mode picks its devices file in shell)."""
    command = container.get("command")
    if command is None:
        return list(container["args"])
    if command[:2] == ["sh", "-c"]:
        script = container["args"][0]
        _, _, tail = script.partition("exec hami-dcu ")
        assert tail, f"{container['name']}: shell wrapper without `exec hami-dcu`"
        return shlex.split(tail.replace('"$f"', "/etc/hami-dcu/mock/default.yaml"))
    return None  # e.g. the helm test pod runs python


def parsed_invocations(docs):
    parser, modules = build_parser()
    found = {}
    for owner, spec in pod_specs(docs):
        # Init containers first: where both run one subcommand, the long-running one is kept.
        for container in (spec.get("initContainers") or []) + spec["containers"]:
            if not container["image"].startswith(IMAGE):
                continue
            argv = hami_dcu_argv(container)
            if argv is None:
                continue
            assert modules[argv[0]] is not None, f"{owner}: subcommand {argv[0]} is not available"
            try:
                found[(owner, argv[0])] = parser.parse_args(argv)
            except SystemExit:
                pytest.fail(f"{owner}/{container['name']}: hami-dcu rejects {argv}")
            assert chart_bound_problems(found[(owner, argv[0])]) == [], f"{owner}: {argv}"
    return found


@pytest.mark.parametrize("values", [[], ["--set", "devicePlugin.smi=mock", "--set", "devicePlugin.metricsPort=9400"],
                                    ["--set", "webhook.enabled=false"]], ids=["default", "mock", "no-webhook"])
def test_every_invocation_parses(render, values):
    invocations = parsed_invocations(render(*values))
    commands = {command for _, command in invocations}
    assert commands == {"scheduler", "token", "device-plugin", "certs", "cleanup"}


def test_components_agree_on_names_and_timeouts(render):
    invocations = parsed_invocations(render("--set", "scheduler.lockTimeoutSeconds=120",
                                            "--set", "scheduler.name=dcu-scheduler"))
    by_command = {}
    for (owner, command), args in invocations.items():
        by_command.setdefault(command, []).append((owner, args))
    ((_, scheduler),) = by_command["scheduler"]
    ((_, plugin),) = by_command["device-plugin"]
    assert scheduler.lock_timeout == plugin.lock_timeout == 120
    assert scheduler.scheduler_name == "dcu-scheduler" and not scheduler.serve_webhook
    assert scheduler.bind.startswith("127.0.0.1:") and scheduler.webhook_bind.startswith("0.0.0.0:")
    assert plugin.resource_count == DCU.resources.count
    assert plugin.node_name is None  # from NODE_NAME (downward API)
    certs = {owner: args for owner, args in by_command["certs"]}
    assert {args.service for args in certs.values()} == {"hami-dcu-webhook"}
    assert {args.ca_secret for args in certs.values()} == {"hami-dcu-webhook-ca"}
    assert certs["hami-dcu-certs-post"].webhook_config == "hami-dcu-webhook"
    assert certs["hami-dcu-certs-pre"].webhook_config is None


def test_mock_mode_invocation(render):
    invocations = parsed_invocations(render("--set", "devicePlugin.smi=mock"))
    (plugin,) = [args for (_, command), args in invocations.items() if command == "device-plugin"]
    assert plugin.smi == "mock" and plugin.mock_fake_tree
    assert plugin.dev_root == "/var/lib/hami-dcu/fake/dev" and plugin.sys_root == "/var/lib/hami-dcu/fake/sys"


def test_resource_names_match_the_shared_keys(render):
    """The scheduler knows only the default names, so the chart must use exactly them."""
    docs = render()
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("scheduler-config"))
    managed = [m["name"] for m in yaml.safe_load(config["data"]["config.yaml"])["extenders"][0]["managedResources"]]
    assert managed == [DCU.resources.count, DCU.resources.memory, DCU.resources.cores]
    assert "resources:" not in (CHART / "values.yaml").read_text().split("\nscheduler:")[0]


def test_the_trusted_identities_are_the_components_service_accounts(render):
    """The webhook trusts exactly the ServiceAccounts the extender and the plugins run as."""
    docs = render()
    invocations = parsed_invocations(docs)
    ((_, scheduler),) = [(o, a) for (o, command), a in invocations.items() if command == "scheduler"]
    accounts = {d["kind"]: d["spec"]["template"]["spec"]["serviceAccountName"] for d in docs
                if d["kind"] in ("Deployment", "DaemonSet")}
    # The scheduler pod is kube-scheduler's; the extender's token is minted for its own account.
    ((_, token),) = [(o, a) for (o, command), a in invocations.items() if command == "token" and not a.once]
    assert accounts["Deployment"] == "hami-dcu-kube-scheduler"
    assert scheduler.scheduler_identity == [f"system:serviceaccount:kube-system:{token.service_account}"]
    assert scheduler.device_plugin_identity == [f"system:serviceaccount:kube-system:{accounts['DaemonSet']}"]


def test_the_cli_bounds_are_the_schema_bounds():
    """cli/startup.py refuses exactly what values.schema.json refuses (issue 23)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    for bound in CHART_BOUNDS:
        node = schema
        for part in bound.value.split("."):
            node = node["properties"][part]
        assert (node.get("minimum"), node.get("maximum")) == (bound.minimum, bound.maximum), bound


def test_the_lock_wait_rule_says_the_same_words_in_the_chart_and_the_cli(helm):
    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE,
                             "--set", "scheduler.lockWaitSeconds=20", "--set", "scheduler.lockTimeoutSeconds=10"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    chart_words = result.stderr.split("validate.yaml:", 1)[1].split(": ", 1)[1].splitlines()[0]
    parser, _ = build_parser()
    (cli_words,) = chart_bound_problems(parser.parse_args(["scheduler", "--lock-wait", "20", "--lock-timeout", "10"]))
    assert chart_words.replace("scheduler.lockWaitSeconds", "--lock-wait").replace(
        "scheduler.lockTimeoutSeconds", "--lock-timeout") == cli_words
