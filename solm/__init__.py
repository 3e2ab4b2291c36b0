"""solm: toolkit for self-orchestrating language models (PASTA, TIP, Planned Diffusion)."""

__version__ = "0.1.0"
