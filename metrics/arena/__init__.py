"""Arenas: battles between models (from pointwise scores or pairwise verdicts), Bradley-Terry ratings on the Elo scale, position bias, agreement with humans' preferences."""
