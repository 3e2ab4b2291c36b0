"""Data sets: the hub sets solm reads, fetched and converted to solm JSONL (`solm data`)."""
