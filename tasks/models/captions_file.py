"""`captions_file`: an lmms-eval model that returns captions that already exist instead of generating them.

Use it to judge a caption set made elsewhere (another harness, an API batch job, a paper's released outputs)
with the same tasks, judges and leaderboard as a live model::

    lmms-eval --model captions_file --model_args path=preds.jsonl,model_name=my-model --tasks gveval ...
    lmms-eval --model captions_file --model_args field=candidate --tasks msvd_eval ...

Model arguments (`--model_args`):

- `path=FILE`: the captions. JSONL (one object per line), or JSON: a list of objects, or one object keyed by
  item id whose values are the caption strings (or objects holding them).
- `key=FIELD`: the document field that identifies an item (see "Which id" below).
- `caption_field=NAME`: the object field holding the caption; default: the first of
  `caption`, `prediction`, `pred`, `response`, `output`, `text` that the object has.
- `field=NAME`: instead of a file, return the document's own field `NAME` (e.g. MSVD-Eval's human-rated
  `candidate`, so the judge scores exactly the captions the humans rated).
- `model_name=NAME`: how the run is named. lmms-eval names the output subfolder (and the results JSON's
  `model_name`) after the first of `model_name=` or `path=` in the model arguments; without `model_name`, a
  path gives a folder named after its last two path components and the leaderboard shows the file's stem.

Which id: the document field is `key=` if given; else the task's own declaration, `metadata: {id_field: ...}`
in its YAML (lmms-eval copies a task's metadata into every request); else the first of `id`, `video_id`,
`vid` that the document has. A file object is matched on that same field name, falling back to `id`,
`video_id`, `vid` in that order. Ids are compared as strings, so `7` in the file matches 7 in the data.

Every document of the run must have a caption. The check runs at the start of `generate_until`, over all
requests, before any caption is returned: one `MissingCaptionsError` names the missing ids (the first 10 and
the count), and no judge call is ever made for a partial caption set.

Inside lmms-eval's command line every such error (a missing or unreadable file, duplicate ids, a missing
caption, an unknown argument) is one line and exit status 2: lmms-eval would print a traceback, write nothing
and exit 0, and `lmms-eval ... && capjudge leaderboard` would carry on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmms_eval.api.model import lmms

from capjudge.judges.jsonl import read_json, read_objects
from capjudge.judges.run_outcome import refused_inside_lmms_eval

MODEL_ID = "captions_file"
# The document fields tried, in order, when neither `key=` nor the task names the id field.
DEFAULT_ID_FIELDS: tuple[str, ...] = ("id", "video_id", "vid")
# The object fields tried, in order, for the caption text when `caption_field=` is not given.
DEFAULT_CAPTION_FIELDS: tuple[str, ...] = ("caption", "prediction", "pred", "response", "output", "text")
# Where a task declares its id field: `metadata: {id_field: ...}` in the task YAML.
TASK_ID_FIELD_KEY = "id_field"
# lmms-eval passes these to every model; they mean nothing for captions read from a file.
_HARNESS_ARGUMENTS = frozenset({"batch_size", "max_batch_size", "device"})
_SHOWN_IDS = 10


class CaptionsFileError(ValueError):
    """The caption source cannot serve this run; the message names the file, item or field."""


class MissingCaptionsError(CaptionsFileError):
    """Documents of the run have no caption. Raised once, before any caption is returned."""

    def __init__(self, source: str, id_field: str, missing: Sequence[str], n_requested: int):
        self.missing = tuple(missing)
        shown = ", ".join(self.missing[:_SHOWN_IDS])
        more = f" (first {_SHOWN_IDS} shown)" if len(self.missing) > _SHOWN_IDS else ""
        super().__init__(
            f"{source}: {len(self.missing)} of {n_requested} documents have no caption "
            f"(matched on document field {id_field!r}): {shown}{more}"
        )


@dataclass(frozen=True)
class CaptionSet:
    """Captions by item id, read from one file."""

    path: Path
    captions: Mapping[str, str]
    record_id_field: str | None  # the object field the ids came from; None for an object keyed by id

    @property
    def name(self) -> str:
        return self.path.stem


class _NotOneJsonDocument(CaptionsFileError):
    """A .json captions file that does not decode as one document (it may still be JSON lines)."""


def load_caption_set(path: str | Path, id_field: str | None = None, caption_field: str | None = None) -> CaptionSet:
    """Read a JSONL or JSON caption file. `id_field` is the record field to key on (default: `id`,
    `video_id`, `vid`, whichever each record has first)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CaptionsFileError(f"captions file {path}: no such file")
    what = f"captions file {path}"
    if path.suffix.lower() == ".jsonl":
        records: Any = read_objects(path, CaptionsFileError, what, unique_keys=True)
    else:
        try:  # one JSON document: an id (or a field) twice in it is refused, whatever its line count
            records = read_json(path, CaptionsFileError, what, unique_keys=True, top_level_key="item id",
                                not_json=_NotOneJsonDocument)
        except _NotOneJsonDocument as not_json:
            # A .json file that is really JSON lines is common enough to accept.
            try:
                records = read_objects(path, CaptionsFileError, what, unique_keys=True)
            except CaptionsFileError:
                raise not_json from None
    captions: dict[str, str] = {}
    used_fields: set[str] = set()
    if isinstance(records, dict):
        for item_id, value in records.items():
            caption = value if isinstance(value, str) else _caption_of(value, caption_field, path, f"key {item_id!r}")
            captions[str(item_id)] = caption
        return CaptionSet(path, captions, None)
    if not isinstance(records, list):
        raise CaptionsFileError(f"captions file {path}: expected a list of objects or an object keyed by id")
    duplicates: list[str] = []
    for position, record in enumerate(records):
        where = f"record {position + 1}"
        if not isinstance(record, dict):
            raise CaptionsFileError(f"captions file {path}, {where}: expected an object, got {type(record).__name__}")
        field = _first_present(record, (id_field,) if id_field else (), DEFAULT_ID_FIELDS)
        if field is None:
            tried = ", ".join(repr(f) for f in ((id_field,) if id_field else ()) + DEFAULT_ID_FIELDS)
            raise CaptionsFileError(f"captions file {path}, {where}: no id field (tried {tried})")
        used_fields.add(field)
        item_id = str(record[field])
        if item_id in captions:
            duplicates.append(item_id)
        captions[item_id] = _caption_of(record, caption_field, path, where)
    if duplicates:
        raise CaptionsFileError(
            f"captions file {path}: {len(duplicates)} ids appear more than once: {', '.join(duplicates[:_SHOWN_IDS])}"
        )
    return CaptionSet(path, captions, "/".join(sorted(used_fields)) or None)


