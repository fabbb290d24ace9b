"""A descriptor's "strip" frame layout (`FrameGeometry.layout`), judge-neutral: sampled frames side by side in
one image, each over a labelled white bar. It is the one image G-VEval's video judge sees, laid out as published.

Layout measured on the published example (shared data gveval_example/video1_frames.png, 1536x512): each
frame is resized to 512x462 and sits ABOVE a 50 px white bar; the bar carries "Frame k" in black, left
aligned (ink starts 13 px from the tile's left edge, spans rows 8..37 of the bar). The published code drew
the label with OpenCV's Hershey font (scale 1.2, thickness 3, baseline at (10, 35)); we use Pillow's
scalable default font at the size and baseline whose ink is closest to the published bar (searched over sizes
34..43, baselines 34..38, with and without stroke: mean absolute difference 8.9-10.1 grey levels per bar;
ink box rows 9..37 from 14 px in, against the published 8..37 from 13 px).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from capjudge.judges.types import ImagePart

if TYPE_CHECKING:
    from PIL import Image

TILE_WIDTH = 512
FRAME_HEIGHT = 462
BAR_HEIGHT = 50
TILE_HEIGHT = FRAME_HEIGHT + BAR_HEIGHT
LABEL_ORIGIN = (10, 38)  # left end of the text baseline, in bar coordinates
LABEL_FONT_SIZE = 42


def build_strip(frames: Sequence["Image.Image"]) -> "Image.Image":
    """Frames left to right, each resized to 512x462 over a white 50 px bar labelled "Frame 1", "Frame 2", ...

    Resizing ignores aspect ratio, as published (a 16:9 frame is squeezed to 512x462).
    """
    from PIL import Image, ImageDraw, ImageFont

    if not frames:
        raise ValueError("build_strip needs at least one frame")
    font = ImageFont.load_default(size=LABEL_FONT_SIZE)
    strip = Image.new("RGB", (TILE_WIDTH * len(frames), TILE_HEIGHT), "white")
    draw = ImageDraw.Draw(strip)
    for position, frame in enumerate(frames):
        left = position * TILE_WIDTH
        # The published cv2.resize (bilinear without low-pass) has no exact Pillow twin; on the example clip
        # (1280x720 frames) Pillow's bicubic comes closest: 0.23-0.61 grey levels mean absolute difference
        # per frame, against 0.32-0.84 for bilinear.
        resized = frame.convert("RGB").resize((TILE_WIDTH, FRAME_HEIGHT), Image.Resampling.BICUBIC)
        strip.paste(resized, (left, 0))
        draw.text(
            (left + LABEL_ORIGIN[0], FRAME_HEIGHT + LABEL_ORIGIN[1]),
            f"Frame {position + 1}",
            font=font,
            fill="black",
            anchor="ls",
        )
    return strip


def strip_image_part(strip: "Image.Image") -> ImagePart:
    """The strip as the request sends it: PNG, detail "high".

    PNG because that is what the published judge sent: its code wrote the strip with cv2.imwrite(...png) and
    base64-encoded the file (under a "data:image/jpeg" label, but the bytes were PNG), so the model saw
    lossless pixels. JPEG would add compression artefacts the published scores never had; the larger payload
    does not change the image-token cost, which depends only on the dimensions. We label it image/png,
    which is what the bytes are. "high" detail because the published code forces it for video.
    """
    return ImagePart.from_pil(strip, "PNG", detail="high")
