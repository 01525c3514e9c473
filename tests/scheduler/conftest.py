"""A running scheduler service against the local API server."""

from collections.abc import AsyncIterator

import pytest
from scheduler_helpers import dcu_settings

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.service import SchedulerService

FAST_BIND = BindSettings(lock_wait=1.5, settle_wait=1.0)


@pytest.fixture
async def service(kube) -> AsyncIterator[SchedulerService]:
    akube = AsyncKube(kube)
    svc = SchedulerService(akube, dcu_settings(bind=FAST_BIND))
    svc.start()
    assert await svc.wait_synced(10)
    yield svc
    await svc.stop()
    akube.close()
    # Close the watch connections now, so the API server does not wait for them at teardown.
    kube.api_client.rest_client.pool_manager.clear()


@pytest.fixture
async def client(service, aiohttp_client):
    return await aiohttp_client(build_app(service, manage_lifecycle=False))
