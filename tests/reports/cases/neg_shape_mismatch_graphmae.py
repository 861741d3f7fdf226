"""Negative: a shape mismatch on the GPU is no device error.

THUDM/GraphMAE#51. ``rep = self.encoder_to_decoder(enc_rep)`` raised "mat1 and mat2 shapes
cannot be multiplied (2708x7 and 256x256)": the input data did not match the model
(the authors' answer). Everything was on one device.
"""

from case import Negative

CELLS = [
    """
    import torch
    encoder_to_decoder = torch.nn.Linear(16, 16, bias=False).to(DEV)
    enc_rep = torch.randn(5, 7, device=DEV)
    """,
    """
    rep = encoder_to_decoder(enc_rep)
    """,
]

NEGATIVE = Negative(why="a shape mismatch, every tensor on one device", raises="RuntimeError")
