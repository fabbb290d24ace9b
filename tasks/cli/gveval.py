"""`capjudge render gveval` and `capjudge parse gveval`.

render: writes OUT/request.json (the exact chat.completions body, image inline) and OUT/frames.png (the image
the judge would see, when there is one); makes no request. Model: --model, else $MODEL_VERSION, else the
published model (its descriptor's).

parse: reads one judge reply on stdin and prints {"accuracy", "completeness", "conciseness", "relevance",
"mean"} (text values; exit 0), or {"error": KIND, "dimensions": {dimension: kind}} (exit 1). With
--jsonl FILE: one {"reply": ...} per line in, one result per line out (failures carry "error"), exit 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from capjudge.judges.gveval.judge import DESCRIPTOR, MODES
from capjudge.metrics.files.outputs import folder_argument


def register(groups: Any) -> None:
    render = groups.render.add_parser(
        "gveval", help="G-VEval ACCR video judge: write request.json (+ frames.png) without sending it"
    )
    render.add_argument("--caption", required=True, help="the caption to judge")
    visual = render.add_mutually_exclusive_group()
    visual.add_argument("--video", type=Path, help="video file: 3 frames are sampled as published")
    visual.add_argument("--image", type=Path, help="a ready-made frame image, sent as is")
    render.add_argument("--reference", action="append", default=[], help="a reference caption (repeatable)")
    render.add_argument("--mode", choices=MODES, default="frames", help="evidence given to the judge")
    render.add_argument("--model", help=f"model name (default: $MODEL_VERSION, else the published {DESCRIPTOR.published_model})")
    render.add_argument("--out", required=True, type=folder_argument, help="directory for request.json and frames.png")
    render.set_defaults(func=_render)

    parse = groups.parse.add_parser("gveval", help="G-VEval ACCR reply -> four scores and their mean (JSON)")
    parse.add_argument("--jsonl", type=Path, help='file with one {"reply": ...} per line (default: one reply on stdin)')
    parse.set_defaults(func=_parse)


def _render(args: argparse.Namespace) -> int:
    from capjudge.judges.atomic_files import write_replacing
    from capjudge.judges.gveval.judge import PUBLISHED_MODEL, build_request
    from capjudge.judges.types import ImagePart
    from capjudge.judges.video import VideoError

    from capjudge.judges.client.config import configured_model

    model = args.model or configured_model() or PUBLISHED_MODEL
    try:
        request = build_request(
            args.caption, video=args.video, image=args.image, references=tuple(args.reference), mode=args.mode
        )
    except (VideoError, ValueError) as error:
        print(f"capjudge render gveval: {error}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    body = request.body(model)
    write_replacing(args.out / "request.json", json.dumps(body, ensure_ascii=False, indent=2) + "\n")
    images = [part for part in request.parts if isinstance(part, ImagePart)]
    if images:
        write_replacing(args.out / "frames.png", _as_png(images[0]))
    return 0


def _as_png(part: Any) -> bytes:
    if part.media_type == "image/png":
        return part.data
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.open(io.BytesIO(part.data)).save(buffer, format="PNG")
    return buffer.getvalue()


def _parse(args: argparse.Namespace) -> int:
    if args.jsonl is None:
        output, ok = _result_json(sys.stdin.read())
        print(json.dumps(output, ensure_ascii=False))
        return 0 if ok else 1
    with open(args.jsonl, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                reply = record["reply"]
                if reply is not None and not isinstance(reply, str):
                    raise TypeError(f'"reply" must be a string, got {type(reply).__name__}')
            except (ValueError, KeyError, TypeError) as error:
                output = {"error": "bad_input", "dimensions": {}, "detail": f"line {number}: {error!r}"}
            else:
                output, _ = _result_json(reply)
            print(json.dumps(output, ensure_ascii=False))
    return 0


def _result_json(reply: str | None) -> tuple[dict[str, Any], bool]:
    from capjudge.judges.gveval.parser import score_text
    from capjudge.judges.types import ParseFailure

    result = score_text(reply)
    if isinstance(result, ParseFailure):
        return {"error": result.kind, "dimensions": dict(result.data.get("dimensions", {}))}, False
    return {name: _number(value) for name, value in result.scores().items()}, True


def _number(value: float | None) -> float | int | None:
    """85.0 -> 85 so integer scores print as the judge wrote them; non-integers stay floats."""
    if value is not None and float(value).is_integer():
        return int(value)
    return value
