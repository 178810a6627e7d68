"""``llm_judge_pairwise``: a judge compares two answers at a time, inside a GRPO group.

``mode: pairwise`` compares each response with the reference answer (``against: reference``) or with each
peer of its group (``against: peers``); ``swap: true`` asks both orders, and two orders that disagree are a
tie, never a win. ``mode: tournament`` plays a ``pattern`` over the group (``all_pairs_both_ways``: n(n-1)
calls, ``all_pairs_one_way``: n(n-1)/2 with the first position alternating, ``vs_reference``: 2n with swap,
else n). A response's reward is its points over its games: a win 1, a tie 0.5, a loss 0 (against the
reference: 1, 0.5 or 0). A call that fails fails the responses of its pair with the failure's kind (never
a loss or a tie); the others keep their rewards. A verdict asked before in this process is not asked again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ...decorator import reward
from ...errors import UsageError
from ..judge import EXPENSIVE
from ..judge import block
from ..judge import fill
from ..judge import prompt_text
from ..judge import render_messages
from ..judge import text_of
from ._call import Endpoint
from ._call import JudgeFailure
from ._call import Tally
from ._call import ask
from ._call import fail
from ._call import no_verdict
from ._call import remember
from .vote import check_voting
from .vote import vote

if TYPE_CHECKING:
    import asyncio

__all__ = ["DEFAULT_PAIR_TEMPLATE", "PATTERNS", "llm_judge_pairwise", "plan_pairs"]

DEFAULT_PAIR_TEMPLATE = (
    "Two answers to the PROMPT follow, ANSWER A and ANSWER B. Decide which answers the PROMPT better "
    "(correct first, then complete and clear); length alone is no merit.\n\nPROMPT:\n{prompt}\n\n"
    "ANSWER A:\n{a}\n\nANSWER B:\n{b}\n\n"
    "Reply with one line: `Winner: A`, `Winner: B`, or `Winner: tie`.")

PATTERNS = ("all_pairs_both_ways", "all_pairs_one_way", "vs_reference")
_VERDICT = re.compile(r"(?i)winner\s*[:=]\s*\**\s*(A|B|tie)\b")
REF = -1  # the reference answer's index in a pair


def plan_pairs(n: int, pattern: str, swap: bool = True) -> list[tuple[int, int]]:
    """The ordered pairs (first, second) a pattern asks for a group of ``n`` (``REF``: the reference)."""
    if pattern == "all_pairs_both_ways":
        return [(i, j) for i in range(n) for j in range(n) if i != j]
    if pattern == "all_pairs_one_way":  # the first position alternates, so no response is always first
        return [(i, j) if (i + j) % 2 else (j, i) for i in range(n) for j in range(i + 1, n)]
    if pattern == "vs_reference":
        return [p for i in range(n) for p in ([(i, REF), (REF, i)] if swap else [(i, REF)])]
    raise UsageError(f"llm_judge_pairwise pattern={pattern!r} is not valid\nallowed: {', '.join(PATTERNS)}")


def winner(text: str) -> str:
    """``A``, ``B`` or ``tie`` from a reply (its last ``Winner:`` line)."""
    found = _VERDICT.findall(text)
    if not found:
        raise no_verdict(text, "verdict (Winner: A, B or tie)")
    v = found[-1]
    return "tie" if v.lower() == "tie" else v.upper()


async def _game(user: str, key: Any, ep: Endpoint, tally: Tally, samples: int, aggregate: str) -> str:
    """One ordered comparison (``samples`` asks, their verdicts voted): ``A``, ``B`` or ``tie``."""
    import asyncio

    async def one(k: int) -> str:
        reply = await ask(user, ep, tally, cache_key=[key, k])
        try:
            v = winner(reply.text)
        except JudgeFailure as exc:
            raise fail(tally, exc) from None
        remember(reply)
        return v

    if samples == 1:
        return await one(0)
    got = await asyncio.gather(*(one(k) for k in range(samples)))
    points = vote([{"A": 1.0, "tie": 0.5, "B": 0.0}[v] for v in got], aggregate)
    return "A" if points > 0.5 else "B" if points < 0.5 else "tie"


def _settings(mode: str, against: str, pattern: str | None, swap: bool) -> str:
    if mode == "pairwise":
        if against not in ("reference", "peers"):
            raise UsageError(f"llm_judge_pairwise against={against!r} is not valid\n"
                             "allowed: reference, peers")
        if against == "reference":
            return "vs_reference"
        return "all_pairs_both_ways" if swap else "all_pairs_one_way"
    if mode == "tournament":
        return pattern or "all_pairs_both_ways"
    raise UsageError(f"llm_judge_pairwise mode={mode!r} is not valid\nallowed: pairwise, tournament")


@reward(name="llm_judge_pairwise", kind="group", timeout_s=600, max_concurrency=8, capabilities=(EXPENSIVE,))
async def llm_judge_pairwise(*, prompts: Sequence[Any], responses: Sequence[str], base_url: str, model: str,
                             mode: str = "pairwise", against: str = "reference", swap: bool = True,
                             pattern: str | None = None, template: str = DEFAULT_PAIR_TEMPLATE,
                             samples: int = 1, aggregate: str = "majority",
                             max_calls_per_group: int | None = None,
                             messages: Sequence[Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """Each response's points over its games, in [0, 1] (see the module's docstring).

    Kwargs: ``mode`` (pairwise | tournament), ``against`` (reference | peers), ``swap``, ``pattern``
    (tournament: all_pairs_both_ways | all_pairs_one_way | vs_reference), ``samples`` and ``aggregate``
    (mean | median | majority: each game asked ``samples`` times), ``max_calls_per_group`` (a group whose
    pattern needs more calls fails, before any call), ``max_in_flight`` (requests in flight to the
    endpoint, per process), and ``llm_judge``'s endpoint kwargs (base_url, model, api_key_env, max_rpm,
    max_tpm, retries, backoff_s, request_timeout_s, temperature, max_tokens).
    """
    import asyncio

    plan_pattern = _settings(mode, against, pattern, swap)
    check_voting("llm_judge_pairwise", samples, aggregate, template, ("a", "b"))
    ep = Endpoint.of({**kwargs, "base_url": base_url, "model": model}, max_tokens=32)
    n = len(responses)
    texts = [text_of(r) if text_of(r) or not messages or not messages[i] else render_messages(messages[i])
             for i, r in enumerate(responses)]
    gt = (kwargs.get("ground_truths") or [None])[0]
    pairs = plan_pairs(n, plan_pattern, swap)
    tallies = [Tally() for _ in range(n)]
    calls = len(pairs) * samples
    if max_calls_per_group is not None and calls > max_calls_per_group:
        message = (f"judge call failed (max_calls): this group of {n} needs {calls} judge calls "
                   f"({plan_pattern}, samples {samples}) and max_calls_per_group is {max_calls_per_group}")
        return [{"score": None, "failed": message, **Tally().extra()} for _ in range(n)]
    if REF in {x for p in pairs for x in p} and gt in (None, ""):
        return [{"score": None, "failed": "judge call failed (no_reference): pairwise against the reference "
                 "needs the sample's ground_truth", **Tally().extra()} for _ in range(n)]
    prompt = block("PROMPT", prompt_text(prompts[0]))
    ref = text_of(gt)

    asked: dict[tuple[str, str], asyncio.Task[str]] = {}  # one call for two pairs of the same texts

    async def play(first: int, second: int) -> tuple[int, int, str | JudgeFailure]:
        a, b = (ref if first == REF else texts[first]), (ref if second == REF else texts[second])
        if (a, b) not in asked:
            user = fill(template, "llm_judge_pairwise", prompt=prompt, a=block("A", a), b=block("B", b))
            tally = tallies[first if first != REF else second]
            asked[a, b] = asyncio.ensure_future(_game(user, ["pair", a, b], ep, tally, samples, aggregate))
        try:
            return first, second, await asked[a, b]
        except JudgeFailure as exc:
            return first, second, exc

    games = await asyncio.gather(*(play(a, b) for a, b in pairs))
    points = [[0.0, 0] for _ in range(n)]  # points, games
    failed: dict[int, str] = {}
    # both orders of a pair: their verdicts for the same response must agree, else the pair is a tie
    by_pair: dict[tuple[int, int], list[float]] = {}
    for first, second, v in games:
        if isinstance(v, JudgeFailure):
            for x in (first, second):
                if x != REF:
                    failed.setdefault(x, f"{v} (pair {_who(first)} vs {_who(second)})")
            continue
        lo, hi = sorted((first, second))
        won = 0.5 if v == "tie" else float((v == "A") == (first == lo))  # lo's points in this game
        by_pair.setdefault((lo, hi), []).append(won)
    swaps = [[0, 0] for _ in range(n)]  # pairs asked both ways, and those whose verdict flipped
    for (lo, hi), wins in by_pair.items():
        if any(x in failed for x in (lo, hi) if x != REF):
            continue
        lo_points = wins[0] if len(set(wins)) == 1 else 0.5
        if len(wins) == 2:  # both orders asked: did the order change the verdict?
            swaps[lo if lo != REF else hi][0] += 1
            swaps[lo if lo != REF else hi][1] += wins[0] != wins[1]
        for x, p in ((lo, lo_points), (hi, 1.0 - lo_points)):
            if x != REF:
                points[x][0] += p
                points[x][1] += 1
    out: list[dict[str, Any]] = []
    for i in range(n):
        extra = tallies[i].extra()
        if i in failed:
            out.append({"score": None, "failed": failed[i], **extra})
        else:
            got, played = points[i]
            out.append({"score": got / played if played else 0.5, "judge_games": played,
                        "judge_swap_pairs": swaps[i][0], "judge_swap_flips": swaps[i][1], **extra})
    return out


def _who(i: int) -> str:
    return "reference" if i == REF else f"response {i + 1}"
