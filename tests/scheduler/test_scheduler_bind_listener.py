"""The `--bind` listener's caps and transport (scheduler/command.py): kube-scheduler is its one
client and holds a connection for every bind under way, so the per-client cap every other port
has must not apply there."""

import pytest

from hami_dcu.cli.main import build_parser
from hami_dcu.common.io.connlimits import ConnectionBook, connection_limits_from
from hami_dcu.scheduler.command import SCHEDULER_MAX_CONNECTIONS, bind_listener


def parse(*argv: str):
    parser, _ = build_parser()
    return parser.parse_args(["scheduler", *argv])


def busy_connections_admitted(book: ConnectionBook, client: str, count: int) -> int:
    """Open `count` connections from `client`, each serving a request that has not ended
    (a bind waiting for its node): how many got a place at once."""
    admitted = 0
    for i in range(count):
        for _handle, slot in book.arrive(client, f"{client}#{i}", 0.0).start:
            book.started(slot)
            admitted += 1
    return admitted


def test_under_the_common_caps_kube_schedulers_49th_call_waits_for_a_bind_to_end():
    """The stall this listener's caps remove: with 48 binds waiting for their nodes, the next
    /filter of kube-scheduler found no connection, so a burst was placed only as fast as binds
    ended (23 pods/s at 1,000 kwok nodes, in step with the binds)."""
    common = connection_limits_from(parse())
    assert busy_connections_admitted(ConnectionBook(common), "127.0.0.1", 60) == common.max_per_client == 48


def test_the_bind_listener_takes_kube_schedulers_binds_up_to_its_own_cap():
    args = parse()
    limits = bind_listener(args, connection_limits_from(args))
    assert limits.max_per_client == limits.max_connections == SCHEDULER_MAX_CONNECTIONS
    assert busy_connections_admitted(ConnectionBook(limits), "127.0.0.1", 500) == SCHEDULER_MAX_CONNECTIONS == 128
    smaller = parse("--scheduler-max-connections", "100")
    assert busy_connections_admitted(ConnectionBook(bind_listener(smaller, connection_limits_from(smaller))),
                                     "127.0.0.1", 150) == 100
    # The other ports keep theirs.
    assert connection_limits_from(args).max_per_client == 48


@pytest.mark.parametrize("bind", ["127.0.0.1:8443", "[::1]:8443", "localhost:8443"])
def test_plain_bind_is_allowed_on_loopback(bind):
    args = parse("--bind", bind, "--plain-bind")
    assert bind_listener(args, connection_limits_from(args)).max_per_client == SCHEDULER_MAX_CONNECTIONS


@pytest.mark.parametrize("bind", ["0.0.0.0:8443", "10.0.0.5:8443", "scheduler.example:8443"])
def test_plain_bind_is_refused_anywhere_another_machine_could_reach(bind):
    args = parse("--bind", bind, "--plain-bind")
    with pytest.raises(ValueError, match="not a loopback address"):
        bind_listener(args, connection_limits_from(args))


def test_plain_bind_cannot_serve_the_webhook():
    args = parse("--plain-bind", "--serve-webhook")
    with pytest.raises(ValueError, match="webhooks over TLS only"):
        bind_listener(args, connection_limits_from(args))


def test_a_bad_cap_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        parse("--scheduler-max-connections", "0")
    assert "expected at least 1" in capsys.readouterr().err
