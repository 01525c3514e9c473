"""Shared by the e2e suites: the kind suite's cluster, made once per session (device-plugin
mode first, test_kind.py, then DRA mode, test_kind_dra.py); and for the real-cluster suite,
whose first run builds kube-apiserver, kube-scheduler and etcd (10-20 minutes cold), the
build's progress lines on the terminal as they come, past pytest's output capture, so the
run does not look hung (no -s needed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kindcluster import KindBackend, KindWorld, create_cluster, docker_unavailable, project_image
from e2e.realcluster import upstream


@pytest.fixture(scope="session")
def kind(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindBackend]:
    reason = docker_unavailable()
    if reason:
        pytest.skip(reason)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def progress(line: str) -> None:
        """Straight to the terminal, past pytest's capture: a first run builds for minutes."""
        if reporter is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    world = KindWorld.build(progress)
    image = project_image(world, progress)
    keep = bool(request.config.getoption("keep_cluster"))
    cluster = create_cluster(world, tmp_path_factory.mktemp("kind"), progress, reuse=keep)
    try:
        cluster.load_docker_image(image)
        backend = KindBackend(cluster, world, image)
        backend.prepare_nodes()
        yield backend
    finally:
        if not keep:
            cluster.delete()


def pytest_configure(config: pytest.Config) -> None:
    plugins = config.pluginmanager

    def to_terminal(line: str) -> None:
        # Looked up per line: the terminal reporter may register after this plugin.
        reporter = plugins.getplugin("terminalreporter")
        capture = plugins.getplugin("capturemanager")
        if reporter is None:
            upstream.to_stderr(line)
        elif capture is None:
            reporter.write_line(line)
        else:
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)

    upstream.announce = to_terminal
