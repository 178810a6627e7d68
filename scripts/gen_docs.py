"""Write the generated pages of the docs site: the CLI reference (from the parsers) and the config keys
(from the schemas' dataclasses). `make docs` runs it before building; tests/test_docs.py fails when a
checked-in page differs from what this writes, or when a key has no description.

    python scripts/gen_docs.py [--check]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import inspect
import io
import os
import re
import sys
import textwrap
import typing
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: descriptions of the keys whose dataclass field has no ``#:`` comment of its own
NOTES = DOCS / "config-notes.txt"


def _field_comments(cls: type) -> dict[str, str]:
    """A dataclass's ``#:`` comments, by field: the one on the field's line, or the lines right above."""
    src = inspect.getsource(cls)
    lines = textwrap.dedent(src).splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(textwrap.dedent(src)).body[0].body:  # type: ignore[attr-defined]
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        line = lines[node.lineno - 1]
        text = line.split("#:", 1)[1].strip() if "#:" in line else ""
        above: list[str] = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            above.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        out[node.target.id] = " ".join([*above, text]).strip()
    return out


def _type_name(tp: typing.Any) -> str:
    text = getattr(tp, "__name__", None) if not typing.get_args(tp) else None
    return text or str(tp).replace("typing.", "").replace("collections.abc.", "")


def _default(f: dataclasses.Field) -> str:  # type: ignore[type-arg]
    if f.default is not dataclasses.MISSING:
        return repr(f.default) if f.default is not None else "unset"
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return "{}" if isinstance(value, typing.Mapping) and not dataclasses.is_dataclass(value) else (
            "()" if isinstance(value, tuple) else "(section)")
    return "required"


def keys(prefix: str, cls: type) -> list[tuple[str, str, str, str]]:
    """(key, type, default, comment) for every field of ``cls``, nested sections walked."""
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    rows: list[tuple[str, str, str, str]] = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        tp = hints[f.name]
        inner = [a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
        key = f"{prefix}.{f.name}"
        if typing.get_origin(tp) is tuple and inner:  # a list of sections (reward.rewards)
            rows.append((key, "list", _default(f), comments.get(f.name, "")))
            rows += keys(key + "[]", inner[0])
        elif inner:
            rows.append((key, "section", _default(f), comments.get(f.name, "")))
            rows += keys(key, inner[0])
        else:
            rows.append((key, _type_name(tp), _default(f), comments.get(f.name, "")))
    return rows


def config_sections() -> list[tuple[str, type]]:
    from rewardhub.config.schema import RewardConfig

    sections: list[tuple[str, type]] = [("reward", RewardConfig)]
    with contextlib.suppress(ImportError):  # the trainer's sections, where the trainer is installed
        from rewardhub_trainer.config import TrainConfig

        hints = typing.get_type_hints(TrainConfig)
        sections += [(f.name, hints[f.name]) for f in dataclasses.fields(TrainConfig) if f.name != "reward"]
    return sections


def read_notes() -> dict[str, str]:
    """``KEY: TEXT`` lines of :data:`NOTES` (``#`` starts a comment line)."""
    lines = [ln for ln in NOTES.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return dict(ln.split(": ", 1) for ln in lines)


def _choices() -> dict[str, tuple[typing.Any, ...]]:
    """``reward.<path>`` -> the allowed values the schema's one table names."""
    from rewardhub.config.schema import CHOICES

    return {"reward." + k.replace(".*.", "[]."): v for k, v in CHOICES.items()}


def config_page() -> str:
    notes = read_notes()
    choices = _choices()
    out = [
        "# Config keys",
        "",
        "Every key of every section, generated from the schemas (`scripts/gen_docs.py`): its type, its",
        "default and what it does. The `reward:` section is the core's; `trainer`, `model`, `rollout`,",
        "`data` and `resources` come with the trainer package. `reward.rewards[]` is one reward term. How",
        "the keys work together: [Config](config.md), [Execution policies](execution.md),",
        "[Training](training.md).",
        "",
    ]
    for name, cls in config_sections():
        out += [f"## `{name}`", "", "| key | type | default | what it does |", "|---|---|---|---|"]
        for key, tp, default, comment in keys(name, cls):
            text = notes.get(key) or comment
            if key in choices:
                text += "; one of " + ", ".join(f"`{c}`" for c in choices[key] if c is not None)
            text = text.replace("|", "\\|")
            out.append(f"| `{key}` | {tp.replace('|', 'or')} | `{default}` | {text} |")
        out.append("")
    return "\n".join(out)


def cli_page() -> str:
    from rewardhub.cli import build_parser

    os.environ["COLUMNS"] = "100"
    parser = build_parser()
    out = ["# CLI reference", "", "Generated from the parsers (`scripts/gen_docs.py`): each `--help`.",
           ""]
    out += ["## `rewardhub`", "", "```text", parser.format_help().rstrip(), "```", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sorted(sub.choices.items()):
        out += [f"## `rewardhub {name}`", "", "```text", p.format_help().rstrip(), "```", ""]
    return "\n".join(out)


#: the entry-point groups rewardhub reads, and what a package puts in each
GROUPS = {
    "rewardhub": "a pluggy plugin module (its `rewardhub_*` hooks below are called)",
    "rewardhub.rewards": "one reward function (`name = module:function`); read, not imported, by `list`",
    "rewardhub.tasks": "a task: rows and the reward terms that score them (`rewardhub tasks`)",
    "rewardhub.graders": "a grader file as a reward by name (`stem = package.module:stem`: `stem.json`)",
    "rewardhub.commands": "a CLI command module (`NAME`, `HELP`, `add_arguments`, `run`): the trainer's "
    "`train`",
    "rewardhub.config_owners": "the owner of a config section (its keys, its legacy-key migration)",
    "verl.plugins": "(verl's own group) rewardhub's reward manager, registered when verl is imported",
}


def hooks_page() -> str:
    import rewardhub.hookspecs as specs

    out = ["# Plugin hooks and entry points", "",
           "A package extends rewardhub through entry points (no import of rewardhub needed for a reward),",
           "or a pluggy plugin module whose hooks rewardhub calls. Generated from `rewardhub/hookspecs.py`.",
           "", "## Entry-point groups", "", "| group | what an entry point names |", "|---|---|"]
    out += [f"| `{g}` | {text} |" for g, text in GROUPS.items()]
    out += [""]
    for name, fn in inspect.getmembers(specs, inspect.isfunction):
        if name.startswith("rewardhub_"):
            sig = re.sub(r"'|collections\.abc\.|typing\.", "", str(inspect.signature(fn)))
            doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", (inspect.getdoc(fn) or "").replace("``", "`"))
            text, _, example = doc.partition("Example::")
            example, _, added = example.partition(".. versionadded::")
            code = textwrap.dedent(example).strip()
            doc = f"{text}Example:\n\n```python\n{code}\n```\n\nAdded in {added.strip()}."
            out += [f"## `{name}`", "", f"`{name}{sig}`", "", doc, ""]
    return "\n".join(out)


PAGES = {"cli-reference.md": cli_page, "config-reference.md": config_page, "hooks.md": hooks_page}


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for page, make in PAGES.items():
        with contextlib.redirect_stderr(io.StringIO()):
            text = make() + "\n"
        path = DOCS / page
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(page)
        else:
            path.write_text(text)
    if stale:
        print(f"ERROR: docs/{', docs/'.join(stale)} out of date: run `make docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
