"""darts' TFT keeps its attention mask as a plain attribute on the device of its first call.

unit8co/darts#3052. After training on the GPU the model was moved to the CPU for prediction,
and the forward failed on mixed devices: ``attention_mask`` (and ``relative_index``) are plain
attributes made on the first input's device, which ``.to()`` does not move. Resolution
(dennisbader, tested): register them with ``register_buffer(..., persistent=False)``; on the
user's side, move or reset that attribute.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from darts_reduced import _TFTModule
    inner = _TFTModule(input_chunk_length=4, output_chunk_length=2).to(DEV)
    inner(torch.randn(3, 4, 1, device=DEV))
    """,
    """
    inner = inner.to("cpu")
    pred = inner(torch.randn(3, 4, 1))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("inner.attention_mask|self.attention_mask", "DEV"),),
    fix="moves inner.attention_mask to the model's device (cpu) or registers it as a buffer",
    check="pred.device == torch.device('cpu') and pred.shape == (3, 2, 1)",
)
