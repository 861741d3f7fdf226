"""Negative: a token id beyond the embedding table is an index error.

karpathy/ng-video-lecture#20. Changing the bigram model's embedding to ``nn.Embedding(vocab_size,
128)`` made ``generate()`` feed logits-sized ids back into the table: "IndexError: index out of
range in self". No device is involved.
"""

from case import Negative

CELLS = [
    """
    import torch
    token_embedding_table = torch.nn.Embedding(8, 4).to(DEV)
    idx = torch.tensor([[1, 9]], device=DEV)
    """,
    """
    logits = token_embedding_table(idx)
    """,
]

NEGATIVE = Negative(why="an id outside the embedding table", raises="IndexError")
