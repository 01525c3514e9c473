"""Admission warnings about scheduling annotations the scheduler would ignore or refuse (pure).

HAMi ignores a policy value with a word it does not know (the configured default applies)
and leaves a pod with invalid scoring weights, or a `use-<set>type` of only empty entries,
Pending. Both are easy to miss, so the webhook
says so when the pod is created (`kubectl apply` prints admission warnings). Each warning
stays within 120 characters, the length kubectl shows in full.
"""

from __future__ import annotations

from collections.abc import Mapping

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.preferences import (
    CARD_WORDS,
    CARD_WORDS_WITHOUT_EFFECT,
    NODE_WORDS,
    WeightsError,
    names_no_type,
    parse_card_policy,
    parse_node_policy,
    parse_weights,
    unknown_card_words,
)
from hami_dcu.common.protocol.untrusted import shown

WARNING_MAX = 120


def _short(text: str) -> str:
    return text if len(text) <= WARNING_MAX else text[: WARNING_MAX - 3] + "..."


def scheduling_warnings(annotations: Mapping[str, str]) -> list[str]:
    warnings = []
    card = annotations.get(keys.DEVICE_SCHEDULER_POLICY)
    if card is not None:
        policy = parse_card_policy(card)
        if policy is None:
            unknown = ", ".join(f"'{shown(word, 20)}'" for word in unknown_card_words(card)) or "''"
            warnings.append(f"{keys.DEVICE_SCHEDULER_POLICY}: {unknown} unknown, value ignored "
                            f"(words: {', '.join(CARD_WORDS)})")
        else:
            idle = [word for word in policy.words if word in CARD_WORDS_WITHOUT_EFFECT]
            if idle:
                warnings.append(f"{keys.DEVICE_SCHEDULER_POLICY}: {', '.join(idle)} has no effect on DCU cards")
    node = annotations.get(keys.NODE_SCHEDULER_POLICY)
    if node is not None and parse_node_policy(node) is None:
        warnings.append(f"{keys.NODE_SCHEDULER_POLICY}: '{shown(node, 20)}' unknown, value ignored "
                        f"(words: {', '.join(NODE_WORDS)})")
    weights = annotations.get(keys.DEVICE_SCORING_WEIGHTS)
    if weights is not None:
        try:
            parse_weights(weights)
        except WeightsError as exc:
            warnings.append(f"{keys.DEVICE_SCORING_WEIGHTS} invalid, pod stays Pending: {exc}")
    for use_type in sorted({keys.DCU_NAMING.use_type, keys.HCU_NAMING.use_type}):
        if names_no_type(annotations.get(use_type)):
            warnings.append(f"{use_type}: {annotations[use_type][:20]!r} names no card type, so no card matches "
                            "and the pod stays Pending (remove it for any type)")
    return [_short(warning) for warning in warnings]
