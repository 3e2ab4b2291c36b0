"""A model's twin under FlexAttention (same weights), refusing dense masks as the training
loader's flex models do."""

import copy


def flex_twin(model):
    from solm.train.flex import refuse_dense_masks

    twin = copy.deepcopy(model)
    twin.set_attn_implementation("flex_attention")
    refuse_dense_masks(twin)
    return twin.eval()
