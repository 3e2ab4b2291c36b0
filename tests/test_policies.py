"""Every registered eviction policy through the shared matrix (tests/policy_matrix.py)."""

from policy_matrix import *  # noqa: F401,F403  (the matrix's tests, hook and fixtures)
