"""Building training data: Pasta-Lang annotation (APAR-style rules, or an LLM through a
resumable job with versioned prompts) and synthetic register traces for TIP."""
