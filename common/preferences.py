"""The scheduling preferences a pod states in annotations, parsed as HAMi parses them (pure).

* `hami.io/gpu-scheduler-policy`: a word or a comma chain of `binpack`, `spread`, `numa`,
  `mutex`, `topology-aware`. Words are trimmed and compared exactly; a value with any other
  word (or an empty one) is not a policy, and HAMi then keeps the configured default.
* `hami.io/node-scheduler-policy`: one word, `binpack` or `spread`, same rules.
* `hami.io/device-scoring-weights`: `slot=<int>,core=<int>,memory=<int>`, all three keys,
  each >= 0, at least one > 0. HAMi makes a pod with an invalid value unschedulable.

* `hygon.com/use-<set>type`: of its rules only one lives here, the value HAMi matches no
  card with (`names_no_type`).

The scheduler reads these to place the pod; the webhook reads them to warn at admission
about a value that would be ignored or refused. Both import them from here, so they agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hami_dcu.common.errors import HamiDcuError
from hami_dcu.common.untrusted import shown

BINPACK = "binpack"
SPREAD = "spread"
NUMA = "numa"
MUTEX = "mutex"
TOPOLOGY_AWARE = "topology-aware"
NODE_WORDS = (BINPACK, SPREAD)
CARD_WORDS = (BINPACK, SPREAD, NUMA, MUTEX, TOPOLOGY_AWARE)
# Words HAMi knows that mean nothing for DCU cards: accepted, but the webhook says so.
CARD_WORDS_WITHOUT_EFFECT = (TOPOLOGY_AWARE,)

WEIGHT_KEYS = ("slot", "core", "memory")
_WEIGHT_VALUE = re.compile(r"[0-9]{1,9}")  # a billion is far past any useful weight


@dataclass(frozen=True, slots=True)
class CardPolicy:
    """A valid card policy value, split into its words (in the order written)."""

    words: tuple[str, ...]
    # HAMi's NumaBind (`nvidia.com/numa-bind` on the pod): the NUMA node is the first sort key.
    numa_first: bool = False

    @property
    def chained(self) -> bool:
        # HAMi takes the chain path for any value with a comma, and for "numa" alone.
        return len(self.words) > 1 or self.words == (NUMA,)

    @property
    def mutex(self) -> bool:
        """Only idle cards may be taken."""
        return MUTEX in self.words

    @property
    def numa(self) -> bool:
        """A multi-card container must get its cards from one NUMA node (our addition)."""
        return NUMA in self.words

    def __str__(self) -> str:
        return ",".join(self.words) + (" (numa-bind)" if self.numa_first else "")


def parse_card_policy(value: str | None) -> CardPolicy | None:
    """The policy `value` names, None when it is empty or names a word HAMi does not know."""
    if value is None or not value.strip():
        return None
    words = tuple(word.strip() for word in value.split(","))
    if any(word not in CARD_WORDS for word in words):
        return None
    return CardPolicy(words)


# strconv.ParseBool's spellings of true: HAMi reads `nvidia.com/numa-bind` with it.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def numa_bind(value: str | None) -> bool:
    """HAMi's NumaBind: the annotation parses as a Go boolean and is true. Anything else
    (absent, "false", "yes") is no NumaBind, as in HAMi, which ignores a parse error."""
    return value is not None and value in _GO_TRUE


def unknown_card_words(value: str) -> list[str]:
    """The words of `value` that make it no policy (empty words shown as '')."""
    return [word.strip() for word in value.split(",") if word.strip() not in CARD_WORDS]


def names_no_type(use_type: str | None) -> bool:
    """A `use-<set>type` value of only empty entries (",,", " , "): HAMi matches no card with
    it. An empty or blank value is no constraint."""
    if not use_type or not use_type.strip():
        return False
    return not any(t.strip() for t in use_type.split(","))


def parse_node_policy(value: str | None) -> str | None:
    """The node policy `value` names (one word, trimmed, exact), else None."""
    if value is None:
        return None
    word = value.strip()
    return word if word in NODE_WORDS else None


@dataclass(frozen=True, slots=True)
class Weights:
    """Per-term weights of the card score."""

    slot: int = 1
    core: int = 1
    memory: int = 1


DEFAULT_WEIGHTS = Weights()


class WeightsError(HamiDcuError, ValueError):
    """A scoring-weights value HAMi refuses; the message says what to write."""


def parse_weights(value: str) -> Weights:
    """`slot=1,core=1,memory=3` as Weights; raises WeightsError naming the problem."""
    seen: dict[str, int] = {}
    for part in value.split(","):
        key, equals, number = (piece.strip() for piece in part.partition("="))
        if not equals or key not in WEIGHT_KEYS:
            raise WeightsError(f"'{shown(part.strip(), 40)}' is not one of slot=, core=, memory=")
        if key in seen:
            raise WeightsError(f"{key} is given twice")
        if not _WEIGHT_VALUE.fullmatch(number):
            raise WeightsError(f"{key}={shown(number, 20)} is not a whole number from 0 to 999999999")
        seen[key] = int(number)
    missing = [key for key in WEIGHT_KEYS if key not in seen]
    if missing:
        raise WeightsError(f"{', '.join(missing)} missing: all of slot, core and memory are required")
    if not any(seen.values()):
        raise WeightsError("all three weights are 0: at least one must be above 0")
    return Weights(slot=seen["slot"], core=seen["core"], memory=seen["memory"])
