"""`capjudge arena`: pairs of captions of the same item judged in both orders by a pairwise rubric judge."""
