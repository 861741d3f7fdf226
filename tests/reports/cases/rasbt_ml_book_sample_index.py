"""Sampling from a character LSTM on the GPU with the encoded prompt left on the CPU.

rasbt/machine-learning-book#233 ("Newer version of PyTorch enforces strict device consistency
for all tensors and indices"). The chapter 15 ``sample()`` moved ``hidden`` and ``cell`` to the
device but fed ``encoded_input[:, c].view(1)`` from a CPU tensor to the model's embedding:
"Expected all tensors to be on the same device, but got index is on cpu, different from other
tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)". The PR
names ``encoded_input[:, c].view(1)`` and ``last_char.view(1)``: the encoded input must be on the
model's device.
"""

from case import Culprit, Expected

REQUIRES = ("rnn_kernels",)

CELLS = [
    """
    import torch
    import torch.nn as nn
    from torch.distributions.categorical import Categorical
    device = DEV
    char_array = list("abcdefgh ")
    char2int = {ch: i for i, ch in enumerate(char_array)}

    class RNN(nn.Module):
        def __init__(self, vocab_size, embed_dim, rnn_hidden_size):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, embed_dim)
            self.rnn_hidden_size = rnn_hidden_size
            self.rnn = nn.LSTM(embed_dim, rnn_hidden_size, batch_first=True)
            self.fc = nn.Linear(rnn_hidden_size, vocab_size)

        def forward(self, x, hidden, cell):
            out = self.embedding(x).unsqueeze(1)
            out, (hidden, cell) = self.rnn(out, (hidden, cell))
            out = self.fc(out).reshape(out.size(0), -1)
            return out, hidden, cell

        def init_hidden(self, batch_size):
            hidden = torch.zeros(1, batch_size, self.rnn_hidden_size)
            cell = torch.zeros(1, batch_size, self.rnn_hidden_size)
            return hidden, cell

    model = RNN(len(char_array), 4, 6).to(device)
    """,
    """
    def sample(model, starting_str, len_generated_text=5, scale_factor=1.0):
        encoded_input = torch.tensor([char2int[s] for s in starting_str])
        encoded_input = torch.reshape(encoded_input, (1, -1))
        generated_str = starting_str
        model.eval()
        hidden, cell = model.init_hidden(1)
        hidden = hidden.to(device)
        cell = cell.to(device)
        for c in range(len(starting_str) - 1):
            _, hidden, cell = model(encoded_input[:, c].view(1), hidden, cell)
        last_char = encoded_input[:, -1]
        for i in range(len_generated_text):
            logits, hidden, cell = model(last_char.view(1), hidden, cell)
            logits = torch.squeeze(logits, 0)
            last_char = Categorical(logits=logits * scale_factor).sample()
            generated_str += str(char_array[last_char])
        return generated_str
    """,
    """
    torch.manual_seed(1)
    text = sample(model, starting_str="a bad")
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("encoded_input", "cpu"),),
    fix="makes encoded_input on device in sample() (torch.tensor(..., device=device))",
    check="isinstance(text, str) and len(text) == 10",
    message="but got index is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA__index_select)",
)
