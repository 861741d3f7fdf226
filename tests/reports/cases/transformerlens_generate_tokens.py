"""TransformerLens ``generate()`` keeps CPU input tokens next to tokens sampled on the GPU.

TransformerLensOrg/TransformerLens#1508. ``HookedTransformer.generate()`` binds
``input_tokens`` before ``input = input.to(device)``, so CPU tokens given to a model whose
``cfg.device`` is cuda meet the sampled tokens in ``torch.cat``: "Expected all tensors to be on
the same device, but got tensors is on cuda:0, different from other tensors on cpu (when
checking argument in method wrapper_CUDA_cat)". Fixed in the library by PR #1509; on the
user's side: pass the tokens on the model's device (``tokens.to(model.cfg.device)``).
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from transformer_lens_reduced import HookedTransformer, HookedTransformerConfig
    cfg = HookedTransformerConfig(d_vocab=12, d_model=8, n_ctx=16)
    model = HookedTransformer(cfg)
    tokens = torch.tensor([[1, 2, 3]])
    """,
    """
    output = model.generate(tokens, max_new_tokens=3, do_sample=False)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("input_tokens|tokens", "cpu"),),
    fix="passes the tokens on the model's device: tokens.to(model.cfg.device)",
    check="output.shape == (1, 6) and output.device == torch.device(DEV)",
    message="but got tensors is on cuda:0, different from other tensors on cpu (when checking argument in method wrapper_CUDA_cat)",
)
