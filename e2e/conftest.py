"""The kind suite's cluster, shared by its modules: device-plugin mode first (test_kind.py),
then DRA mode (test_kind_dra.py), on one cluster created once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hami_dcu.e2e.kindcluster import KindBackend, KindWorld, create_cluster, docker_unavailable, project_image


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
