"""The per-item report: what each judge saw, said and decided for every item, as one HTML page."""
