"""``rewardhub grader validate FILE...`` and ``rewardhub grader run FILE --item ITEM --sample SAMPLE``: OpenAI
RFT graders checked and tried locally (the answers of OpenAI's ``graders/validate`` and ``graders/run``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import UsageError
from ._common import dump_json

NAME = "grader"
HELP = "validate an OpenAI RFT grader file, or run it on one item and sample (graders/run's answer)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="grader_command", metavar="{validate,run}")
    v = sub.add_parser("validate", help="check grader files: exit 1 with one line per problem")
    v.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="a grader JSON, a {grader: ...} body or an RFT job file (method.reinforcement.grader)",
    )
    r = sub.add_parser("run", help="grade one sample: prints reward, sub_rewards, metadata.errors as JSON")
    r.add_argument("file", metavar="FILE", help="the grader file")
    r.add_argument(
        "--item",
        metavar="ITEM.json",
        help="the dataset row ({{ item.x }}), JSON (default: the "
        "file's item, for a graders/run request body)",
    )
    r.add_argument(
        "--sample",
        metavar="SAMPLE.json",
        help="the model's output: {output_text, output_json?, output_tools?, choices?}, or a JSON string "
        "(graders/run's model_sample; default: the file's model_sample)",
    )
    r.add_argument("--base-url", help="model graders' endpoint (default: OPENAI_BASE_URL)")
    r.add_argument("--api-key-env", help="the variable holding its key (default: OPENAI_API_KEY)")


def _json_arg(value: str, flag: str) -> Any:
    """A JSON file's content, or the argument itself when it is JSON text."""
    text = value
    if not value.lstrip().startswith(("{", "[", '"')):
        try:
            with open(value, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise UsageError(f"{flag} {value!r}: cannot be read: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} {value!r}: not JSON ({exc.msg}, line {exc.lineno})") from None


def _validate(files: list[str]) -> int:
    from ..graders import grader_problems
    from ..graders import read_grader_file

    bad = 0
    for path in files:
        try:
            problems = grader_problems(read_grader_file(path))
        except UsageError as exc:
            problems = [str(exc).splitlines()[0]]
        bad += bool(problems)
        for p in problems:
            print(f"{path}: {p}")
        if not problems:
            print(f"{path}: ok")
    return 1 if bad else 0


def run(args: argparse.Namespace) -> int:
    if args.grader_command == "validate":
        return _validate(args.files)
    if args.grader_command != "run":
        raise UsageError(
            "rewardhub grader needs a command: validate FILE... or run FILE --item ITEM --sample SAMPLE"
        )
    from ..graders import GraderEndpoint as Endpoint
    from ..graders import read_grader_file
    from ..graders import run_answer

    body = _json_arg(args.file, "FILE") if args.file.endswith(".json") else {}
    body = body if isinstance(body, dict) else {}
    item = _json_arg(args.item, "--item") if args.item else body.get("item", {})
    if args.sample:
        sample = (
            _json_arg(args.sample, "--sample")
            if args.sample.lstrip().startswith(("{", '"')) or args.sample.endswith(".json")
            else args.sample
        )
    elif "model_sample" in body:
        sample = body["model_sample"]
    else:
        raise UsageError(
            "rewardhub grader run needs --sample (the file holds no model_sample)\n"
            'e.g. --sample \'{"output_text": "Paris"}\' or --sample sample.json'
        )
    if isinstance(sample, str):
        sample = {"output_text": sample}
    if not isinstance(item, dict) or not isinstance(sample, dict):
        raise UsageError(
            "--item is a JSON object, --sample a JSON object or string, "
            'e.g. --sample \'{"output_text": "Paris"}\''
        )
    answer = run_answer(
        read_grader_file(args.file),
        item,
        sample,
        Endpoint(base_url=args.base_url, api_key_env=args.api_key_env),
    )
    dump_json(answer)
    return 1 if any(answer["metadata"]["errors"].values()) else 0
