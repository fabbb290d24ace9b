"""The demo split: ten short clips this project draws itself, with references, instructions and captions.

    .venv/bin/python -m tests.support.demo_data --out tasks/demo    (or: make demo-data)

A development script, not part of the installed package: the files it wrote are committed in tasks/demo/
and shipped; tests/tasks/demo/test_demo_data.py checks that they are exactly what this script writes.

writes, into --out:
- ten H.264 MP4 clips (320x240, 10 fps, 3-4 s): simple scenes drawn with PIL, so their content is known
  exactly and the references below are true by construction;
- gveval_demo.jsonl   {"id", "video", "references": [3-5 captions], "caption_prompt"}        ids g01..g10
- anycap_demo.jsonl   {"id", "video", "instruction", "reference", "caption_type"}           ids a01..a10
  (brief, detail, poem, narrative and "theme", the AnyCapEval data's spelling of the rubric's "style",
  with length instructions worded as in that data);
- captions_good.jsonl, captions_fair.jsonl, captions_poor.jsonl  {"id", "caption"} for every id of both
  tasks: the demo's three "models", of visibly different quality (accurate and within the length
  instructions / vague or off in length / wrong about the video).

`video` is a file name in the same folder as the JSONL files.

Deterministic: frames are pure functions of the frame index (the rain uses a seeded generator), and x264
runs single-threaded with fixed settings, so a rerun with the same PyAV/FFmpeg writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "ANYCAP_ITEMS",
    "CAPTION_SETS",
    "CLIPS",
    "FPS",
    "FRAME_SIZE",
    "GVEVAL_ITEMS",
    "AnyCapItem",
    "Clip",
    "GVEvalItem",
    "encode_clip",
    "write_demo",
]

FRAME_SIZE = (320, 240)
FPS = 10
# x264 settings that make the output a function of the frames alone: one thread (no slice races), no
# scene-cut keyframes, a keyframe every second. CRF 30 keeps ten flat synthetic clips well under 1 MB.
_X264_OPTIONS = {"crf": "30", "preset": "medium", "x264-params": "threads=1:keyint=10:min-keyint=10:scenecut=0"}

Draw = Callable[[float], Image.Image]  # progress 0..1 through the clip -> one RGB frame


@dataclass(frozen=True)
class Clip:
    name: str  # file name in the demo folder
    seconds: int
    draw: Draw

    @property
    def n_frames(self) -> int:
        return self.seconds * FPS


# ------------------------------------------------------------------------------------------------------------
# The scenes. Each takes the progress t in [0, 1] (first frame 0, last frame 1) and returns a 320x240 frame.

WIDTH, HEIGHT = FRAME_SIZE


def _canvas(colour: tuple[int, int, int]) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", FRAME_SIZE, colour)
    return image, ImageDraw.Draw(image)


def _disc(draw: ImageDraw.ImageDraw, centre: tuple[float, float], radius: float, fill: tuple[int, int, int]) -> None:
    x, y = centre
    draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=fill)


def red_ball(t: float) -> Image.Image:
    """A red ball rolls from the left edge to the right edge over a dark grey floor."""
    image, draw = _canvas((225, 225, 225))
    draw.rectangle((0, 190, WIDTH, HEIGHT), fill=(90, 90, 90))
    radius = 24
    _disc(draw, (radius + t * (WIDTH - 2 * radius), 190 - radius), radius, (220, 30, 30))
    return image


def blue_square(t: float) -> Image.Image:
    """A blue square in the centre of a white frame grows from small to large."""
    image, draw = _canvas((255, 255, 255))
    half = (20 + t * 160) / 2
    draw.rectangle((WIDTH / 2 - half, HEIGHT / 2 - half, WIDTH / 2 + half, HEIGHT / 2 + half), fill=(30, 60, 200))
    return image


def sunrise(t: float) -> Image.Image:
    """A yellow sun rises from behind green hills while the sky turns from dark blue to orange."""
    rows = np.linspace(0.0, 1.0, HEIGHT)[:, None]
    night_top, night_bottom = np.array([10, 15, 60]), np.array([40, 50, 120])
    dawn_top, dawn_bottom = np.array([90, 140, 220]), np.array([250, 160, 60])
    top = night_top + t * (dawn_top - night_top)
    bottom = night_bottom + t * (dawn_bottom - night_bottom)
    sky = (top + rows * (bottom - top)).astype(np.uint8)
    image = Image.fromarray(np.repeat(sky[:, None, :], WIDTH, axis=1), "RGB")
    draw = ImageDraw.Draw(image)
    _disc(draw, (WIDTH / 2, 215 - t * 130), 30, (255, 215, 40))
    draw.rectangle((0, 180, WIDTH, HEIGHT), fill=(40, 120, 50))
    return image


def bouncing_ball(t: float) -> Image.Image:
    """A green ball drops and bounces three times on a brown floor in front of a pale blue wall."""
    image, draw = _canvas((200, 225, 245))
    draw.rectangle((0, 200, WIDTH, HEIGHT), fill=(120, 80, 40))
    radius = 20
    # Starts at the top; touches the floor at t = 0.2, 0.6 and 1.0. Not in phase with the judges' frame
    # samples (t = 0, 1/3, 2/3, 1), so the sampled frames show the ball at different heights.
    height = abs(math.cos(2.5 * math.pi * t)) * 130
    _disc(draw, (WIDTH / 2, 200 - radius - height), radius, (40, 170, 60))
    return image


def scrolling_text(t: float) -> Image.Image:
    """White capital letters "HELLO WORLD" scroll from right to left across a black frame."""
    image, draw = _canvas((0, 0, 0))
    font = ImageFont.load_default(size=40)
    text = "HELLO WORLD"
    # Part of the text is on screen in every frame, so every sampled frame shows some letters.
    x = 200 - t * 400
    draw.text((x, HEIGHT / 2 - 25), text, fill=(255, 255, 255), font=font)
    return image


def traffic_light(t: float) -> Image.Image:
    """A traffic light changes from red to yellow to green, one second each."""
    image, draw = _canvas((245, 245, 245))
    draw.rectangle((150, 200, 170, HEIGHT), fill=(80, 80, 80))  # pole
    draw.rounded_rectangle((125, 20, 195, 200), radius=12, fill=(40, 40, 40))
    lit = min(int(t * 3), 2)  # 0 red, 1 yellow, 2 green
    colours = [((230, 30, 30), (70, 20, 20)), ((240, 200, 30), (70, 60, 20)), ((40, 200, 70), (20, 60, 25))]
    for index, (on, off) in enumerate(colours):
        _disc(draw, (160, 52 + index * 58), 22, on if index == lit else off)
    return image


def two_circles(t: float) -> Image.Image:
    """A yellow circle from the left and a purple circle from the right move toward each other and meet."""
    image, draw = _canvas((255, 255, 255))
    radius = 26
    meet = WIDTH / 2
    _disc(draw, (radius + t * (meet - 2 * radius), HEIGHT / 2), radius, (240, 200, 20))
    _disc(draw, (WIDTH - radius - t * (meet - 2 * radius), HEIGHT / 2), radius, (130, 40, 170))
    return image


def clock(t: float) -> Image.Image:
    """A single black hand sweeps once clockwise around a white clock face on a light blue background."""
    image, draw = _canvas((190, 215, 240))
    cx, cy, radius = WIDTH / 2, HEIGHT / 2, 100
    draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=(255, 255, 255), outline=(0, 0, 0), width=4)
    for hour in range(12):
        angle = hour * math.pi / 6
        inner, outer = radius - 14, radius - 4
        sin, cos = math.sin(angle), math.cos(angle)
        draw.line((cx + inner * sin, cy - inner * cos, cx + outer * sin, cy - outer * cos), fill=(0, 0, 0), width=3)
    angle = 2 * math.pi * t  # starts at twelve o'clock
    draw.line((cx, cy, cx + 80 * math.sin(angle), cy - 80 * math.cos(angle)), fill=(0, 0, 0), width=5)
    _disc(draw, (cx, cy), 6, (0, 0, 0))
    return image


_RAIN = np.random.default_rng(20250101).uniform(size=(40, 2))  # fixed drop positions: same frames every run


def rain(t: float) -> Image.Image:
    """Light blue raindrops fall from top to bottom over a dark grey background."""
    image, draw = _canvas((60, 60, 70))
    for x_fraction, phase in _RAIN:
        y = ((phase + 2.5 * t) % 1.0) * (HEIGHT + 20) - 20
        x = x_fraction * WIDTH
        draw.line((x, y, x - 3, y + 16), fill=(150, 190, 255), width=2)
    return image


def sliding_triangle(t: float) -> Image.Image:
    """An orange triangle slides from the top of a white frame down to the bottom."""
    image, draw = _canvas((255, 255, 255))
    top = 10 + t * (HEIGHT - 80)
    draw.polygon(((WIDTH / 2, top), (WIDTH / 2 - 35, top + 60), (WIDTH / 2 + 35, top + 60)), fill=(245, 130, 20))
    return image


CLIPS: tuple[Clip, ...] = (
    Clip("red_ball.mp4", 3, red_ball),
    Clip("blue_square.mp4", 3, blue_square),
    Clip("sunrise.mp4", 4, sunrise),
    Clip("bouncing_ball.mp4", 3, bouncing_ball),
    Clip("scrolling_text.mp4", 4, scrolling_text),
    Clip("traffic_light.mp4", 3, traffic_light),
    Clip("two_circles.mp4", 3, two_circles),
    Clip("clock.mp4", 3, clock),
    Clip("rain.mp4", 3, rain),
    Clip("sliding_triangle.mp4", 3, sliding_triangle),
)


def frames_of(clip: Clip) -> Iterable[Image.Image]:
    last = clip.n_frames - 1
    for index in range(clip.n_frames):
        yield clip.draw(index / last)


def encode_clip(clip: Clip, path: str | os.PathLike[str]) -> Path:
    """Encode `clip` as H.264 (yuv420p) in an MP4 at `path`."""
    import av

    path = Path(path)
    with av.open(os.fspath(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(FPS))
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = dict(_X264_OPTIONS)
        for index, image in enumerate(frames_of(clip)):
            frame = av.VideoFrame.from_image(image)
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


# ------------------------------------------------------------------------------------------------------------
# The texts. References describe what the drawing code above draws, nothing more.

GVEVAL_PROMPT = "Describe what happens in this video in one sentence."


@dataclass(frozen=True)
class GVEvalItem:
    id: str
    video: str
    references: tuple[str, ...]
    caption_prompt: str = GVEVAL_PROMPT

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id, "video": self.video, "references": list(self.references),
            "caption_prompt": self.caption_prompt,
        }


@dataclass(frozen=True)
class AnyCapItem:
    id: str
    video: str
    caption_type: str  # brief | detail | poem | narrative | theme (the data's name for the rubric's "style")
    instruction: str
    reference: str

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id, "video": self.video, "instruction": self.instruction,
            "reference": self.reference, "caption_type": self.caption_type,
        }


GVEVAL_ITEMS: tuple[GVEvalItem, ...] = (
    GVEvalItem("g01", "red_ball.mp4", (
        "A red ball rolls from the left side of the screen to the right side.",
        "A red ball moves across a grey floor from left to right.",
        "A red ball rolls along the ground to the right.",
        "A red circle travels horizontally across the frame.",
    )),
    GVEvalItem("g02", "blue_square.mp4", (
        "A blue square grows larger in the middle of a white screen.",
        "A small blue square in the centre expands until it is big.",
        "A blue square gets bigger and bigger.",
    )),
    GVEvalItem("g03", "sunrise.mp4", (
        "The sun rises above green hills as the sky brightens from dark blue to orange.",
        "A yellow sun comes up from behind the hills at dawn.",
        "The sky turns from night to a bright orange sunrise while the sun rises.",
        "A cartoon sunrise over green hills.",
    )),
    GVEvalItem("g04", "bouncing_ball.mp4", (
        "A green ball bounces up and down on a brown floor.",
        "A green ball drops and bounces three times in front of a pale blue wall.",
        "A ball keeps bouncing on the floor in the same spot.",
    )),
    GVEvalItem("g05", "scrolling_text.mp4", (
        "The words HELLO WORLD scroll from right to left across a black screen.",
        "White text reading HELLO WORLD moves across a black background.",
        "A HELLO WORLD message slides across the screen from right to left.",
        "White capital letters scroll across a black screen.",
    )),
    GVEvalItem("g06", "traffic_light.mp4", (
        "A traffic light changes from red to yellow to green.",
        "A traffic light switches its light from red to yellow and then to green.",
        "The signal on a traffic light turns from red to green, passing through yellow.",
    )),
    GVEvalItem("g07", "two_circles.mp4", (
        "A yellow circle and a purple circle move toward each other and meet in the middle.",
        "Two circles, one yellow and one purple, slide together from opposite sides.",
        "A yellow ball from the left and a purple ball from the right come together in the centre.",
    )),
    GVEvalItem("g08", "clock.mp4", (
        "The hand of a clock sweeps one full turn clockwise.",
        "A single black hand rotates around a white clock face.",
        "A clock hand spins once around the clock.",
        "A clock on a light blue background with its hand going around.",
    )),
    GVEvalItem("g09", "rain.mp4", (
        "Raindrops fall from the top of the screen to the bottom.",
        "Light blue rain falls over a dark grey background.",
        "It is raining: blue streaks fall down the screen.",
    )),
    GVEvalItem("g10", "sliding_triangle.mp4", (
        "An orange triangle slides down from the top of the screen to the bottom.",
        "An orange triangle moves downward on a white background.",
        "A triangle falls slowly from the top to the bottom of the frame.",
    )),
)

_WORDS_10_20 = "The generated caption's length needs to be 10 to 20 words."
_WORDS_20_30 = "The generated caption's length needs to be 20 to 30 words."
_WORDS_30_120 = "The generated caption's length needs to be 30 to 120 words."
_THREE_SENTENCES = "The generated caption's length cannot exceed three sentences."

ANYCAP_ITEMS: tuple[AnyCapItem, ...] = (
    AnyCapItem(
        "a01", "red_ball.mp4", "brief",
        f"Generate a brief caption describing the main content of this video. {_WORDS_10_20}",
        "A red ball rolls steadily from the left edge to the right edge above a dark grey floor.",
    ),
    AnyCapItem(
        "a02", "traffic_light.mp4", "brief",
        f"{_WORDS_20_30} Provide a concise description of the visible scene in the video.",
        "A traffic light stands on a white background; its signal changes from red to yellow and finally to "
        "green, with each colour shown for about one second.",
    ),
    AnyCapItem(
        "a03", "sunrise.mp4", "detail",
        f"Provide a detailed description of the scene depicted in this video. {_WORDS_30_120}",
        "The video shows a simple cartoon landscape at dawn. A band of green hills fills the bottom of the frame. "
        "At first the sky is dark blue, like night. A round yellow sun slowly rises from behind the hills in the "
        "centre, and as it climbs the sky brightens, turning light blue at the top and warm orange near the horizon.",
    ),
    AnyCapItem(
        "a04", "clock.mp4", "detail",
        f"{_WORDS_30_120} Describe the content of this video in detail.",
        "A round white clock face with a thick black outline sits in the middle of a light blue background. Twelve "
        "short black tick marks mark the hours around its edge. A single black hand, fixed at the centre by a small "
        "black dot, starts at twelve o'clock and sweeps clockwise through one complete turn.",
    ),
    AnyCapItem(
        "a05", "rain.mp4", "poem",
        f"How can the scene in the video be transformed into a poetic description? {_WORDS_30_120}",
        "From a sky of slate the silver threads descend,\n"
        "Light blue and slender, falling without end.\n"
        "They slant and hurry down the darkened air,\n"
        "A quiet storm that settles everywhere.\n"
        "No cloud is seen, no thunder and no wind,\n"
        "Just rain that falls, and falls, and falls again.",
    ),
    AnyCapItem(
        "a06", "bouncing_ball.mp4", "poem",
        f"Write a short poem inspired by this video. {_WORDS_30_120}",
        "A small green ball upon a floor of brown,\n"
        "It leaps toward the sky, then tumbles down.\n"
        "Against a wall of softest morning blue,\n"
        "It springs up once, then twice, then three times through.\n"
        "Each bounce a heartbeat, steady, light and round,\n"
        "A joyful rhythm drumming on the ground.",
    ),
    AnyCapItem(
        "a07", "two_circles.mp4", "narrative",
        f"Generate a narrative description of the scene depicted in this video. {_WORDS_30_120}",
        "On an empty white stage, two circles begin at opposite ends. The yellow one sets off from the left and the "
        "purple one from the right, each moving steadily toward the centre. Neither hesitates. Step by step the gap "
        "between them closes, until at last they meet side by side in the middle of the stage.",
    ),
    AnyCapItem(
        "a08", "sliding_triangle.mp4", "narrative",
        f"{_WORDS_30_120} Tell the story of what happens in this video.",
        "At the top of a plain white frame an orange triangle appears, pointing upward. Slowly and steadily it begins "
        "to slide downward, never turning or changing its shape. It passes the middle of the frame and keeps going, "
        "until it comes to rest near the bottom edge, where its journey ends.",
    ),
    AnyCapItem(
        "a09", "blue_square.mp4", "theme",
        f"{_THREE_SENTENCES} Describe this video in a humorous style.",
        "A tiny blue square sits in the middle of a white screen, clearly unhappy about its size. It starts eating "
        "its vegetables and grows, and grows, and grows. By the end it is so big it barely fits in the picture, "
        "and it looks very pleased with itself.",
    ),
    AnyCapItem(
        "a10", "scrolling_text.mp4", "theme",
        f"Generate a whimsical, storybook-style description of this video's content. {_THREE_SENTENCES}",
        "Once upon a time, in a land of endless night, the words HELLO WORLD set off on a journey across the dark. "
        "Letter by white letter they marched from the right edge to the left, greeting everyone they passed. Then "
        "they slipped away beyond the edge of the world, off to say hello somewhere new.",
    ),
)

# Three "models". good: accurate, and within the AnyCap length instructions and the ±10% reference rule for
# brief/detail. fair: right subject but vague, missing or slightly wrong details, or off in length. poor: wrong
# about what the video shows.
CAPTION_SETS: Mapping[str, Mapping[str, str]] = {
    "good": {
        "g01": "A red ball rolls from the left side of the frame to the right along a grey floor.",
        "g02": "A blue square in the centre of a white screen grows from small to large.",
        "g03": "A yellow sun rises behind green hills while the sky changes from dark blue to orange.",
        "g04": "A green ball bounces up and down three times on a brown floor.",
        "g05": "White text saying HELLO WORLD scrolls from right to left across a black screen.",
        "g06": "A traffic light changes from red to yellow and then to green.",
        "g07": "A yellow circle and a purple circle move toward each other and meet in the centre.",
        "g08": "A black clock hand sweeps one full turn clockwise around a white clock face.",
        "g09": "Light blue raindrops fall from the top to the bottom of a dark grey screen.",
        "g10": "An orange triangle slides from the top of a white frame down to the bottom.",
        "a01": "A red ball rolls from the left edge of the frame to the right edge over a grey floor.",
        "a02": "On a plain white background a traffic light changes its signal from red to yellow and then to "
        "green, with each colour lasting roughly one second.",
        "a03": "This cartoon video shows a sunrise over a simple landscape. Green hills cover the lower part of the "
        "frame, and the sky starts out dark blue as if it were still night. A round yellow sun gradually rises from "
        "behind the hills in the middle of the picture. As it climbs, the sky gets brighter, becoming light blue "
        "above and orange near the horizon.",
        "a04": "In the middle of a light blue background sits a white clock face with a thick black rim. Twelve "
        "small black tick marks stand for the hours around the edge. One black hand, pinned at the centre by a "
        "black dot, begins at twelve and sweeps clockwise until it has made one full turn.",
        "a05": "Down from a sky of darkest grey they fall,\n"
        "Thin threads of blue that answer to no call.\n"
        "They slant and race toward the ground below,\n"
        "A silent rain that has nowhere else to go.\n"
        "No thunder speaks, no flash of light is seen,\n"
        "Just falling drops upon a darkened screen.",
        "a06": "Upon a floor of brown a green ball springs,\n"
        "It rises up as if it had grown wings.\n"
        "Before a wall of pale and gentle blue,\n"
        "It falls and bounces, three times through and through.\n"
        "A steady beat, a rhythm round and bright,\n"
        "A little ball that dances with delight.",
        "a07": "Two circles wait on a bare white stage, one at each end. The yellow circle starts moving from the "
        "left and the purple circle from the right, both heading for the centre at the same steady pace. The space "
        "between them shrinks little by little until they finally meet in the middle.",
        "a08": "An orange triangle appears at the top of an empty white frame. It begins to slide down, slowly and "
        "steadily, keeping its shape and never turning. It travels past the middle of the frame and continues "
        "downward until it stops near the bottom edge, and its short journey is over.",
        "a09": "A very small blue square sits in the middle of a white screen, looking embarrassed about its size. "
        "It takes a deep breath and starts to grow, and grow, and grow some more. By the end it is so huge it can "
        "hardly fit in the picture, and it seems extremely proud of itself.",
        "a10": "Once upon a time, in a kingdom of darkest night, the words HELLO WORLD began a grand journey. "
        "Letter by shining white letter they paraded from the right side to the left, waving to all they met. "
        "Then they tiptoed past the edge of the world to greet someone new.",
    },
    "fair": {
        "g01": "A ball moves across the screen.",
        "g02": "A square changes size on a white background.",
        "g03": "The sun sets behind some hills in the evening.",
        "g04": "A ball is moving on the floor.",
        "g05": "Some text appears on a dark screen.",
        "g06": "A traffic light turns green.",
        "g07": "Two circles are on a white screen and they are moving around a lot.",
        "g08": "A clock is shown on a blue background.",
        "g09": "Lines move on a grey screen.",
        "g10": "A triangle moves on a white background.",
        "a01": "A ball moves across the screen from one side to the other.",
        "a02": "A traffic light turns green.",
        "a03": "The video shows green hills and the sun in the sky, which changes colour. It is a simple cartoon "
        "landscape.",
        "a04": "A clock is shown on a blue background and its hand moves around the face of the clock.",
        "a05": "Rain is falling down,\nBlue lines on grey,\nIt rains all day.",
        "a06": "A green ball bounces on the floor. It goes up and down a few times in front of a blue wall.",
        "a07": "There are two circles. They move. Then they stop in the middle.",
        "a08": "A triangle moves down the screen.",
        "a09": "A blue square gets bigger on a white background.",
        "a10": "The words HELLO WORLD move across a black screen from right to left. They then disappear. The text "
        "is white. The video is short.",
    },
    "poor": {
        "g01": "A dog runs through a park chasing a frisbee.",
        "g02": "A red circle shrinks and disappears.",
        "g03": "A city street at night with cars driving past.",
        "g04": "A cat sleeps on a sofa.",
        "g05": "A man is reading a newspaper in a cafe.",
        "g06": "A car drives along a highway in the snow.",
        "g07": "A flock of birds flies over the ocean.",
        "g08": "A woman is cooking pasta in a kitchen.",
        "g09": "Children are playing football on a sunny beach.",
        "g10": "A blue car is parked in front of a house.",
        "a01": "Two children fly a kite on a windy hill while their parents watch from a picnic blanket below.",
        "a02": "A busy city street at night.",
        "a03": "A chef in a white hat chops onions and carrots in a restaurant kitchen.",
        "a04": "A football match is played in a packed stadium while the crowd cheers and waves flags in the "
        "evening light.",
        "a05": "The desert sun burns bright and high,\nNo cloud, no drop in the endless sky.",
        "a06": "A man walks his dog.",
        "a07": "A woman buys vegetables at a market and chats with the seller before going home.",
        "a08": "The stock market rose today.",
        "a09": "A serious documentary about mountain climbing in winter.",
        "a10": "A red car drives quickly down a long highway at noon.",
    },
}


# ------------------------------------------------------------------------------------------------------------
# Writing


def _write_jsonl(path: Path, rows: Iterable[Mapping[str, object]]) -> None:
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def check_consistency(
    clips: Sequence[Clip] = CLIPS,
    gveval: Sequence[GVEvalItem] = GVEVAL_ITEMS,
    anycap: Sequence[AnyCapItem] = ANYCAP_ITEMS,
    caption_sets: Mapping[str, Mapping[str, str]] = CAPTION_SETS,
) -> None:
    """Every item names a clip we draw, ids are unique across tasks, and every set captions every id."""
    clip_names = {clip.name for clip in clips}
    ids = [item.id for item in gveval] + [item.id for item in anycap]
    duplicates = sorted({item_id for item_id in ids if ids.count(item_id) > 1})
    if duplicates:
        raise ValueError(f"demo ids must be unique across both tasks; repeated: {duplicates}")
    for item in (*gveval, *anycap):
        if item.video not in clip_names:
            raise ValueError(f"demo item {item.id}: video {item.video!r} is not one of the drawn clips")
    for name, captions in caption_sets.items():
        missing, extra = sorted(set(ids) - set(captions)), sorted(set(captions) - set(ids))
        if missing or extra:
            raise ValueError(f"caption set {name!r}: missing ids {missing}, unknown ids {extra}")


def write_demo(out: str | os.PathLike[str]) -> list[Path]:
    """Write the clips and the JSONL files into `out` (created if needed); returns the paths written."""
    check_consistency()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = [encode_clip(clip, out / clip.name) for clip in CLIPS]
    for name, rows in (
        ("gveval_demo.jsonl", [item.to_json() for item in GVEVAL_ITEMS]),
        ("anycap_demo.jsonl", [item.to_json() for item in ANYCAP_ITEMS]),
    ):
        _write_jsonl(out / name, rows)
        written.append(out / name)
    ids = [item.id for item in GVEVAL_ITEMS] + [item.id for item in ANYCAP_ITEMS]
    for set_name, captions in CAPTION_SETS.items():
        path = out / f"captions_{set_name}.jsonl"
        _write_jsonl(path, ({"id": item_id, "caption": captions[item_id]} for item_id in ids))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.demo_data", description="Write the demo split.")
    parser.add_argument("--out", type=Path, required=True, help="folder to write into (the repo's is tasks/demo)")
    args = parser.parse_args(argv)
    written = write_demo(args.out)
    total = sum(path.stat().st_size for path in written)
    print(f"wrote {len(written)} files ({total / 1024:.0f} KiB) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
