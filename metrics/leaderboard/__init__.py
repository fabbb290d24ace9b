"""Leaderboards across models: estimates, ranks, paired tests, caveats, and the md/csv/png/html pages."""
