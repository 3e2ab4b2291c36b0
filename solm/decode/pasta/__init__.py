"""PASTA decoding: the asynchronous runtime, its grammar, and decoding a prompt file."""
