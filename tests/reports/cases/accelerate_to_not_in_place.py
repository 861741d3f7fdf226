"""Timesteps sampled on the CPU, "moved" with ``t.to(batch.device)`` whose result is dropped.

huggingface/accelerate#2251. In a diffusion training step, ``t, weights =
self.schedule_sampler.sample(batch.shape[0])`` returned CPU tensors; ``t.to(batch.device)`` and
``weights.to(batch.device)`` on their own lines did not help. Resolution (BenjaminBossan, and the
reporter's working code): ``.to`` is not in-place -- ``t = t.to(batch.device)``, or make them on
``batch.device`` in ``sample``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import numpy as np
    import torch as th
    from torch import nn

    class UniformSampler:
        def __init__(self, num_timesteps):
            self._weights = np.ones([num_timesteps])

        def weights(self):
            return self._weights

        def sample(self, batch_size):
            w = self.weights()
            p = w / np.sum(w)
            indices_np = np.random.choice(len(p), size=(batch_size,), p=p)
            indices = th.from_numpy(indices_np).long()
            weights_np = 1 / (len(p) * p[indices_np])
            weights = th.from_numpy(weights_np).float()
            return indices, weights

    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.time_embed = nn.Embedding(10, 4)
            self.proj = nn.Linear(4, 4)

        def forward(self, x, t):
            return self.proj(x) + self.time_embed(t)

    schedule_sampler = UniformSampler(10)
    model = Denoiser().to(DEV)
    batch = th.randn(3, 4, device=DEV)
    """,
    """
    t, weights = schedule_sampler.sample(batch.shape[0])
    t.to(batch.device)
    weights.to(batch.device)
    losses = ((model(batch, t) - batch) ** 2).mean(dim=1)
    loss = (losses * weights).mean()
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("t", "cpu"),),
    fix="assigns the moved tensors: t = t.to(batch.device) (and weights)",
    check="loss.device == th.device(DEV)",
)
