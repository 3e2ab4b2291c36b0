"""TIP decoding: the paged runtime, its eviction-policy registry, and decoding a prompt file."""
