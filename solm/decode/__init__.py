"""Runtimes that act on control tags: PASTA threads, TIP paging, diffusion."""