def _first_present(record: Mapping[str, Any], *candidates: Iterable[str]) -> str | None:
    for group in candidates:
        for name in group:
            if name in record and record[name] is not None:
                return name
    return None


def _caption_of(record: Any, caption_field: str | None, path: Path, where: str) -> str:
    if not isinstance(record, dict):
        raise CaptionsFileError(f"captions file {path}, {where}: expected a caption string or an object")
    field = _first_present(record, (caption_field,) if caption_field else DEFAULT_CAPTION_FIELDS)
    if field is None:
        wanted = repr(caption_field) if caption_field else ", ".join(repr(f) for f in DEFAULT_CAPTION_FIELDS)
        raise CaptionsFileError(f"captions file {path}, {where}: no caption field (looked for {wanted})")
    caption = record[field]
    if not isinstance(caption, str):
        raise CaptionsFileError(f"captions file {path}, {where}: caption field {field!r} is {type(caption).__name__}, not text")
    return caption


def resolve_id_field(doc: Mapping[str, Any], explicit: str | None, declared: str | None) -> str:
    """The document field that identifies the item: explicit `key=`, then the task's `id_field`, then the
    first of `id`, `video_id`, `vid` present. Raises naming what was tried."""
    chosen = explicit or declared
    if chosen:
        if chosen not in doc:
            origin = "key=" if explicit else f"the task's metadata.{TASK_ID_FIELD_KEY}"
            raise CaptionsFileError(f"documents have no field {chosen!r} (named by {origin}); fields: {sorted(doc)}")
        return chosen
    for name in DEFAULT_ID_FIELDS:
        if name in doc:
            return name
    raise CaptionsFileError(
        f"cannot tell which document field identifies an item: none of {list(DEFAULT_ID_FIELDS)} is present "
        f"(fields: {sorted(doc)}); pass key=FIELD or declare metadata.{TASK_ID_FIELD_KEY} in the task YAML"
    )


