"""Command-line access to the AnyCapEval judge's offline parts: render a request, parse replies, length rule.

    capjudge render anycap --caption-type T --output TEXT --reference TEXT [--video PATH] --out DIR
    capjudge parse anycap [--jsonl FILE]          (one reply on stdin, or {"reply": ...} per line)
    capjudge length-rule --caption-type T --output TEXT --reference TEXT [--tolerance 10] [--jsonl FILE]

Output is JSON on stdout. Single-item mode exits 1 when the item fails (parse failure, bad caption type);
batch mode (--jsonl) always exits 0 and writes one result per input line, a failure being an object with an
"error" key (and "line", 1-based, when the input line itself was unusable). Nothing is imported until a
handler runs, so `capjudge --help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterator

from capjudge.judges.anycap.judge import DESCRIPTOR
from capjudge.judges.types import BAD_INPUT
from capjudge.metrics.files.outputs import folder_argument
from capjudge.tasks.cli.bounds import MAX_REPLY_TOKENS, count_argument

if TYPE_CHECKING:
    from capjudge.tasks.cli.command_groups import CommandGroups



class InputLineError(ValueError):
    """An unusable batch input line: reported as {"error": kind, "detail": ..., "line": k}."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def register(groups: "CommandGroups") -> None:
    render = groups.render.add_parser("anycap", help="AnyCapEval style judge: write DIR/request.json")
    render.add_argument("--caption-type", required=True, help="brief, detail, poem, narrative, style (or theme)")
    render.add_argument("--output", required=True, help="the caption to judge")
    render.add_argument("--reference", required=True, help="the reference caption")
    frames = render.add_mutually_exclusive_group()
    frames.add_argument("--video", help="video file; 8 frames are sampled as published")
    frames.add_argument("--frames", nargs="+", metavar="IMAGE", help="pre-extracted frames, in video order")
    render.add_argument(
        "--model", help=f"judge model (default: $MODEL_VERSION, else the published {DESCRIPTOR.published_model})"
    )
    render.add_argument("--temperature", type=float, default=0.7)
    count_argument(render, "--max-tokens", low=1, high=MAX_REPLY_TOKENS, default=4096,
                   help="the request's max_tokens (default 4096)")
    render.add_argument("--out", required=True, type=folder_argument, help="directory for request.json")
    render.set_defaults(func=run_render)

    parse = groups.parse.add_parser("anycap", help="AnyCapEval reply -> {score, reason} or {error}")
    parse.add_argument("--jsonl", metavar="FILE", help='batch: one {"reply": TEXT} per line ("-" = stdin)')
    parse.set_defaults(func=run_parse)

    rule = groups.top.add_parser("length-rule", help="the brief/detail ±tolerance word-count rule for one caption")
    rule.add_argument("--caption-type")
    rule.add_argument("--output")
    rule.add_argument("--reference")
    rule.add_argument("--tolerance", type=_tolerance_argument, default=10, help="integer percent (default 10)")
    rule.add_argument(
        "--jsonl", metavar="FILE", help="batch: one {caption_type, output, reference[, tolerance]} per line"
    )
    rule.set_defaults(func=run_length_rule)


# ------------------------------------------------------------------------------------------------------
# render anycap


def run_render(args: argparse.Namespace) -> int:
    from capjudge.judges.anycap.judge import build_request
    from capjudge.judges.datasets.anycap_video import UnknownCaptionType
    from capjudge.judges.atomic_files import write_replacing
    from capjudge.judges.video import VideoError

    # Read here, not at import: --model, then the environment, then the request's published default.
    from capjudge.judges.client.config import configured_model

    model = args.model or configured_model()
    try:
        request = build_request(
            args.caption_type,
            args.output,
            args.reference,
            video=args.video,
            frames=args.frames,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
        )
    except (UnknownCaptionType, VideoError, ValueError) as error:
        print(f"capjudge render anycap: {error}", file=sys.stderr)
        return 2  # bad input, as for every capjudge command (1 is kept for "the reply did not parse")
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "request.json"
    write_replacing(target, json.dumps(request.body(model), indent=2, ensure_ascii=False) + "\n")
    print(target)
    return 0


# ------------------------------------------------------------------------------------------------------
# parse anycap


