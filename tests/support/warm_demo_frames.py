"""The demo clips' frames, rendered once in tests/support/warm_launch.py's forkserver instead of once per warm run.

Imported only in that server (it is in PRELOAD there). Most warm runs judge the demo tasks, whose ten clips are
files of the checkout (tasks/demo/*.mp4) that no test changes. A process renders a clip's image parts once per
frame geometry and keeps them (capjudge.judges.descriptor's cache, keyed by the file's path and identity: device,
inode, size, times), but every warm run is a new process: one suite run rendered these ten clips 3,183 times, a
third of the CPU of its 835 warm runs. Rendered here, with capjudge's own code and both shipped judges'
geometries, they are in every child's cache from the start: the same parts the child would have rendered (the
same code, the same file). Any other video (a test's own clips, a demo clip copied or rewritten, which has
another identity) is rendered by the child, as before. tests/test_warm_launch.py checks that a warm child
starts with them and renders what it is given anew.
"""

from __future__ import annotations

from capjudge.judges.known_judges import SHIPPED_JUDGES
from capjudge.tasks import TASKS_DIR

DEMO_CLIPS = tuple(sorted((TASKS_DIR / "demo").glob("*.mp4")))

for _judge in SHIPPED_JUDGES.values():
    if _judge.frames is not None:
        for _clip in DEMO_CLIPS:
            _judge.frames.render(video=_clip)
