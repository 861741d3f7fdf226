"""Out-of-memory errors explained: CUDA's message parsed into its figures, a real CPU allocation
failure in process and in a real kernel, and CUDA's own (on a GPU).
"""

import pytest
import torch
from memorykit import notebook, outputs_text, run, timeline_of
from nbclient import NotebookClient

from torchdevice_magic.memory import (
    explain_oom,
    parse_oom,
)

# -- out of memory ---------------------------------------------------------------------------------

#: the caching allocator's texts, as torch 2.0 .. 2.14 print them (c10/cuda/CUDACachingAllocator.cpp)
CUDA_TEXTS = [
    # <= 2.0
    (
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
        "14.56 GiB already allocated; 3.06 MiB free; 14.69 GiB reserved in total by PyTorch) "
        "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
        "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
        dict(device="cuda:0", request=20 << 20, allocated=round(14.56 * (1 << 30))),
    ),
    # 2.1 (with its "capacty" typo and max_split_size_mb advice)
    (
        "CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacty of 23.69 GiB "
        "of which 7.11 GiB is free. Process 2006998 has 256.00 MiB memory in use. Including "
        "non-PyTorch memory, this process has 16.31 GiB memory in use. Of the allocated memory "
        "16.01 GiB is allocated by PyTorch, and 7.47 MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
        "and PYTORCH_CUDA_ALLOC_CONF",
        dict(device="cuda:0", request=8 << 30, other_processes=256 << 20),
    ),
    # 2.2 .. 2.5
    (
        "CUDA out of memory. Tried to allocate 1.22 GiB. GPU 1 has a total capacity of 15.77 GiB "
        "of which 959.44 MiB is free. Including non-PyTorch memory, this process has 14.83 GiB "
        "memory in use. Of the allocated memory 14.01 GiB is allocated by PyTorch, and 472.05 "
        "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        dict(device="cuda:1", request=round(1.22 * (1 << 30)), free=round(959.44 * (1 << 20))),
    ),
    # 2.6+: private pools (CUDA graphs), per-process fraction, docs.pytorch.org link
    (
        "CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacity of 83.05 "
        "GiB of which 140.38 MiB is free. Including non-PyTorch memory, this process has 23.33 "
        "GiB memory in use. 40.00 GiB allowed; Of the allocated memory 21.92 GiB is allocated "
        "by PyTorch, with 104.00 MiB allocated in private pools (e.g., CUDA Graphs), and 797.79 "
        "MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/"
        "docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
        dict(device="cuda:0", request=768 << 20, private_pools=104 << 20, allowed=40 << 30),
    ),
    # small requests are printed in bytes / KiB
    (
        "CUDA out of memory. Tried to allocate 512 bytes. GPU 0 has a total capacity of "
        "47.53 GiB of which 896.00 KiB is free. Process 1686436 has 47.51 GiB memory in use. "
        "Of the allocated memory 47.00 GiB is allocated by PyTorch, and 149.10 MiB is reserved "
        "by PyTorch but unallocated.",
        dict(device="cuda:0", request=512, free=896 << 10),
    ),
    (
        "XPU out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.00 GiB "
        "of which 1.00 GiB is free. Of the allocated memory 13.00 GiB is allocated by PyTorch, "
        "and 512.00 MiB is reserved by PyTorch but unallocated. Please use `empty_cache` to "
        "release all unoccupied cached memory.",
        dict(device="xpu:0", request=2 << 30, reserved_unallocated=512 << 20),
    ),
    (
        "MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB, max "
        "allowed: 18.13 GB). Tried to allocate 256.00 MB on private pool. Use "
        "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations",
        dict(device="mps", request=256 << 20, allocated=17 << 30),
    ),
]


@pytest.mark.parametrize(("message", "expected"), CUDA_TEXTS)
def test_out_of_memory_texts_are_parsed(message, expected):
    facts = parse_oom(f"torch.OutOfMemoryError: {message}")
    assert facts is not None
    for name, value in expected.items():
        assert getattr(facts, name) == value, name


def test_reserved_unallocated_and_non_pytorch_memory_from_the_text():
    facts = parse_oom(CUDA_TEXTS[2][0])
    mib, gib = 1 << 20, 1 << 30
    assert facts.reserved_unallocated == round(472.05 * mib)
    process, allocated = round(14.83 * gib), round(14.01 * gib)
    assert facts.non_pytorch == process - allocated - round(472.05 * mib)
    assert facts.total == round(15.77 * gib)