class CaptionsFile(lmms):
    """Returns a caption per document from a file (`path=`) or from a document field (`field=`)."""

    is_simple = True

    def __init__(
        self,
        path: str | None = None,
        key: str | None = None,
        field: str | None = None,
        caption_field: str | None = None,
        model_name: str | None = None,
        **harness_arguments: Any,
    ) -> None:
        super().__init__()
        with refused_inside_lmms_eval(CaptionsFileError):
            self._configure(path, key, field, caption_field, model_name, harness_arguments)

    def _configure(self, path: str | None, key: str | None, field: str | None, caption_field: str | None,
                   model_name: str | None, harness_arguments: Mapping[str, Any]) -> None:
        unknown = sorted(set(harness_arguments) - _HARNESS_ARGUMENTS)
        if unknown:
            raise CaptionsFileError(
                f"captions_file: unknown model argument(s) {unknown}; "
                "known: path, key, caption_field, field, model_name"
            )
        if (path is None) == (field is None):
            raise CaptionsFileError("captions_file: give exactly one of path=FILE (captions file) or field=NAME (document field)")
        self.key = str(key) if key is not None else None
        self.field = str(field) if field is not None else None
        self.caption_set = load_caption_set(str(path), self.key, caption_field) if path is not None else None
        # lmms-eval parses numeric-looking argument values; a model named "7" is still the string "7".
        self.model_name = str(model_name) if model_name is not None else self.default_name()

    def default_name(self) -> str:
        """What identifies the caption set: the file's stem, or `field-NAME`."""
        if self.caption_set is not None:
            return self.caption_set.name
        return f"field-{self.field}"

    @property
    def device(self) -> str:
        """Where lmms-eval puts its multi-process bookkeeping tensors (the counts it gathers across ranks
        under `accelerate launch`): the CPU, since this model computes nothing."""
        return "cpu"

    @property
    def source(self) -> str:
        if self.caption_set is not None:
            return f"captions file {self.caption_set.path}"
        return f"document field {self.field!r}"

    # -- lmms-eval interface ---------------------------------------------------------------------------

    def generate_until(self, requests: Sequence[Any]) -> list[str]:
        # Resolve every caption first: a run with a gap fails here, before the judge sees a single caption.
        with refused_inside_lmms_eval(CaptionsFileError):
            captions = self.captions_for(requests)
        for request, caption in zip(requests, captions):
            self.cache_hook.add_partial("generate_until", (request.args[0], request.args[1]), caption)
        return captions

    def generate_until_multi_round(self, requests: Sequence[Any]) -> list[str]:
        return self.generate_until(requests)

    def loglikelihood(self, requests: Sequence[Any]) -> list[tuple[float, bool]]:
        raise NotImplementedError("captions_file only returns captions (generate_until tasks); it has no likelihoods")

    # -- lookup ----------------------------------------------------------------------------------------

    def captions_for(self, requests: Sequence[Any]) -> list[str]:
        """One caption per request, in order; raises before returning anything if any is missing."""
        captions: list[str | None] = []
        missing: list[str] = []
        id_fields: list[str] = []
        for request in requests:
            doc = self._document(request)
            if self.field is not None:
                value = doc.get(self.field)
                if not isinstance(value, str):
                    missing.append(self._describe(request, doc))
                    captions.append(None)
                else:
                    captions.append(value)
                continue
            assert self.caption_set is not None
            id_field = resolve_id_field(doc, self.key, _declared_id_field(request))
            id_fields.append(id_field)
            caption = self.caption_set.captions.get(str(doc[id_field]))
            if caption is None:
                missing.append(str(doc[id_field]))
            captions.append(caption)
        if missing:
            matched_on = self.field if self.field is not None else "/".join(dict.fromkeys(id_fields))
            raise MissingCaptionsError(self.source, matched_on, missing, len(requests))
        return [caption for caption in captions if caption is not None]

    def _document(self, request: Any) -> Mapping[str, Any]:
        # Simple-model requests carry (context, gen_kwargs, doc_to_visual, doc_id, task, split).
        doc_id, task, split = request.args[3], request.args[4], request.args[5]
        try:
            return self.task_dict[task][split][doc_id]
        except (KeyError, IndexError) as error:
            raise CaptionsFileError(f"captions_file: document {doc_id} of task {task!r} split {split!r} not found ({error})") from None

    def _describe(self, request: Any, doc: Mapping[str, Any]) -> str:
        """How a document is named in an error: its id if it has one, else task and position."""
        for name in (self.key, _declared_id_field(request), *DEFAULT_ID_FIELDS):
            if name and name in doc:
                return str(doc[name])
        return f"{request.args[4]}#{request.args[3]}"


def _declared_id_field(request: Any) -> str | None:
    metadata = getattr(request, "metadata", None) or {}
    declared = metadata.get(TASK_ID_FIELD_KEY)
    return str(declared) if declared else None


def model_manifest() -> Any:
    """The entry point lmms-eval's model registry loads (group `lmms_eval.models`)."""
    from lmms_eval.models.registry_v2 import ModelManifest

    return ModelManifest(model_id=MODEL_ID, simple_class_path=f"{__name__}.CaptionsFile")
