"""Calling conventions: rewardhub's own, verl's and TRL's, detected once per reward."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..trajectory import chat_of
from ..trajectory import replies_of
from ..trajectory import text_view
from ..types import ADAPTERS
from ..types import sample_name
from ._outcome import short

__all__ = ["ADAPTERS", "FIXED", "CallsOne", "Invoker", "call_many", "check_sample", "copy_field", "group_key",
           "group_name", "make_invoker", "own", "params_of"]

FIELDS = ("prompt", "response", "ground_truth", "data_source", "extra_info")

#: values a reward cannot change, handed over as they are
FIXED = frozenset({str, int, float, bool, type(None), bytes, complex})


def own(value: Any) -> Any:
    """A sample field as one reward call gets it: its own copy of anything it could change (a dict,
    a list of messages), so that a reward that edits what it is given (``extra_info["seen"] = 1``)
    changes neither the caller's rows nor what the next reward sees, on every executor alike (a
    process executor's reward always had a copy: the sample was pickled to reach it)."""
    if type(value) in FIXED:
        return value
    return copy_field(value)


def copy_field(value: Any) -> Any:
    """A copy of a value that is not one of :data:`FIXED`: containers rebuilt, what they hold copied
    likewise; a value that cannot be copied is handed over as it is."""
    t = type(value)
    if t is dict:
        out = value.copy()
        for k, v in out.items():  # values replaced in place: the dict's size does not change
            if type(v) not in FIXED:
                out[k] = copy_field(v)
        return out
    if t is list:
        items = value.copy()
        for j, v in enumerate(items):
            if type(v) not in FIXED:
                items[j] = copy_field(v)
        return items
    try:
        return copy.deepcopy(value)  # a tuple (of lists?), an array, anything else
    except (TypeError, ValueError, RecursionError, copy.Error):  # a value that cannot be copied
        return value


