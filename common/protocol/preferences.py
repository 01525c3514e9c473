"""The scheduling preferences a pod states in annotations, parsed as HAMi parses them (pure).

* `hami.io/gpu-scheduler-policy`: a word or a comma chain of `binpack`, `spread`, `numa`,
  `mutex`, `topology-aware`. Words are trimmed and compared exactly; a value with any other
  word (or an empty one) is not a policy, and HAMi then keeps the configured default.
* `hami.io/node-scheduler-policy`: one word, `binpack` or `spread`, same rules.
* `hami.io/device-scoring-weights`: `slot=<int>,core=<int>,memory=<int>`, all three keys,
  each >= 0, at least one > 0. HAMi makes a pod with an invalid value unschedulable.

* `hygon.com/use-<set>type`: of its rules only one lives here, the value HAMi matches no
  card with (`names_no_type`).
* the card selection lists (`use-`/`nouse-<set>type`, `use-`/`nouse-gpuuuid`): split as HAMi
  splits them, and bounded (`selection_entries`: at most 64 entries of 128 characters).

The scheduler reads these to place the pod; the webhook reads them to warn at admission
about a value that would be ignored or refused. Both import them from here, so they agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.errors import HamiDcuError
from hami_dcu.common.protocol.untrusted import shown

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


# The card selection lists (`hygon.com/use-<set>type`, `nouse-<set>type`, `use-gpuuuid`,
# `nouse-gpuuuid`, keys.CARD_SELECTION_KEYS) name card models or card ids, comma-separated.
# Hygon sells a handful of models and a node holds 8 cards (16 at most), so a real list names a
# few: 64 entries still pin a pod to eight whole 8-card nodes. A card id is the set's prefix and
# a serial (about 20 characters), a model "DCU-K100_AI": 128 characters leave room for any.
# Every entry is matched against every card the extender weighs, per scheduling attempt, in the
# process that also serves the webhook: unbounded, a 240 KiB list cost 0.4 s of CPU there
# (issue 35). So the webhook refuses a longer list, and the extender's parser fails such a pod
# (one created before the webhook refused them, or past it) on every node.
SELECTION_MAX_ENTRIES = 64
SELECTION_MAX_ENTRY_CHARS = 128
_SHOWN_ENTRY = 24  # what an error shows of an entry too long: enough to find it, never all of it


class SelectionError(HamiDcuError, ValueError):
    """A card selection list longer than hami-dcu reads; the message names the annotation,
    the limit and what the value has."""


def selection_entries(key: str, value: str | None) -> tuple[str, ...]:
    """The entries of the card selection list `value` of annotation `key`: split on commas,
    trimmed, empty ones dropped (as HAMi reads them). Raises SelectionError for more than
    SELECTION_MAX_ENTRIES entries or an entry longer than SELECTION_MAX_ENTRY_CHARS: one pass
    over the value (at most the API server's 256 KiB of annotations), before any card is weighed."""
    if not value:
        return ()
    entries = tuple(t for t in (piece.strip() for piece in value.split(",")) if t)
    if len(entries) > SELECTION_MAX_ENTRIES:
        raise SelectionError(
            f"annotation {key} lists {len(entries)} entries, at most {SELECTION_MAX_ENTRIES} are allowed: "
            "name the few card models or card ids the pod may use (or must avoid)")
    for entry in entries:
        if len(entry) > SELECTION_MAX_ENTRY_CHARS:
            raise SelectionError(
                f"annotation {key} has an entry of {len(entry)} characters ({shown(entry, _SHOWN_ENTRY)}), at most "
                f"{SELECTION_MAX_ENTRY_CHARS} are allowed per entry: a card model or a card id is far shorter")
    return entries


def selection_problem(annotations: Mapping[str, object]) -> str | None:
    """Why the pod's card selection lists, in either naming set's keys, cannot be read; None
    when they can (the webhook's check, with the parser's words)."""
    for key in keys.CARD_SELECTION_KEYS:
        value = annotations.get(key)
        if isinstance(value, str):
            try:
                selection_entries(key, value)
            except SelectionError as exc:
                return str(exc)
    return None


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
