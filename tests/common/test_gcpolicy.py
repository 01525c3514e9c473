"""The extender's GC policy: after a list, garbage cycles are collected and the survivors
frozen (full collections then skip the cache); young collections run less often."""

from __future__ import annotations

import gc
import weakref

from hami_dcu.common.io import gcpolicy


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_settle_collects_cycles_then_freezes_what_survives():
    garbage, kept = Cycle(), Cycle()
    gone = weakref.ref(garbage)
    del garbage
    try:
        gcpolicy.settle("test")
        assert gone() is None  # collected, not frozen for ever
        assert gc.get_freeze_count() > 0
        assert not any(obj is kept for obj in gc.get_objects())  # out of the collector's sight
    finally:
        gc.unfreeze()
    assert any(obj is kept for obj in gc.get_objects())


def test_tune_raises_only_the_young_threshold():
    saved = gc.get_threshold()
    try:
        gcpolicy.tune()
        assert gc.get_threshold() == (gcpolicy.YOUNG_THRESHOLD, saved[1], saved[2])
    finally:
        gc.set_threshold(*saved)
