"""A policy defined and registered here alone runs through the shared policy matrix: the
registry is the only list a new policy has to join."""

import pytest

from solm.decode.tip.policies import POLICIES, EvictionPolicy, register_policy


@register_policy
class NewestPagesPolicy(EvictionPolicy):
    """Keep the newest whole pages that fit in the budget; free the rest."""

    name = "toy_newest_pages"
    help = "the newest whole pages within --budget (a test policy)"
    needs_budget = True

    def evict(self, req):
        keep = max(1, self.budget // self.page_size)
        if len(req.pages) <= keep:
            return []
        return self._drop(req, {p.id for p in req.pages[-keep:]})


MATRIX_POLICIES = [NewestPagesPolicy.name]

from policy_matrix import *  # noqa: E402,F401,F403


@pytest.fixture(scope="module", autouse=True)
def unregister_after_this_module():
    yield
    POLICIES.pop(NewestPagesPolicy.name, None)
