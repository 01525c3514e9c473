"""Kubernetes name syntax, as apimachinery validates it."""

import pytest

from hami_dcu.common.protocol.names import is_label, is_subdomain


@pytest.mark.parametrize("name", ["a", "n1", "web-0", "0", "a" * 63])
def test_labels(name):
    assert is_label(name) and is_subdomain(name)


@pytest.mark.parametrize("name", ["node.example.com", "a" * 63 + "." + "b" * 63, "a" * 253])
def test_subdomains_that_are_not_labels(name):
    assert is_subdomain(name) and not is_label(name)


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a_b", "../x", "a/b", "p\ud800", "a..b", ".a", "a" * 254,
                                  5, None, ["a"], "a\n"])
def test_neither(name):
    assert not is_subdomain(name) and not is_label(name)
