"""Runtimes that act on control tags.

Shared by every runtime: the KV pool (`pool`) and its forward step (`step`), the paged pool
(`paged`, `paged_attention`), the attention kernel (`attention`), the output head (`head`)
and result flags (`flags`). One folder per system: `pasta/` (threads), `tip/` (paging and
eviction policies).
"""
