"""How long a client may take and how many connections it may hold, for every HTTP server of
ours (the webhook, the extender's listeners, the metrics ports): the settings, their flags,
and the book that decides which connection to admit and which to drop (pure, no I/O; the
listener in common/io/guardedsite.py applies its decisions).

Why: a connection that trickles its request headers (or never finishes its TLS handshake)
was held as long as the client wished, each with its TLS buffers (256 KiB in asyncio), so a
few thousand of them grew the extender by 585 MiB (issue 21). Now:
* a client has `header_timeout` from the end of the handshake (or from the first byte of a
  further request on a kept-alive connection) to send a request's headers, `body_timeout`
  for its body, `tls_handshake_timeout` for the handshake;
* at most `max_connections` are open (TLS buffers and all), `max_per_client` from one
  address. Every accepted socket is first *parked*: held as a bare socket (no TLS, no
  buffers) until it can have a slot. A parked socket gets one when the caps allow, or by
  pushing out a connection that has waited `EVICTION_GRACE` or longer for a request (never
  one being served, never a younger one: a real client sends its request within
  milliseconds of connecting). Parked sockets of the client holding the fewest connections
  go first, so a flood from some addresses cannot delay the API server's connections; a
  burst of the API server's own waits parked for a moment instead of being refused. A
  parked socket waits at most `header_timeout`; at most `PARKED_PER_SLOT` per slot are
  parked, beyond that the oldest of the client parking the most is closed. A client at its
  own cap pushes out nothing: it waits for one of its own connections to end. Its kept-alive
  connections are not idle to it: its HTTP client may write its next request on one at any
  moment, and a request written on a connection we have just closed fails ("connection reset
  by peer", "broken pipe") where Go's client does not retry it (a POST: every review, every
  /filter and /bind). Pushing them out made kube-apiserver refuse pods with a 500 in bursts.
"""

from __future__ import annotations

import argparse
from collections import Counter, deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hami_dcu.common.io.flagtypes import positive_int, positive_seconds

# Go's HTTP client (kube-apiserver, kube-scheduler) closes its idle connections after 90 s:
# keeping ours a little longer lets the client, not us, close them (no request ever races
# our close). An idle connection still yields its place to a new one when the caps are reached.
IDLE_TIMEOUT = 120.0
# Seconds a connection waiting for a request is safe from being pushed out: a client that
# connects for a reason sends its request at once.
EVICTION_GRACE = 0.25
PARKED_PER_SLOT = 4


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float = 10.0  # seconds to send a request's headers
    body_timeout: float = 30.0  # seconds to send its body (kube-apiserver waits 30 s at most for a webhook)
    tls_handshake_timeout: float = 10.0
    # A TLS connection costs about 280 KiB (asyncio's 256 KiB buffer, OpenSSL's state): 96 of
    # them stay near 26 MiB. Each review takes about a millisecond, so 96 at once is a
    # thousand reviews a second; a burst beyond that waits parked for a moment.
    max_connections: int = 96
    max_per_client: int = 48
    idle_timeout: float = IDLE_TIMEOUT

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "tls_handshake_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be above 0, not {getattr(self, name)}")
        if self.max_connections < 1 or self.max_per_client < 1:
            raise ValueError("connection caps must be at least 1")