def params_of(fn: Any) -> tuple[set[str], bool]:
    """The names ``fn`` takes by keyword, and whether it takes ``**kwargs`` (as it does when unreadable)."""
    target = fn
    if not (inspect.isfunction(fn) or inspect.ismethod(fn) or isinstance(fn, functools.partial)):
        target = getattr(fn, "__call__", fn)
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return set(), True
    names = {p.name for p in sig.parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    return names, var_kw


def is_async_callable(fn: Any) -> bool:
    base = fn.func if isinstance(fn, functools.partial) else fn
    if inspect.iscoroutinefunction(base):
        return True
    call = getattr(base, "__call__", None)
    return call is not None and not inspect.isfunction(base) and inspect.iscoroutinefunction(call)


@dataclass
class Invoker:
    """Calls one reward with samples, whatever its signature.

    ``kind`` is how rewardhub drives it: ``function`` (one sample per call) or ``batched`` /
    ``group`` (lists per call). ``messages``: it is a trajectory reward (it takes ``messages``: a
    conversation per call, a list of them per batched call; see :mod:`rewardhub.trajectory`). One that
    takes the response too reads both as the sample has them: a text sample's ``messages`` are None.
    """

    fn: Any
    kind: str
    adapter: str
    is_async: bool
    names: set[str]
    var_kw: bool
    messages: bool = False

    def _filter(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.var_kw:
            return kwargs
        return {k: v for k, v in kwargs.items() if k in self.names}

    def _chat(self, sample: Mapping[str, Any]) -> Any:
        if sample.get("messages") is None and ("response" in self.names or "responses" in self.names):
            return None
        return own(chat_of(sample))

    # per sample ---------------------------------------------------------------
    def call_one(self, sample: Mapping[str, Any], kwargs: Mapping[str, Any]) -> Any:
        if self.adapter == "verl":
            call = {"data_source": own(sample.get("data_source")),
                    "solution_str": own(sample.get("response")),
                    "ground_truth": own(sample.get("ground_truth")),
                    "extra_info": own(sample.get("extra_info"))}
        else:
            call = {k: own(sample.get(k)) for k in FIELDS}  # each the call's own copy
        if self.messages:
            call["messages"] = self._chat(sample)
        call.update(kwargs)
        return self.fn(**self._filter(call))

    # lists --------------------------------------------------------------------
    def call_many(self, samples: Sequence[Mapping[str, Any]], kwargs: Mapping[str, Any]) -> Any:
        cols = {k: [own(s.get(k)) for s in samples] for k in FIELDS}
        if self.adapter == "trl":
            # a trajectory's completion is conversational, as TRL's: its messages from the first reply on
            completions = [r if s.get("messages") is None else own(replies_of(s["messages"]))
                           for s, r in zip(samples, cols["response"])]
            call: dict[str, Any] = {"prompts": cols["prompt"], "completions": completions,
                                    "ground_truth": cols["ground_truth"], "data_source": cols["data_source"],
                                    "extra_info": cols["extra_info"]}
            # TRL passes every dataset column as a list keyword; extra_info keys play that role
            for key in {k for s in samples if isinstance(s.get("extra_info"), dict) for k in s["extra_info"]}:
                if key not in call and key not in ("prompts", "completions"):
                    call[key] = [own((s.get("extra_info") or {}).get(key)) for s in samples]
        elif self.adapter == "verl":
            call = {"data_sources": cols["data_source"], "solution_strs": cols["response"],
                    "ground_truths": cols["ground_truth"], "extra_infos": cols["extra_info"]}
        else:
            call = {"prompts": cols["prompt"], "responses": cols["response"],
                    "ground_truths": cols["ground_truth"], "data_sources": cols["data_source"],
                    "extra_infos": cols["extra_info"]}
            if self.messages:
                call["messages"] = [self._chat(s) for s in samples]
        call.update(kwargs)
        return self.fn(**self._filter(call))


def make_invoker(fn: Any, kind: str, adapter: str = "auto", name: str = "?") -> Invoker:
    """Build the :class:`Invoker` for a loaded reward.

    :raises UsageError: for an unknown adapter, or a signature that fits none.
    """
    if adapter not in ADAPTERS:
        raise UsageError(
            f"adapter={adapter!r} for reward {name!r} is not valid\nallowed: {', '.join(ADAPTERS)}"
        )
    names, var_kw = params_of(fn)
    if adapter == "auto":  # by the parameters' names
        adapter = ("verl" if names & {"solution_str", "solution_strs"} else
                   "trl" if "completions" in names and not names & {"response", "responses"} else "rewardhub")
    if adapter == "trl" or (adapter == "verl" and "solution_strs" in names):
        if kind == "function":
            kind = "batched"
    if kind == "model":
        kind = "batched"
    return Invoker(fn=fn, kind=kind, adapter=adapter, is_async=is_async_callable(fn), names=names,
                   var_kw=var_kw, messages=adapter == "rewardhub" and "messages" in names)


def check_sample(s: Any, label: Any) -> dict[str, Any]:
    """The sample as a dict (a trajectory's with its text view: :func:`~rewardhub.trajectory.text_view`);
    a :class:`UsageError` naming it by ``label`` when it is not a mapping with a ``response`` or
    ``messages``."""
    if type(s) is dict and "response" in s:
        return s
    if not isinstance(s, Mapping):
        raise UsageError(f"{sample_name(label)} is a {type(s).__name__}, not a mapping with 'response'")
    if "response" not in s and s.get("messages") is not None:
        return text_view(s, label)
    if "response" not in s:
        raise UsageError(
            f"{sample_name(label)} has no 'response' (keys: {', '.join(sorted(map(str, s))) or 'none'})\n"
            "each sample needs prompt, response, ground_truth, data_source, extra_info (or messages in "
            "place of prompt and response: a trajectory)"
        )
    return dict(s)


def group_key(sample: Mapping[str, Any]) -> str:
    """The key of the prompt group a sample belongs to (a group reward scores a group at once):
    ``extra_info``'s ``group``, ``group_id`` or ``uid`` with the prompt, else the prompt itself.

    The prompt is part of the key even where an id is given: rows of one id that hold different prompts
    are graded as one group per prompt, each against its own prompt (never one row's prompt for all).
    A trajectory with no ``prompt`` field is keyed by its messages before the first assistant turn."""
    key = _group_id(sample)
    prompt = _group_prompt(sample)
    return repr(prompt) if key is None else repr((key[1], prompt))


def group_name(sample: Mapping[str, Any]) -> str:
    """How a message names a sample's group: ``extra_info.uid=3``, or its prompt (cut short)."""
    key = _group_id(sample)
    if key is not None:
        return f"extra_info.{key[0]}={key[1]!r}"
    return f"the group of prompt {short(_group_prompt(sample), 60)}"


def _group_id(sample: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``(field, id)`` of the first of ``extra_info``'s ``group``, ``group_id``, ``uid`` that is set."""
    extra = sample.get("extra_info")
    info: Mapping[str, Any] = extra if isinstance(extra, Mapping) else {}
    return next(((k, info[k]) for k in ("group", "group_id", "uid") if info.get(k) is not None), None)


def _group_prompt(sample: Mapping[str, Any]) -> Any:
    """The prompt a group shares: ``prompt``, or a trajectory's messages before its first assistant turn
    (what :func:`~rewardhub.trajectory.text_view` makes its prompt)."""
    if "prompt" in sample or not isinstance(sample.get("messages"), list):
        return sample.get("prompt")
    head = []
    for m in sample["messages"]:
        if isinstance(m, Mapping) and m.get("role") == "assistant":
            break
        head.append(m)
    return head


class CallsOne(Sequence[Callable[[], Any]]):
    """The calls of ``inv`` on the samples ``idx`` of the batch, made (each maybe retried) later;
    each is built when it is asked for, so a large batch makes no list of them."""

    def __init__(self, inv: Invoker, batch: list[Any], idx: list[int], kw: dict[str, Any]) -> None:
        self._inv, self._batch, self._idx, self._kw = inv, batch, idx, kw

    def __len__(self) -> int:
        return len(self._idx)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        inv, sample, kw = self._inv, self._batch[self._idx[k]], self._kw
        return lambda: inv.call_one(sample, kw)


def call_many(inv: Invoker, batch: list[Any], unit: list[int], kw: dict[str, Any]) -> Callable[[], Any]:
    """A call of ``inv`` on the samples of ``unit``; each try gets a list of its own."""
    return lambda: inv.call_many([batch[i] for i in unit], kw)
