"""A library's model-input object (tokenizer batch + masks) left on the CPU for a GPU model.

schen149/sub-sentence-encoder#1. Step 3 of the README failed with "Expected all tensors to be
on the same device ... (when checking argument for argument index in method
wrapper_CUDA__index_select)"; the reporter wrote a helper moving each field to cuda. The
authors' answer: the input class already has ``.to()`` -- ``sent1_inputs.to("cuda")``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from subsentence_reduced import SubEncoder, convert_example_to_input
    model = SubEncoder().to(DEV)
    sent1_inputs = convert_example_to_input("dogs bark loudly", [(0, 4), (5, 9)])
    """,
    """
    sent1_embeddings = model(sent1_inputs)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("sent1_inputs", "cpu"),),
    fix="moves the input object as a whole: sent1_inputs.to(DEV)",
    check="sent1_embeddings.device == torch.device(DEV)",
    message="(when checking argument for argument index in method wrapper_CUDA__index_select)",
)
