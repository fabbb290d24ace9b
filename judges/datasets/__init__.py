"""The datasets capjudge judges items of: one module per dataset (its item format, its file loader, its human
ratings, its item ids), and what they share (`items`). The bottom of the house: a dataset module imports no
judge, so a judge, a metric or a task may use any dataset, and a dataset is read without any judge's code."""
