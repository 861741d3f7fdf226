"""``input_ids`` from the tokenizer stay on the CPU while the model was loaded on cuda.

onnx/turnkeyml#270 ("Fix input_ids always on cpu issue"). With ``--device cuda`` the MMLU and
HumanEval tools failed: "Error during model generation: Expected all tensors to be on the same
device ... (when checking argument for argument index in method wrapper_CUDA__index_select)".
The PR's fix: ``input_ids = tokenizer(prompt, return_tensors="pt").input_ids.to(device)``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from transformers_reduced import AutoModelForCausalLM, AutoTokenizer
    device = DEV
    tokenizer = AutoTokenizer.from_pretrained("microsoft/Phi-3.5-mini-instruct")
    model = AutoModelForCausalLM.from_pretrained("microsoft/Phi-3.5-mini-instruct").to(device)
    prompt = "def add(a, b):"
    """,
    """
    input_ids = tokenizer(prompt, return_tensors="pt").input_ids
    response = model.generate(input_ids, max_new_tokens=2)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("input_ids", "cpu"),),
    fix="moves input_ids to device where it is made: tokenizer(...).input_ids.to(device)",
    check="response.device == torch.device(DEV) and response.shape[-1] == len(prompt) + 2",
    message="(when checking argument for argument index in method wrapper_CUDA__index_select)",
)
