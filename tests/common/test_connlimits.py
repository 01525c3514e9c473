"""The connection book (common/io/connlimits.py): who gets a place, who waits parked, who is
pushed out, and when parked sockets give up. Pure: time is passed in."""

import argparse

import pytest

from hami_dcu.common.io.connlimits import (
    EVICTION_GRACE,
    ConnectionBook,
    ConnectionLimits,
    add_connection_arguments,
    connection_limits_from,
)

LIMITS = ConnectionLimits(header_timeout=10, max_connections=4, max_per_client=3)


def fill(book: ConnectionBook, client: str, count: int, now: float = 0.0) -> list:
    slots = []
    for i in range(count):
        moves = book.arrive(client, f"{client}#{i}", now)
        slots += [slot for _, slot in moves.start]
    return slots


def test_sockets_within_the_caps_start_at_once():
    book = ConnectionBook(LIMITS)
    moves = book.arrive("10.0.0.1", "s1", 0.0)
    assert [handle for handle, _ in moves.start] == ["s1"] and not moves.close and not moves.evict
    assert book.open == 1 and book.parked == 0


def test_a_client_at_its_cap_waits_parked_for_its_own_connection_to_end():
    book = ConnectionBook(LIMITS)
    slots = fill(book, "a", 3)
    moves = book.arrive("a", "a#3", 0.0)
    assert not moves.start and book.parked == 1
    # Its own new connections are not pushed out for it, however long they wait.
    assert not book.tick(EVICTION_GRACE * 10).start
    moves = book.release(slots[0], 1.0)
    assert [handle for handle, _ in moves.start] == ["a#3"] and book.parked == 0


def test_a_client_at_its_cap_never_pushes_out_its_own_kept_alive_connection():
    """Its HTTP client may be writing its next request on that connection right now: closed
    under it, the request fails with a reset that Go's client does not retry (a POST)."""
    book = ConnectionBook(LIMITS)
    slots = fill(book, "a", 3)
    book.started(slots[0])
    book.finished(slots[0], 1.0)  # answered, kept alive
    moves = book.arrive("a", "a#3", 1.0 + EVICTION_GRACE)
    assert not moves.evict and not moves.start and book.parked == 1
    assert not book.tick(8.0).evict  # however long it stays kept alive
    moves = book.release(slots[0], 9.0)  # the client closed it: its place goes to the parked one
    assert [h for h, _ in moves.start] == ["a#3"]


def test_a_quiet_client_pushes_out_a_slow_connection_of_the_greediest_client():
    book = ConnectionBook(LIMITS)
    flood = fill(book, "flood", 3) + fill(book, "other", 1)
    assert book.open == 4
    # Too young to push out: the newcomer waits for the grace to pass.
    moves = book.arrive("apiserver", "api", 0.1)
    assert not moves.start and not moves.evict
    assert book.next_tick(0.1) == pytest.approx(EVICTION_GRACE)
    moves = book.tick(EVICTION_GRACE)
    assert moves.evict == [flood[0]] and [h for h, _ in moves.start] == ["api"]


def test_clients_holding_as_many_do_not_push_out_each_other():
    book = ConnectionBook(ConnectionLimits(max_connections=4, max_per_client=4))
    fill(book, "a", 2)
    fill(book, "b", 2)
    moves = book.arrive("b", "b#2", 5.0)  # b holds 2, a holds 2: a swap would only churn
    assert not moves.start and not moves.evict and book.parked == 1


def test_a_connection_being_served_is_never_pushed_out():
    book = ConnectionBook(LIMITS)
    slots = fill(book, "flood", 3) + fill(book, "x", 1)
    for slot in slots:
        book.started(slot)
    moves = book.arrive("apiserver", "api", 100.0)
    assert not moves.start and not moves.evict and book.parked == 1


def test_the_parked_socket_of_the_client_holding_fewest_goes_first():
    book = ConnectionBook(LIMITS)
    slots = fill(book, "flood", 3) + fill(book, "x", 1)
    for slot in slots:
        book.started(slot)
    book.arrive("flood", "flood#late", 1.0)
    book.arrive("apiserver", "api", 2.0)  # later, but holds nothing
    moves = book.release(slots[1], 3.0)
    assert [h for h, _ in moves.start] == ["api"]


def test_parked_sockets_give_up_after_the_header_timeout():
    book = ConnectionBook(LIMITS)
    for slot in fill(book, "a", 3) + fill(book, "b", 1):
        book.started(slot)
    book.arrive("c", "c#0", 0.0)
    assert book.next_tick(0.0) == pytest.approx(LIMITS.header_timeout)
    assert book.tick(LIMITS.header_timeout).close == ["c#0"] and book.parked == 0


def test_too_many_parked_closes_the_oldest_of_the_client_parking_most():
    limits = ConnectionLimits(max_connections=1, max_per_client=1)
    book = ConnectionBook(limits)
    book.started(fill(book, "x", 1)[0])
    for i in range(book.max_parked):
        book.arrive("flood", f"f{i}", 0.0)
    moves = book.arrive("apiserver", "api", 0.1)
    assert moves.close == ["f0"] and book.parked == book.max_parked
    moves = book.arrive("flood", "f-last", 0.2)  # flood parks the most: its own newcomer is closed
    assert "f-last" not in [h for q in book._parked.values() for h, _ in q]


def test_release_is_idempotent():
    book = ConnectionBook(LIMITS)
    (slot,) = fill(book, "a", 1)
    book.release(slot, 1.0)
    book.release(slot, 2.0)
    assert book.open == 0 and not book.per_client


@pytest.mark.parametrize("flags, error", [
    (["--header-timeout", "0"], "expected seconds above 0"),
    (["--max-connections", "0"], "expected at least 1"),
    (["--tls-handshake-timeout", "soon"], "is not a number of seconds"),
])
def test_flags_refuse_nonsense(flags, error, capsys):
    parser = argparse.ArgumentParser()
    add_connection_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(flags)
    assert error in capsys.readouterr().err


def test_flags_become_limits():
    parser = argparse.ArgumentParser()
    add_connection_arguments(parser)
    limits = connection_limits_from(parser.parse_args(["--header-timeout", "3", "--max-connections-per-client",
                                                       "5"]))
    assert limits.header_timeout == 3 and limits.max_per_client == 5 and limits.max_connections == 96
