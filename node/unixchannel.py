"""A gRPC channel to a kubelet socket that connects on its own.

gRPC shares connections between channels to one target with the same options (its global
subchannel pool). After a kubelet restart, a fresh channel would then share the connection of
a channel still alive (or closed but not yet collected, as under load) and fail at once with
that connection's last error until its reconnect backoff ends. A channel of its own pool
connects when asked."""

from __future__ import annotations

import os

import grpc


def unix_channel(socket: str | os.PathLike[str], *options: tuple[str, int]) -> grpc.Channel:
    """An insecure channel to the unix socket at path `socket`, in a subchannel pool of its own."""
    return grpc.insecure_channel(f"unix://{socket}", options=[*options, ("grpc.use_local_subchannel_pool", 1)])
