"""Core: models, control tokens, languages and structure(), JSONL I/O, sampling."""
