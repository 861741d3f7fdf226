"""Tokenizer output passed to ``generate()`` of a model on the GPU, still on the CPU.

pinecone-io/examples#214. In ``abstractive-question-answering.ipynb``, ``generate_answer``
tokenized the query with ``tokenizer([query], max_length=1024, return_tensors="pt")`` and called
``generator.generate(inputs["input_ids"], num_beams=2, min_length=20, max_length=40)`` with the
generator on cuda: "Expected all tensors to be on the same device". The issue is still open and
records no fix; the expected one is what transformers' own warning asks for: put the tokenized
inputs on the generator's device (``inputs = inputs.to(device)``) before ``generate()``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from transformers_reduced import AutoModelForCausalLM, AutoTokenizer
    device = DEV
    tokenizer = AutoTokenizer.from_pretrained("vblagoje/bart_lfqa")
    generator = AutoModelForCausalLM.from_pretrained("vblagoje/bart_lfqa").to(device)

    def generate_answer(query):
        inputs = tokenizer([query], max_length=1024, return_tensors="pt")
        ids = generator.generate(inputs["input_ids"], num_beams=2, min_length=2, max_length=8)
        answer = tokenizer.batch_decode(ids, skip_special_tokens=True)[0]
        return answer
    """,
    """
    query = "when was the first electric power system built?"
    answer = generate_answer(query)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("inputs|input_ids", "cpu"),),
    fix="moves the tokenizer's batch to DEV in generate_answer: inputs = inputs.to(device)",
    # the reduced generate() returns the prompt and one new token (max_length is below the
    # prompt length), decoded one letter per token
    check='isinstance(answer, str) and len(answer) == len(tokenizer([query])["input_ids"][0]) + 1',
)
