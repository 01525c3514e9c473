"""SECURITY.md says what the code and the chart do: every HTTP path our servers route and every
unix socket the node agents serve is in "What listens where", and what it says of clusters
below 1.30 is what the chart renders there (issue 39: a doc claim that is false is a bug)."""

import re

from chart_paths import ROOT

from hami_dcu.common.protocol.dra import names
from hami_dcu.deviceplugin.server import socket_name

SECURITY = (ROOT / "SECURITY.md").read_text()


def section(title: str) -> str:
    start = SECURITY.index(f"### {title}\n")
    end = SECURITY.find("\n### ", start + 1)
    return SECURITY[start:end if end >= 0 else None]


def routes(path: str) -> set[str]:
    return set(re.findall(r"router\.add_(?:get|post)\(\"(/[\w-]+)\"", (ROOT / path).read_text()))


def test_every_route_and_socket_is_in_what_listens_where():
    listeners = section("What listens where")
    served = routes("scheduler/app.py") | routes("webhook/server.py") | routes("common/io/metricsserver.py")
    assert {"/filter", "/bind", "/preempt", "/prioritize", "/webhook", "/metrics", "/healthz"} <= served
    missing = sorted(p for p in served if f"`{p}`" not in listeners)
    assert not missing, f"served but not in SECURITY.md, What listens where: {missing}"
    sockets = [socket_name("hygon.com/dcunum"), socket_name("hygon.com/hcunum"), names.PLUGIN_SOCKET,
               names.REGISTRATION_SOCKET]
    assert not [s for s in sockets if s not in listeners], sockets
    for value in ("scheduler.port", "webhook.port", "scheduler.metricsPort", "devicePlugin.metricsPort",
                  "draDriver.metricsPort"):
        assert f"<{value}>" in listeners, value


def webhook_rules(docs) -> set[tuple[str, str]]:
    return {(op, res) for d in docs if d["kind"] == "MutatingWebhookConfiguration" for w in d["webhooks"]
            for r in w["rules"] for op in r["operations"] for res in r["resources"]}


def test_below_1_30_the_webhook_reviews_what_security_md_says(render):
    rules = webhook_rules(render(kube_version="1.29.0"))
    assert {("CREATE", "pods"), ("UPDATE", "pods"), ("CREATE", "pods/binding"), ("CREATE", "bindings"),
            ("UPDATE", "pods/status")} <= rules
    text = re.sub(r"\s+", " ", section("What is not defended"))
    assert "CREATEs, UPDATEs, Bindings and status writes" in text
    assert webhook_rules(render("--set", "webhook.reviewUpdates=false", kube_version="1.29.0")) == {("CREATE", "pods")}
    assert "only CREATEs with `webhook.reviewUpdates: false`" in text
