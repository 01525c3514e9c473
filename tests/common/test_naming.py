"""The two naming sets (docs/architecture.md, Naming sets): fixed values, looked up by name,
handed to whatever needs one; nothing switches a process-wide set."""

import ast
from pathlib import Path

import pytest

from hami_dcu.common.protocol import keys, writers
from hami_dcu.common.protocol.codec import decode_node_devices
from hami_dcu.common.protocol.requests import DcuRequest, parse_container_request

ROOT = Path(__file__).resolve().parents[2]
KEYS_MODULE = "hami_dcu.common.protocol.keys"


def test_the_table_of_the_reference():
    dcu, hcu = keys.DCU_NAMING, keys.HCU_NAMING
    assert dcu.resources.all() == ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores")
    assert hcu.resources.all() == ("hygon.com/hcunum", "hygon.com/hcumem", "hygon.com/hcucores")
    assert (dcu.node_register, dcu.node_handshake) == ("hami.io/node-dcu-register", "hami.io/node-handshake-dcu")
    assert (hcu.node_register, hcu.node_handshake) == ("hami.io/node-hcu-register", "hami.io/node-handshake-hcu")
    assert (dcu.pod_devices_to_allocate, dcu.pod_devices_allocated) == (
        "hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated")
    assert (hcu.pod_devices_to_allocate, hcu.pod_devices_allocated) == (
        "hami.io/hcu-devices-to-allocate", "hami.io/hcu-devices-allocated")
    assert (dcu.use_type, dcu.nouse_type) == ("hygon.com/use-dcutype", "hygon.com/nouse-dcutype")
    assert (hcu.use_type, hcu.nouse_type) == ("hygon.com/use-hcutype", "hygon.com/nouse-hcutype")
    assert (dcu.device_type, dcu.id_prefix, dcu.model_prefix) == ("DCU", "DCU-", "DCU-")
    assert (hcu.device_type, hcu.id_prefix, hcu.model_prefix) == ("HCU", "HCU-", "HCU-")
    # Shared by both sets.
    assert (keys.NODE_LOCK, keys.USE_DCU_UUID, keys.NOUSE_DCU_UUID) == (
        "hami.io/mutex.lock", "hygon.com/use-gpuuuid", "hygon.com/nouse-gpuuuid")
    assert (keys.POD_NODE, keys.POD_TIME, keys.POD_BIND_PHASE, keys.POD_BIND_TIME) == (
        "hami.io/vgpu-node", "hami.io/vgpu-time", "hami.io/bind-phase", "hami.io/bind-time")


def test_a_set_is_looked_up_by_its_name_and_the_other_is_the_one_not_spoken():
    assert keys.naming_by_name("dcu") is keys.DCU_NAMING and keys.naming_by_name("hcu") is keys.HCU_NAMING
    assert keys.other_naming(keys.DCU_NAMING) is keys.HCU_NAMING
    assert keys.other_naming(keys.HCU_NAMING) is keys.DCU_NAMING
    assert sorted(keys.NAMINGS) == ["dcu", "hcu"]


def test_an_unknown_set_is_refused_and_changes_nothing():
    with pytest.raises(ValueError, match="unknown naming set 'xcu': expected one of dcu, hcu"):
        keys.naming_by_name("xcu")
    assert dict(keys.NAMINGS) == {"dcu": keys.DCU_NAMING, "hcu": keys.HCU_NAMING}


def test_the_sets_cannot_be_changed():
    namings, dcu = keys.NAMINGS, keys.DCU_NAMING
    with pytest.raises(TypeError):
        namings["xcu"] = dcu  # type: ignore[index]
    with pytest.raises(AttributeError):
        dcu.node_register = "hami.io/node-xcu-register"  # type: ignore[misc]
    assert dict(keys.NAMINGS) == {"dcu": keys.DCU_NAMING, "hcu": keys.HCU_NAMING}
    assert keys.DCU_NAMING.node_register == "hami.io/node-dcu-register"


def test_no_module_level_name_depends_on_a_set():
    """What differs between the sets is reached through a Naming only: a module-level name
    for one of them is what `from keys import NODE_REGISTER` would freeze."""
    gone = ("select_naming", "active_naming", "DEFAULT_NAMING", "DEFAULT_RESOURCES", "DEFAULT_COUNT_RESOURCE",
            "DEFAULT_MEMORY_RESOURCE", "DEFAULT_CORES_RESOURCE", "DEVICE_TYPE", "DEVICE_ID_PREFIX",
            "DEVICE_MODEL_PREFIX", "NODE_REGISTER", "NODE_HANDSHAKE", "POD_DEVICES_TO_ALLOCATE",
            "POD_DEVICES_ALLOCATED", "USE_DCU_TYPE", "NOUSE_DCU_TYPE")
    assert [name for name in gone if hasattr(keys, name)] == []
    values = {v for v in vars(keys).values() if isinstance(v, str)}
    for naming in keys.NAMINGS.values():
        own = {naming.node_register, naming.node_handshake, naming.use_type, naming.nouse_type,
               *naming.pod_allocation_keys, *naming.resources.all()}
        assert own.isdisjoint(values), naming.name


