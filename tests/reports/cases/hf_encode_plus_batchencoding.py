"""A tokenizer's ``BatchEncoding`` unpacked into a model on the GPU without moving it.

huggingface/transformers#11165. The reporter passed ``tokenizer.encode_plus(...,
return_tensors="pt")`` straight to a model on the GPU (``model(**model_input)``) and asked for
the tokenizer to return tensors on the device. Resolution (LysandreJik): a ``BatchEncoding``
moves as a whole -- ``model_input.to("cuda")``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from transformers_reduced import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
    model = AutoModelForCausalLM.from_pretrained("bert-base-uncased").to(DEV)
    model_input = tokenizer("Hello, my dog is cute", return_tensors="pt")
    """,
    """
    logits = model(**model_input)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model_input", "cpu"),),
    fix="moves the BatchEncoding: model_input = model_input.to(DEV)",
    check="logits.device == torch.device(DEV)",
)
