"""Planned Diffusion decoding (plan, denoise chunks in parallel, continue)."""
