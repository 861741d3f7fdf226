"""A model moved to the GPU, trained on DataLoader batches that stay on the CPU.

lschmiddey/deep_tabular_augmentation#11. ``model = dta.Autoencoder(...).to(DEVICE)`` and
``run.fit(...)`` failed with "(when checking argument for argument mat1 in method
wrapper_addmm)": "you only put the model parameters to this device, not your input data".
Resolution (the author): put the batches on the device where they are used -- a data loader
that yields device tensors -- never the whole dataset.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    DEVICE = DEV
    datasets = TensorDataset(torch.randn(12, 5))
    train_dl = DataLoader(datasets, batch_size=4)
    model = nn.Sequential(nn.Linear(5, 2), nn.ReLU(), nn.Linear(2, 5)).to(DEVICE)
    loss_func = nn.MSELoss()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    """,
    """
    for (xb,) in train_dl:
        loss = loss_func(model(xb), xb)
        loss.backward()
        opt.step()
        opt.zero_grad()
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("xb", "cpu"),),
    fix="moves each batch to DEVICE inside the loop (xb = xb.to(DEVICE)); never the loader",
    check="loss.device == torch.device(DEV) and isinstance(train_dl, DataLoader)",
    message="(when checking argument for argument mat1 in method wrapper_addmm)",
)
