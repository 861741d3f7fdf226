"""Token ids from ``text_to_token_ids`` are left on the CPU for a GPT model on the GPU.

rasbt/LLM-workshop-2024#6. In ``04.ipynb`` the exercise's ``generate_text_simple(model=model,
idx=text_to_token_ids(start_context, tokenizer), ...)`` failed on a GPU machine with "Expected
all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! (when
checking argument for argument index in method wrapper_CUDA__index_select)". Resolution
(accepted by the author): ``idx=text_to_token_ids(start_context, tokenizer).to(device)``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    import torch.nn as nn

    class GPTModel(nn.Module):
        def __init__(self, vocab_size=30, emb_dim=8):
            super().__init__()
            self.tok_emb = nn.Embedding(vocab_size, emb_dim)
            self.out_head = nn.Linear(emb_dim, vocab_size)

        def forward(self, in_idx):
            return self.out_head(self.tok_emb(in_idx))

    def text_to_token_ids(text, tokenizer):
        return torch.tensor(tokenizer(text)).unsqueeze(0)

    def generate_text_simple(model, idx, max_new_tokens, context_size):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -context_size:]
            with torch.no_grad():
                logits = model(idx_cond)
            idx_next = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
    """,
    """
    device = DEV
    tokenizer = lambda text: [ord(c) % 30 for c in text]
    model = GPTModel()
    model.to(device)
    start_context = "Every effort"
    """,
    """
    token_ids = generate_text_simple(
        model=model,
        idx=text_to_token_ids(start_context, tokenizer),
        max_new_tokens=3,
        context_size=8,
    )
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("idx|idx_cond|in_idx", "cpu"),),
    fix="moves the token ids to DEV: idx=text_to_token_ids(...).to(device)",
    check="token_ids.device == torch.device(DEV) and token_ids.shape == (1, 15)",
    message="(when checking argument for argument index in method wrapper_CUDA__index_select)",
)
