"""`RunFileError`: the one error for runs that cannot be read, or used, as they were given.

Every reader of lmms-eval runs raises it (the leaderboard, the item report, `reliability`, `agreement`,
`vatex`, the judging stage's look at earlier runs), with a message that names the run, file, line or metric;
the commands print that message as it is.
"""

from __future__ import annotations


class RunFileError(ValueError):
    """The runs cannot be read, or used as given; the message names the run, file, line or metric."""
