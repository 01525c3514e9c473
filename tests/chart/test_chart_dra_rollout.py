"""Issue 36, item 4: the DRA driver's DaemonSet upgrades without a gap. The new pod starts
beside the old one (maxSurge 1, maxUnavailable 0), named by its pod UID so both register; the
old pod goes once the new one is ready, which it is only once the kubelet registered it."""

from hami_dcu.cli.main import build_parser

DRA = ("--set", "mode=dra", "--kube-version", "1.37.2")


def driver(render, *args: str) -> dict:
    [daemonset] = [d for d in render(*DRA, *args) if d["kind"] == "DaemonSet"
                   and d["metadata"]["name"].endswith("-dra-driver")]
    return daemonset


def test_the_driver_rolls_by_starting_the_new_pod_before_the_old_one_goes(render):
    strategy = driver(render)["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def test_each_driver_pod_knows_its_uid_and_is_ready_only_once_registered(render):
    pod = driver(render)["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    parser, _ = build_parser()
    args = parser.parse_command_line(container["args"])
    assert args.ready_file == "/run/hami-dcu/registered"
    assert container["readinessProbe"]["exec"]["command"] == ["test", "-e", args.ready_file]
    # The file lives in the pod's own memory volume: a new pod never sees the old one's.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/run/hami-dcu"]]
    # Both pods share the node's state directory (its lock file is the one lock between them).
    assert volumes[mounts[args.state_dir]]["hostPath"]["path"] == args.state_dir


def test_the_mock_drivers_script_passes_the_ready_file_too(render):
    [container] = driver(render, "--set", "devicePlugin.smi=mock")["spec"]["template"]["spec"]["containers"]
    assert "--ready-file /run/hami-dcu/registered" in container["args"][0]
    assert any(e["name"] == "POD_UID" for e in container["env"])
