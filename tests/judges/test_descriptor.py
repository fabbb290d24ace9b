"""The judge descriptor: the frame geometry as data renders the very bytes each judge sends, and the facts a
record logs read back into the same descriptor (a run stays readable without the judge's code)."""

from __future__ import annotations

import json

import pytest

from capjudge.judges.descriptor import DescriptorError, FrameGeometry, JudgeDescriptor
from capjudge.judges.record import RecordError, ReplyFields
from tests.support.videos import make_video


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("descriptor") / "clip.mp4", n_frames=48)


def test_gveval_strip_geometry_renders_the_image_gveval_sends(video):
    from capjudge.judges.gveval.judge import build_request

    sent = [part for part in build_request("a caption", video=video).parts if not isinstance(part, str)]
    rendered = FrameGeometry(sample_points=4, shown=3, layout="strip", image_format="PNG").render(video)
    assert [(p.data, p.media_type) for p in rendered] == [(p.data, p.media_type) for p in sent]
    assert len(sent) == 1 and sent[0].media_type == "image/png"


def test_anycap_geometry_renders_the_images_anycap_sends(video):
    from capjudge.judges.anycap.judge import JPEG_QUALITY, build_request

    sent = [part for part in build_request("brief", "a caption", "a reference", video=video).parts if not isinstance(part, str)]
    rendered = FrameGeometry(sample_points=8, jpeg_quality=JPEG_QUALITY).render(video)
    assert [p.data for p in rendered] == [p.data for p in sent]
    assert len(sent) == 8 and {p.media_type for p in sent} == {"image/jpeg"}


def test_a_geometry_that_cannot_be_is_refused():
    with pytest.raises(DescriptorError, match="5 shown of 4"):
        FrameGeometry(sample_points=4, shown=5)
    with pytest.raises(DescriptorError, match="strip is one PNG"):
        FrameGeometry(sample_points=4, layout="strip", image_format="JPEG")


def test_facts_round_trip_through_json_and_name_what_is_missing():
    descriptor = JudgeDescriptor(
        name="toy", version="toy/1", published_model="m",
        reply_fields=ReplyFields(values={"overall": "scores.overall", "fluency": "scores.fluency"},
                                 metrics={"toy_overall": "overall"}, scores=("overall", "fluency"), main="overall"),
        frames=FrameGeometry(sample_points=2), reply_grammar="two integers",
    )
    assert JudgeDescriptor.from_facts(json.loads(json.dumps(descriptor.facts()))) == descriptor
    broken = descriptor.facts()
    del broken["reply_fields"]["values"]
    with pytest.raises(DescriptorError, match="values"):
        JudgeDescriptor.from_facts(broken)
    with pytest.raises(RecordError, match="must be an object"):  # a record reader reports it like any bad record
        JudgeDescriptor.from_facts(["toy"])
    with pytest.raises(DescriptorError, match="does not declare"):
        JudgeDescriptor("toy", "1", "", ReplyFields(values={}, metrics={}, scores=("overall",)), None, "")


def test_each_shipped_judge_is_described_once_and_its_tasks_read_it():
    from capjudge.judges.known_judges import SHIPPED_JUDGES
    from capjudge.tasks.harness.anycap_task import AnyCapSettings
    from capjudge.tasks.harness.gveval_task import GVEvalSettings

    for settings in (GVEvalSettings, AnyCapSettings):
        descriptor = SHIPPED_JUDGES[settings.judge_name]
        assert settings.descriptor is descriptor
        assert (settings.judge_version, settings.published_model) == (descriptor.version, descriptor.published_model)
        assert descriptor.frames is not None and descriptor.view_reply is not None


def test_a_video_is_rendered_once_per_geometry_and_again_whenever_its_file_changes(tmp_path, monkeypatch):
    # Rendering is remembered per file state (capjudge.judges.descriptor._rendered_video): counted here by the
    # video decodes it makes. A file rewritten in place (same name, same size), replaced by a rename, or
    # removed must never be answered from what was rendered before.
    import os

    import capjudge.judges.video as video_module

    decodes = []
    real_decode = video_module._decode_at
    monkeypatch.setattr(video_module, "_decode_at", lambda *args, **kwargs: decodes.append(args[0]) or real_decode(*args, **kwargs))
    strip = FrameGeometry(sample_points=4, shown=3, layout="strip", image_format="PNG")
    clip = make_video(tmp_path / "clip.mp4", n_frames=48)
    first = strip.render(clip)
    assert strip.render(clip) == first and strip.render(str(clip)) == first
    assert FrameGeometry(sample_points=8).render(clip) != first  # another geometry: its own parts
    assert len(decodes) == 2  # once per geometry: a Path and its str are one key

    first_bytes = clip.read_bytes()  # the encoder's output is not byte-stable between runs: the bytes are kept
    make_video(tmp_path / "other.mp4", n_frames=48, width=48, height=64)
    os.replace(tmp_path / "other.mp4", clip)  # replaced by a rename: another inode
    replaced = strip.render(clip)
    assert replaced != first and len(decodes) == 3

    clip.write_bytes(first_bytes)  # rewritten in place (the replacement's inode): the first content again
    assert strip.render(clip) == first and len(decodes) == 4
    # Rewritten in place again: same inode, same size, only its times differ. Two writes this close may fall in
    # one tick of the file system's clock; a rewrite between two renders of a run is later, so one second on.
    stamp = clip.stat().st_mtime_ns
    clip.write_bytes(first_bytes)
    os.utime(clip, ns=(stamp + 10**9, stamp + 10**9))
    assert clip.stat().st_size == len(first_bytes) and strip.render(clip) == first and len(decodes) == 5
    clip.unlink()
    with pytest.raises(video_module.VideoError, match="does not exist"):
        strip.render(clip)