DEFAULT_LIMITS = ConnectionLimits()


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every command serving HTTP takes (chart values `httpLimits.*`)."""
    d = DEFAULT_LIMITS
    group = parser.add_argument_group("connection limits (every HTTP port of this process)")
    group.add_argument("--header-timeout", type=positive_seconds, default=d.header_timeout,
                       help="seconds a client has to send a request's headers (default %(default)s)")
    group.add_argument("--body-timeout", type=positive_seconds, default=d.body_timeout,
                       help="seconds a client has to send a request's body (default %(default)s)")
    group.add_argument("--tls-handshake-timeout", type=positive_seconds, default=d.tls_handshake_timeout,
                       help="seconds a client has to finish the TLS handshake (default %(default)s)")
    group.add_argument("--max-connections", type=positive_int, default=d.max_connections,
                       help="open connections per port (default %(default)s)")
    group.add_argument("--max-connections-per-client", type=positive_int, default=d.max_per_client,
                       help="open connections per port from one client address (default %(default)s)")


def connection_limits_from(args: argparse.Namespace) -> ConnectionLimits:
    return ConnectionLimits(header_timeout=args.header_timeout, body_timeout=args.body_timeout,
                            tls_handshake_timeout=args.tls_handshake_timeout,
                            max_connections=args.max_connections, max_per_client=args.max_connections_per_client)


H = TypeVar("H", bound=Hashable)  # what the listener parks: an accepted socket


@dataclass(eq=False)
class Slot:
    """One open connection, as the book sees it."""

    client: str
    since: float  # when it began waiting for a request (its start, or its last answer)
    served: bool = False  # has sent at least one request
    busy: bool = False  # a request is being served: never pushed out
    closed: bool = False


@dataclass
class Moves(Generic[H]):
    """What the listener does after a change: start TLS/HTTP on these parked sockets (with
    their slots), close these parked sockets, abort these connections."""

    start: list[tuple[H, Slot]] = field(default_factory=list)
    close: list[H] = field(default_factory=list)
    evict: list[Slot] = field(default_factory=list)


@dataclass
class ConnectionBook(Generic[H]):
    """Who holds the connections of one port, and who waits for one. Every change happens on
    the event loop's thread, so no lock is needed; time is passed in."""

    limits: ConnectionLimits = DEFAULT_LIMITS
    per_client: Counter[str] = field(default_factory=Counter)
    open: int = 0
    # Waiting for a request, oldest first (dicts keep insertion order): those that never sent
    # one, then kept-alive ones between requests.
    _fresh: dict[Slot, None] = field(default_factory=dict)
    _idle: dict[Slot, None] = field(default_factory=dict)
    _parked: dict[str, deque[tuple[H, float]]] = field(default_factory=dict)
    parked: int = 0

    @property
    def max_parked(self) -> int:
        return self.limits.max_connections * PARKED_PER_SLOT

    # --- events -----------------------------------------------------------------------------

    def arrive(self, client: str, handle: H, now: float) -> Moves[H]:
        """A socket was accepted from `client`."""
        moves: Moves[H] = Moves()
        if self.parked >= self.max_parked:
            crowded = max(self._parked, key=lambda c: len(self._parked[c]))
            if len(self._parked[crowded]) >= len(self._parked.get(client, ())) + 1:
                moves.close.append(self._unpark(crowded)[0])
            else:
                moves.close.append(handle)  # this client parks the most already
                return self._dispatch(now, moves)
        self._parked.setdefault(client, deque()).append((handle, now))
        self.parked += 1
        return self._dispatch(now, moves)

    def started(self, slot: Slot) -> None:
        """A request's headers arrived: the slot is being served."""
        if slot.closed:
            return
        self._fresh.pop(slot, None)
        self._idle.pop(slot, None)
        slot.served = slot.busy = True

    def finished(self, slot: Slot, now: float) -> None:
        """The request was answered: the slot waits for the next one (kept alive)."""
        if slot.closed:
            return
        slot.busy = False
        slot.since = now
        self._idle.pop(slot, None)
        self._idle[slot] = None

    def release(self, slot: Slot, now: float) -> Moves[H]:
        """The connection is gone (or pushed out): its place goes to a parked socket. Idempotent."""
        self._drop(slot)
        return self._dispatch(now, Moves())

    def tick(self, now: float) -> Moves[H]:
        """Time passed: parked sockets may have expired, waiting connections may have gone stale."""
        return self._dispatch(now, Moves())

    def drain(self) -> list[H]:
        """Every parked socket, unparked (the port is closing)."""
        handles = [handle for queue in self._parked.values() for handle, _ in queue]
        self._parked.clear()
        self.parked = 0
        return handles

    def next_tick(self, now: float) -> float | None:
        """When `tick` could next change something (None: only a new event can): a parked
        socket expiring, or a waiting connection becoming old enough to push out."""
        if not self.parked:
            return None
        times = [queue[0][1] + self.limits.header_timeout for queue in self._parked.values()]
        times += [slot.since + EVICTION_GRACE for waiting in (self._fresh, self._idle) for slot in waiting
                  if slot.since + EVICTION_GRACE > now]
        return min(times)

    # --- decisions --------------------------------------------------------------------------

    def _dispatch(self, now: float, moves: Moves[H]) -> Moves[H]:
        self._expire(now, moves)
        blocked: set[str] = set()
        while len(blocked) < len(self._parked):
            # The client holding the fewest connections first (ties: whose socket waits longest).
            client = min((c for c in self._parked if c not in blocked),
                         key=lambda c: (self.per_client[c], self._parked[c][0][1]))
            if self.per_client[client] >= self.limits.max_per_client:
                blocked.add(client)  # it waits for its own connections (module docstring)
                continue
            if self.open >= self.limits.max_connections:
                victim = self._stale(now, holding=self.per_client[client])
                if victim is None:
                    break  # nothing to push out: the next release or tick tries again
                self._drop(victim)
                moves.evict.append(victim)
            handle, _ = self._unpark(client)
            slot = Slot(client, since=now)
            self.open += 1
            self.per_client[client] += 1
            self._fresh[slot] = None
            moves.start.append((handle, slot))
        return moves

    def _expire(self, now: float, moves: Moves[H]) -> None:
        for client in list(self._parked):
            queue = self._parked[client]
            while queue and now - queue[0][1] >= self.limits.header_timeout:
                moves.close.append(self._unpark(client)[0])

    def _unpark(self, client: str) -> tuple[H, float]:
        queue = self._parked[client]
        entry = queue.popleft()
        if not queue:
            del self._parked[client]
        self.parked -= 1
        return entry

    def _stale(self, now: float, holding: int) -> Slot | None:
        """The connection to push out for a client `holding` so many, when every place is
        taken: one waiting for a request for EVICTION_GRACE or longer, of the client holding
        the most connections among those waiting, those that never sent a request first,
        oldest first; and only when that client holds at least two more (a swap between
        equals would only make the flood's connections push out each other, each new one a
        TLS handshake for this process to compute)."""
        # Never a client holding fewer connections than another that waits: a burst of young
        # connections from a flood must not make a real client's slow handshake the victim.
        greediest = max((slot.client for waiting in (self._fresh, self._idle) for slot in waiting),
                        key=lambda c: self.per_client[c], default=None)
        if greediest is None or self.per_client[greediest] < holding + 2:
            return None
        for waiting in (self._fresh, self._idle):
            for slot in waiting:
                if slot.client == greediest and now - slot.since >= EVICTION_GRACE:
                    return slot
        return None

    def _drop(self, slot: Slot) -> None:
        if slot.closed:
            return
        slot.closed = True
        self._fresh.pop(slot, None)
        self._idle.pop(slot, None)
        self.open -= 1
        self.per_client[slot.client] -= 1
        if self.per_client[slot.client] <= 0:
            del self.per_client[slot.client]
