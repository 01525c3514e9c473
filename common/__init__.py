"""Shared language of hami-dcu: keys, codecs, request parsing, Kubernetes access, node lock."""
