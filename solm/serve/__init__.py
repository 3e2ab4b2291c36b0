"""`solm serve`: an OpenAI-compatible HTTP server over solm's decoding runtimes.

`protocol` (request bodies, OpenAI-style errors), `streaming` (text that only grows,
per-token log-probabilities), `engine` (one runtime, a worker thread, a bounded queue) and
`app` (the FastAPI routes, bearer key, body limit)."""
