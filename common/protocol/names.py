"""Kubernetes object name syntax (apimachinery validation): pods and nodes are DNS-1123
subdomains, namespaces DNS-1123 labels. A name from the network that breaks these rules
names no object; checking it up front turns what would fail deep in an API call (or a
URL-encoding error on a lone surrogate) into a clear refusal. Pure."""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(_LABEL)
_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253


def is_label(name: object) -> bool:
    """A DNS-1123 label: namespaces."""
    return isinstance(name, str) and len(name) <= LABEL_MAX and _LABEL_RE.fullmatch(name) is not None


def is_subdomain(name: object) -> bool:
    """A DNS-1123 subdomain: pods, nodes."""
    return isinstance(name, str) and len(name) <= SUBDOMAIN_MAX and _SUBDOMAIN_RE.fullmatch(name) is not None
