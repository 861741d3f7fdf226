"""accelerate's gradient-accumulation example used a bare tensor as its model.

huggingface/accelerate#3157 ("[docs] use nn.module instead of tensor as model"). Run on CUDA,
the example failed at ``outputs = inputs @ model`` with "Expected all tensors to be on the same
device, but found at least two devices, cuda:0 and cpu! (when checking argument for argument
mat2 in method wrapper_CUDA_mm)": ``accelerator.prepare()`` moves modules and batches, not a
tensor. The merged fix makes the model an ``nn.Module`` so ``prepare`` moves it; the weight
must end up on the accelerator and stay the optimizer's parameter.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from accelerate_reduced import Accelerator
    accelerator = Accelerator()
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).reshape(4, 2)
    y = torch.ones(4, 1)
    dataset = TensorDataset(x, y)
    dataloader = DataLoader(dataset, batch_size=2)
    model = torch.zeros((2, 1), requires_grad=True)
    optimizer = torch.optim.SGD([model], lr=0.02)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    """,
    """
    for inputs, targets in dataloader:
        outputs = inputs @ model
        loss = torch.nn.functional.mse_loss(outputs, targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model", "cpu"),),
    fix="puts the weight on accelerator.device and keeps it the optimizer's parameter (an nn.Module prepared by accelerate)",
    check="model.device == torch.device(DEV) and optimizer.param_groups[0]['params'][0] is model and model.abs().sum() > 0",
    message="(when checking argument for argument mat2 in method wrapper_CUDA_mm)",
)