def test_readers_take_the_set_they_read():
    hcu_container = {"name": "c", "resources": {"limits": {"hygon.com/hcunum": "1", "hygon.com/hcumem": "2k"}}}
    dcu_container = {"name": "c", "resources": {"limits": {"hygon.com/dcunum": "1"}}}
    assert parse_container_request(hcu_container, keys.HCU_NAMING.resources) == DcuRequest(1, 2000, 100)
    assert parse_container_request(dcu_container, keys.HCU_NAMING.resources) is None
    assert parse_container_request(dcu_container, keys.DCU_NAMING.resources) == DcuRequest(1, 0, 100)


def test_both_sets_allocation_state_is_hami_dcus_to_write():
    for naming in (keys.DCU_NAMING, keys.HCU_NAMING):
        assert naming.pod_allocation_keys <= keys.SCHEDULER_OWNED_POD_ANNOTATIONS == writers.POD_KEYS
        assert naming.node_keys <= writers.NODE_KEYS
        assert naming.pod_devices_to_allocate in writers.PLUGIN_POD_KEYS


def test_hygon_v3s_registration_decodes():
    """Hygon's k8s-hcu-device-plugin v3 (strategy=hami): nine fields, mode `hami`, HCU- ids and
    models, the NUMA node dcgm reports (-1 when the platform has none)."""
    value = ("HCU-TPXS320016070601,4,65520,100,HCU-K100_AI,1,true,0,hami:"
             "HCU-TPXS320010040501,4,65520,100,HCU-K100_AI,-1,false,1,hami:")
    first, second = decode_node_devices(value, keys.HCU_NAMING.node_register)
    assert (first.id, first.type, first.numa, first.health, first.index, first.mode) == (
        "HCU-TPXS320016070601", "HCU-K100_AI", 1, True, 0, "hami")
    assert (second.numa, second.health, second.index) == (-1, False, 1)


# --- nothing rewrites the keys module ---------------------------------------------------------


def _python_files() -> list[Path]:
    skip = {".venv", ".git", "build", "dist", "node_modules"}
    return [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)
            and not p.name.endswith("_pb2.py") and not p.name.endswith("_pb2_grpc.py")]


def _keys_aliases(tree: ast.Module) -> set[str]:
    """The names a module binds to the keys module (`from hami_dcu.common.protocol import keys as k`...)."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "hami_dcu.common.protocol":
            aliases |= {a.asname or a.name for a in node.names if a.name == "keys"}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == KEYS_MODULE and a.asname}
    return aliases


def _written_root(target: ast.expr, aliases: set[str]) -> str | None:
    """The keys name an assignment target writes into (`keys.X = `, `keys.X[...] = `,
    `keys.X.y = `), None when it writes elsewhere (`annotations[keys.X] = ` reads keys)."""
    if isinstance(target, ast.Tuple | ast.List):
        return next((r for e in target.elts if (r := _written_root(e, aliases))), None)
    if isinstance(target, ast.Starred):
        return _written_root(target.value, aliases)
    chain = target
    while isinstance(chain, ast.Attribute | ast.Subscript):
        if isinstance(chain, ast.Attribute) and isinstance(chain.value, ast.Name) and chain.value.id in aliases:
            return f"{chain.value.id}.{chain.attr}"
        chain = chain.value
    return None


def _writes_to_keys(tree: ast.Module) -> list[str]:
    aliases = _keys_aliases(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            root = _written_root(target, aliases)
            if root:
                found.append(f"line {node.lineno}: {root} assigned")
        if isinstance(node, ast.Call) and node.args:
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            first = node.args[0]
            if called in ("setattr", "delattr", "setitem", "delitem"):
                if isinstance(first, ast.Name) and first.id in aliases:
                    found.append(f"line {node.lineno}: {called}({first.id}, ...)")
                if isinstance(first, ast.Constant) and isinstance(first.value, str) \
                        and first.value.startswith(KEYS_MODULE + "."):
                    found.append(f"line {node.lineno}: {called}({first.value!r}, ...)")
    return found


def test_no_module_assigns_a_keys_attribute():
    """Every reader of a key sees the same value at any time: nothing (product, harness or
    test) rebinds, deletes or monkeypatches a name of common/protocol/keys.py."""
    offenders = {}
    for path in _python_files():
        found = _writes_to_keys(ast.parse(path.read_text(), str(path)))
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_check_sees_each_way_of_rewriting_keys():
    source = ("from hami_dcu.common.protocol import keys as k\nimport hami_dcu.common.protocol.keys as kk\n"
              "k.NODE_LOCK = 'x'\nkk.NODE_LOCK += 'y'\ndel k.NODE_LOCK\nsetattr(k, 'NODE_LOCK', 'z')\n"
              "monkeypatch.setattr('hami_dcu.common.protocol.keys.NODE_LOCK', 'w')\nk.NAMINGS['x'] = 1\n"
              "a, k.POD_NODE = 1, 2\nannotations[k.NODE_LOCK] = 'read, not written'\n")
    assert len(_writes_to_keys(ast.parse(source))) == 7


def test_keys_holds_no_global_statement_and_no_function_that_binds_module_names():
    tree = ast.parse((ROOT / "common" / "protocol" / "keys.py").read_text())
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Global | ast.Nonlocal)] == []
    # Module-level statements only define: constants, classes, functions, imports.
    for statement in tree.body:
        assert isinstance(statement, ast.Assign | ast.AnnAssign | ast.ClassDef | ast.FunctionDef | ast.Import
                          | ast.ImportFrom | ast.Expr), f"line {statement.lineno}: {type(statement).__name__}"