def test_other_errors_are_not_out_of_memory():
    assert parse_oom("Expected all tensors to be on the same device") is None
    assert explain_oom(ValueError("nope"), {}) is None


def test_a_real_cpu_allocation_failure_explained_in_process(last_error):
    big = torch.zeros(1000, 250)
    history = torch.ones(2000)
    namespace = {"big": big, "small": torch.ones(3), "Out": {2: history}}
    del history
    with pytest.raises(RuntimeError) as caught:
        torch.empty(2**40, dtype=torch.uint8)
    explanation = explain_oom(caught.value, namespace)
    assert explanation.facts.device == "cpu" and explanation.facts.request == 2**40
    assert explanation.biggest[0] == ("big", 1_000_000)
    assert [h.where for h in explanation.holders] == ["Out[2]"]
    text = explanation.text()
    assert "Out of memory on cpu: the request was 1.0 TiB." in text
    assert "Out[2]: 7.8 KiB -> %devices --release 0" in text
    assert "freeing memory cannot help" in text  # 1 TiB is more than this machine has
    assert "Out" in namespace and namespace["Out"][2] is not None  # nothing freed by itself


# -- a real kernel -------------------------------------------------------------------------------


@pytest.mark.kernel
def test_real_kernel_cpu_oom_and_a_batch_held_by_a_failed_train():
    nb = notebook(
        "%load_ext torchdevice_magic",
        "import torch, weakref\n"
        "weights = torch.zeros(500, 500)\n"
        "made = []\n"
        "def batches():\n"
        "    for _ in range(3):\n"
        "        batch = torch.randn(128, 1024)\n"
        "        made.append(weakref.ref(batch))\n"
        "        yield batch\n"
        "def train(loader):\n"
        "    for batch in loader:\n"
        "        out = batch @ weights[:0]  # shapes do not match: fails on the first batch\n",
        "train(batches())",
        "%devices --holders",
        "%devices --release 0",
        "print('batch freed:', all(ref() is None for ref in made))",
        "torch.ones(512, 256)",  # displayed: Out holds 512.0 KiB
        "torch.empty(2**40, dtype=torch.uint8)",
    )
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    listed = outputs_text(nb.cells[3])
    assert "[0] last error (RuntimeError): train() local 'batch'" in listed
    assert "512.0 KiB on cpu" in listed  # one 128x1024 float32 batch
    assert "freed 512.0 KiB" in outputs_text(nb.cells[4])
    assert "batch freed: True" in outputs_text(nb.cells[5])
    oom = outputs_text(nb.cells[7])
    assert "Out of memory on cpu: the request was 1.0 TiB." in oom
    assert "Biggest named objects on cpu:\n  weights: 976.6 KiB" in oom
    assert "Held outside named variables on cpu:\n  [0] Out[7] (also _7, _): 512.0 KiB" in oom
    assert "-> %devices --release 0" in oom and "nothing was freed for you" in oom


# -- CUDA (skipped without a GPU; ./dev gpu-check runs these) ---------------------------------------


@pytest.mark.cuda
def test_real_cuda_oom_explained_with_allocator_figures_and_the_cell_peak(ip):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    run(ip, "import torch\nx = torch.ones(1024, 1024, device='cuda')")  # initialises CUDA
    run(ip, "y = torch.ones(2048, 1024, device='cuda')\ndel y")  # 8 MiB peak, nothing kept
    rows = [r for r in timeline_of(ip).rows if r.device == "cuda:0"]
    assert rows[-1].delta == 0 and rows[-1].peak >= 4 * 2**20 + 8 * 2**20
    assert rows[-1].allocated >= 4 * 2**20
    total = torch.cuda.get_device_properties(0).total_memory
    result, _, shown = run(ip, f"torch.empty({2 * total}, dtype=torch.uint8, device='cuda')")
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    facts = parse_oom(str(result.error_in_exec))
    assert facts.device == "cuda:0" and abs(facts.request - 2 * total) <= 0.01 * total
    assert "Out of memory on cuda:0" in shown and "x: 4.0 MiB" in shown
    assert "Reserved by PyTorch but unallocated" in shown
