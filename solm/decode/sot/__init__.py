"""Skeleton-of-Thought on solm's pool: the skeleton decoded, then every point in parallel."""
