"""bench/realcluster.py --steps: a node's cycle from the watches' stamps."""

from e2e.realcluster.cyclesteps import ALLOCATED, BOUND, LOCK, UNLOCK, Stamp, steps


def _cycle(node: str, pod: str, at: float) -> list[Stamp]:
    return [Stamp(at, LOCK, node, pod), Stamp(at + 0.05, BOUND, node, pod), Stamp(at + 0.25, ALLOCATED, node, pod),
            Stamp(at + 0.26, UNLOCK, node)]


def test_each_step_is_measured_from_its_own_pods_stamps_on_its_own_node():
    stamps = _cycle("n1", "a", 0.0) + _cycle("n1", "b", 0.36) + _cycle("n2", "c", 0.1)
    result = steps(reversed(stamps))  # order of arrival does not matter
    as_ms = {step: [round(v * 1000) for v in values] for step, values in result.samples.items()}
    assert sorted(as_ms[("lock", "bound")]) == [50, 50, 50]
    assert sorted(as_ms[("bound", "allocated")]) == [200, 200, 200]
    assert sorted(as_ms[("allocated", "released")]) == [10, 10, 10]
    assert as_ms[("released", "next lock")] == [100]  # only a's lock has a successor on n1; c's node has none
    assert as_ms[("lock", "next lock")] == [360]
    assert result.busy_max == 2


def test_a_lock_replaced_by_the_next_without_a_release_ends_at_the_replacement():
    stamps = [Stamp(0.0, LOCK, "n1", "a"), Stamp(0.1, BOUND, "n1", "a"), Stamp(0.3, ALLOCATED, "n1", "a"),
              Stamp(0.5, LOCK, "n1", "b")]
    result = steps(stamps)
    assert [round(v, 3) for v in result.samples[("allocated", "released")]] == [0.2]
    assert [round(v, 3) for v in result.samples[("lock", "next lock")]] == [0.5]