def run_parse(args: argparse.Namespace) -> int:
    from capjudge.judges.anycap.parser import parse_anycap_reply
    from capjudge.judges.types import ParseFailure

    def parse_one(reply: str | None) -> dict[str, Any]:
        parsed = parse_anycap_reply(reply)
        if isinstance(parsed, ParseFailure):
            return {"error": parsed.kind}
        return parsed.to_json()

    if args.jsonl is None:
        result = parse_one(sys.stdin.read())
        _emit(result)
        return 1 if "error" in result else 0

    def from_line(record: dict[str, Any]) -> dict[str, Any]:
        if "reply" not in record:
            raise InputLineError(BAD_INPUT, "missing field 'reply'")
        reply = record["reply"]
        if reply is not None and not isinstance(reply, str):
            raise InputLineError(BAD_INPUT, f"'reply' must be a string, got {type(reply).__name__}")
        return parse_one(reply)

    return _run_batch(args.jsonl, from_line)


# ------------------------------------------------------------------------------------------------------
# length-rule


def run_length_rule(args: argparse.Namespace) -> int:
    from capjudge.judges.anycap.length_rule import InvalidTolerance, check_length_tolerance
    from capjudge.judges.datasets.anycap_video import UnknownCaptionType

    if args.jsonl is None:
        missing = [
            flag
            for flag, value in (
                ("--caption-type", args.caption_type),
                ("--output", args.output),
                ("--reference", args.reference),
            )
            if value is None
        ]
        if missing:
            print(f"capjudge length-rule: give {', '.join(missing)} (or --jsonl FILE)", file=sys.stderr)
            return 2
        try:
            check = check_length_tolerance(args.caption_type, args.output, args.reference, args.tolerance)
        except UnknownCaptionType as error:
            _emit({"error": "unknown_caption_type", "detail": str(error)})
            return 1
        _emit(check.to_json())
        return 0

    def from_line(record: dict[str, Any]) -> dict[str, Any]:
        for name in ("caption_type", "output", "reference"):
            if name not in record:
                raise InputLineError(BAD_INPUT, f"missing field {name!r}")
            if not isinstance(record[name], str):
                raise InputLineError(BAD_INPUT, f"field {name!r} must be a string")
        try:
            return check_length_tolerance(
                record["caption_type"], record["output"], record["reference"], record.get("tolerance", args.tolerance)
            ).to_json()
        except UnknownCaptionType as error:
            raise InputLineError("unknown_caption_type", str(error)) from error
        except InvalidTolerance as error:
            raise InputLineError("invalid_tolerance", str(error)) from error

    return _run_batch(args.jsonl, from_line)


def _tolerance_argument(text: str) -> int:
    from capjudge.judges.anycap.length_rule import InvalidTolerance, parse_tolerance

    try:
        return parse_tolerance(text)
    except InvalidTolerance as error:
        raise argparse.ArgumentTypeError(str(error)) from error


# ------------------------------------------------------------------------------------------------------
# batches


def _run_batch(path: str, handle: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """One result per input line, in order; a bad line gives an error result, never a crash."""
    try:
        source = contextlib.nullcontext(sys.stdin.buffer) if path == "-" else open(path, "rb")
    except OSError as error:
        print(f"capjudge: cannot read {path}: {error}", file=sys.stderr)
        return 2
    with source as stream:
        for number, record in _records(stream):
            if isinstance(record, InputLineError):
                _emit({"error": record.kind, "detail": record.detail, "line": number})
                continue
            try:
                _emit(handle(record))
            except InputLineError as error:
                _emit({"error": error.kind, "detail": error.detail, "line": number})
    return 0


def _records(stream: BinaryIO) -> Iterator[tuple[int, dict[str, Any] | InputLineError]]:
    """Each line decoded on its own, so one line of bad UTF-8 is one error result, not a crash."""
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            yield number, InputLineError(BAD_INPUT, f"not UTF-8: {error}")
            continue
        if not line.strip():
            yield number, InputLineError(BAD_INPUT, "blank line")
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            yield number, InputLineError(BAD_INPUT, f"not JSON: {error}")
            continue
        if not isinstance(record, dict):
            yield number, InputLineError(BAD_INPUT, f"expected a JSON object, got {type(record).__name__}")
            continue
        yield number, record


def _emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
