"""hami-dcu beside HAMi v2.10's own code: probes of ours run in HAMi's source tree."""
