"""The rules table: one :class:`~.schema.Rule` per family of device errors, most specific first.

Pure data (the schema, with what every field means, is :mod:`.schema`; the readers named here
are in :mod:`.readers`). A family that is not here is still recognised by the generic wording
check in :mod:`.messages`.

Texts come from PyTorch 1.x-2.14 sources: ``c10/core/TensorImpl``/``aten/src/ATen/native``
(``TORCH_CHECK`` texts, ``TensorIterator``, ``adaption.cpp``, ``TensorUtils.cpp``),
``torch/_prims_common``, ``torch/_refs``, ``torch/_meta_registrations.py``,
``torch/_subclasses/fake_tensor.py`` / ``fake_impls.py``, ``torch/nn``.
"""

from __future__ import annotations

from .readers import (
    read_conv_types,
    read_found_two,
    read_meta_only,
    read_meta_operator,
    read_must_be_cpu,
    read_not_backend_tensor,
    read_on_cpu,
    read_same_gpu,
    read_value_device,
)
from .schema import DEVICE_OR_REPR, Destination, Movers, Rule, device_group

__all__ = ["GENERIC", "RULES"]

_MOVE_INDEX_NOTE = (
    "index tensors must be on the CPU or on the indexed tensor's device ({expected}): "
    "move the index tensor, not the data."
)

#: The one table, most specific first.
RULES: tuple[Rule, ...] = (
    Rule(
        # TensorIterator::compute_types, FakeTensor (2.1+); suffixed: adaption.cpp in 1.11-2.0,
        # including the misspelled "arugment" some 1.x releases shipped.
        "found_two_devices",
        (
            r"Expected all tensors to be on the same device, but found at least two devices, "
            + device_group("a")
            + " and "
            + device_group("b")
            + r"!?(?:\s*\(when checking ar(?:gu|ug)ment for argument (?P<arg>[\w.]+) in method "
            r"(?P<op>[\w.:<>]+)\))?",
        ),
        reader=read_found_two,
    ),
    Rule(
        "different_from_other",  # adaption.cpp, 2.1+
        (
            r"Expected all tensors to be on the same device, but got (?P<arg>[\w.]+) is on "
            + device_group("got")
            + r", different from other tensors on "
            + device_group("want")
            + r"(?:\s*\(when checking argument in method (?P<op>[\w.:<>]+)\))?",
        ),
    ),
    Rule(
        "expected_cpu_tensor",  # sparse addmm on the CPU
        (
            r"Expected all tensors to be on the same device\.\s*(?P<op>\w+):? expected "
            r"'(?P<arg>\w+)' to be (?:an? )?(?P<want>\w+) tensor, but got (?:an? )?tensor on "
            + device_group("got"),
        ),
    ),
    Rule(
        # torch._prims_common.check_same_device: cpu+meta on torch 2.x (meta kernels)
        "not_on_expected_device",
        (
            r"Tensor on device "
            + device_group("got")
            + r" is not on the expected device "
            + device_group("want"),
            r"Tensor device mismatch! Expected: "
            + device_group("want", DEVICE_OR_REPR)
            + ", Got: "
            + device_group("got", DEVICE_OR_REPR),
        ),
    ),
    Rule(
        "conv_type",  # Convolution.cpp check_input_same_type_as_parameters
        (
            r"Input type \((?P<input>[^()]+)\) and (?P<which>weight|bias) type "
            r"\((?P<weight>[^()]+)\) should be the same",
        ),
        reader=read_conv_types,
        converts_dtype=True,
    ),
    # ---- out= tensors ---------------------------------------------------------------------
    Rule(
        "out_copy",  # torch/_prims_common/wrappers.py _safe_copy_out, torch/_refs copy_to
        (
            r"Attempting to copy from device "
            + device_group("want", DEVICE_OR_REPR)
            + r" to device "
            + device_group("got", DEVICE_OR_REPR)
            + r", but cross-device copies are not allowed",
        ),
        target=Destination.EXPECTED,
        movers=Movers.OUT,
        argument="out",
        note="an out= tensor must be on the device the result is computed on ({expected}): "
        "move (or re-create) the out tensor there; its old values are overwritten anyway.",
    ),
    Rule(
        "out_device",  # _prims_common / meta registrations, linalg, multi_dot, dot, ...
        (
            r"Expected out tensor to have device "
            + device_group("want", DEVICE_OR_REPR)
            + r", but got "
            r"" + device_group("got", DEVICE_OR_REPR) + r" instead",
            r"(?P<op>[\w.]+)\(\): expected out tensor to be on device "
            + device_group("want", DEVICE_OR_REPR)
            + r" but got "
            + device_group("got", DEVICE_OR_REPR),
            r"(?P<op>[\w.]+): Expected the output and input tensors to be on the same device, "
            r"but got the output tensor on "
            + device_group("got")
            + r" and the input tensor on "
            + device_group("want"),
            r"(?P<op>[\w.]+): Expected (?P<arg>\w+) and input tensors to be on the same device, "
            r"but got \w+ on " + device_group("got") + " and input on " + device_group("want"),
            r"(?P<op>[\w.]+\.dims): output must be on the same device as input",
            r"out Tensor doesn't have the correct device set",
            r"Expected all tensors to be on the same device\. (?P<op>\w+) expected '(?P<arg>out)' "
            r"to be (?P<want>\w+) tensor, but got tensor on " + device_group("got"),
        ),
        target=Destination.EXPECTED,
        movers=Movers.OUT,
        argument="out",
        note="an out= tensor must be on the device the result is computed on ({expected}): "
        "move (or re-create) the out tensor there; its old values are overwritten anyway.",
    ),
    Rule(
        "out_device_type",  # torch/csrc/utils/out_types.cpp check_out_type_matches (factories)
        (
            r"device type "
            + device_group("want", r"\w+")
            + r" does not match device type of out parameter \("
            + device_group("got", r"\w+")
            + r"\)",
        ),
        target=Destination.EXPECTED,
        movers=Movers.OUT,
        argument="out",
        note="a factory function (arange, zeros, randn, ...) called with out= and device= "
        "must get an out tensor on that device: move the out tensor to {expected}, or drop "
        "the device= argument.",
    ),
    # ---- index / scatter / gather ----------------------------------------------------------
    Rule(
        "indices_device",  # TensorAdvancedIndexing.cpp
        (
            r"indices should be either on \w+ or on the same device as the indexed tensor "
            r"\(" + device_group("want") + r"\)",
        ),
        target=Destination.EXPECTED,
        movers=Movers.INDEX,
        operator="index",
        argument="indices",
        note=_MOVE_INDEX_NOTE,
        reason="move the index tensor to the indexed tensor's device",
        lists_every_device=True,
        offers_accelerator=False,
    ),
    Rule(
        "index_op_devices",  # index_add / index_copy / index_fill / masked ops, _refs
        (
            r"(?P<op>index_\w+)\(\): self, index and source expected to be in the same device, "
            r"but got \(self\) "
            + device_group("want")
            + r", \(index\) "
            + device_group("a")
            + r",? and \(source\) "
            r"" + device_group("b"),
            r"expected self and mask to be on the same device, but got mask on "
            + device_group("got")
            + " and self on "
            + device_group("want"),
            r"Mismatching (?P<op>[\w.]+) device between self \("
            + device_group("want", DEVICE_OR_REPR)
            + r"\) and "
            r"values \(" + device_group("got", DEVICE_OR_REPR) + r"\)",
            r"Mismatching (?P<op>[\w.]+) device between self and values",
        ),
        target=Destination.EXPECTED,
        note="the indexed tensor (self) decides the device; move the other tensors there.",
    ),
    Rule(
        "value_device",  # index_put_ / put_ with values elsewhere
        (
            r"expected device "
            + device_group("want", DEVICE_OR_REPR)
            + r" but got device "
            + device_group("got", DEVICE_OR_REPR)
            + r"(?: for (?P<arg>\w+) tensor)?",
        ),
        target=Destination.EXPECTED,
        reader=read_value_device,
        reason="move the index tensor to the indexed tensor's device",
    ),
    Rule(
        "device_type_check",  # TensorUtils.cpp checkDeviceType / checkDevice (take_along_dim)
        (
            r"Expected tensor to have (?P<want>[\w:]+) Device(?:Type)?, but got tensor with "
            r"(?P<got>[\w:]+) Device(?:Type)?(?: \(while checking arguments for (?P<op>[\w.:]+)\))?",
        ),
        target=Destination.EXPECTED,
    ),
    Rule(
        "must_be_cpu",  # arguments that must live on the CPU whatever the data's device
        (
            r"tensor_split expected (?P<arg>tensor_indices_or_sections) to be on cpu, but it's "
            r"on " + device_group("got"),
        ),
        target=Destination.CPU,
        movers=Movers.INDEX,
        operator="tensor_split",
        reader=read_must_be_cpu,
        note="{argument} is read on the host: it must be a CPU tensor whatever the data's "
        "device (or pass a list of ints).",
    ),
    Rule(
        "scalar_on_cpu",
        (r"Expected scalars to be on CPU, got " + device_group("got") + " instead",),
        target=Destination.CPU,
        reader=read_must_be_cpu,
    ),
    # ---- CUDA-side argument checks (TensorUtils.cpp), THC-era messages ----------------------
    Rule(
        "tensor_on_cpu",
        (
            r"Tensor for (?:argument #\d+ )?'(?P<arg>[\w.]+)' is on CPU, .*?but expected "
            r"(?:it|them) to be on GPU \(while checking arguments for (?P<op>[\w.:]+)\)",
        ),
        target=Destination.EXPECTED,
        reader=read_on_cpu,
    ),
    Rule(
        # lazy / XLA-style backends: "Input tensor is not a lazy tensor: torch.FloatTensor"
        "not_backend_tensor",
        (r"Input tensor is not an? (?P<want>\w+) tensor: (?P<type>torch\.(?:\w+\.)?\w+Tensor)",),
        target=Destination.EXPECTED,
        reader=read_not_backend_tensor,
    ),
    Rule(
        "same_gpu",
        (
            r"Expected tensor for (?:argument #\d+ )?'(?P<arg>[\w.]+)' to have the same device "
            r"as tensor for (?:argument #\d+ )?'[\w.]+'; but device (?P<got>\d+) does not equal "
            r"(?P<want>\d+)(?: \(while checking arguments for (?P<op>[\w.:]+)\))?",
        ),
        reader=read_same_gpu,
    ),
    Rule(
        "device_type_arg",
        (
            r"Expected object of device type (?P<want>\w+) but got device type (?P<got>\w+) "
            r"for argument #\d+ '(?P<arg>[\w.]+)'(?: in call to (?P<op>[\w.:]+))?",
        ),
        target=Destination.EXPECTED,
    ),
    Rule(
        "backend_arg",
        (
            r"Expected object of backend (?P<want>\w+) but got backend (?P<got>\w+) "
            r"for argument #\d+ '(?P<arg>[\w.]+)'(?: in call to (?P<op>[\w.:]+))?",
        ),
        target=Destination.EXPECTED,
    ),
    # ---- modules ---------------------------------------------------------------------------
    Rule(
        "rnn_params",  # RNN.h check_attributes
        (
            r"Input and (?P<arg>parameter) tensors are not at the same device, found input "
            r"tensor at " + device_group("a") + r" and parameter tensor at " + device_group("b"),
        ),
    ),
    Rule(
        "rnn_hidden",
        (
            r"Input and (?P<arg>hidden) tensors are not at the same device, found input "
            r"tensor at " + device_group("want") + r" and hidden tensor at " + device_group("got"),
        ),
        target=Destination.EXPECTED,
        note="the RNN's hidden state (h0, or the (h0, c0) tuple for an LSTM) must be on the "
        "input's device too: move it, or create it with device=x.device.",
    ),
    Rule(
        "data_parallel",  # torch/nn/parallel/data_parallel.py
        (
            r"module must have its parameters and buffers on device "
            + device_group("want")
            + r" \(device_ids\[0\]\) but found one of them on device: "
            + device_group("got", DEVICE_OR_REPR),
        ),
        target=Destination.EXPECTED,
        movers=Movers.MODULES,
        operator="DataParallel",
        reason="DataParallel needs the module on device_ids[0]",
        note="nn.DataParallel keeps the master copy of the module on device_ids[0] and "
        "scatters from there; move the whole module there first: "
        'model.to(f"cuda:{{model.device_ids[0]}}") (here: model.to("{expected}")).',
    ),
    Rule(
        "replica_device",  # DataParallel.replicate / comm
        (
            r"Input 0 is on device "
            + device_group("want", DEVICE_OR_REPR)
            + r" and input \d+ is on device "
            + device_group("got", DEVICE_OR_REPR),
        ),
        target=Destination.EXPECTED,
    ),
    # ---- meta ------------------------------------------------------------------------------
    Rule(
        "meta_copy",  # Tensor.to / Module.to on meta tensors
        (r"Cannot copy out of meta tensor; no data!",),
        target=Destination.REAL,
        movers=Movers.META,
        reader=read_meta_only,
        lists_every_device=True,
        fallback_fix='model.to_empty(device="{destination}")  # then load_state_dict(...)',
        says_meta_stays=False,
        offers_accelerator=False,
    ),
    Rule(
        "meta_inplace",  # torch/_meta_registrations / FakeTensor in-place checks
        (r"Cannot inplace into non-meta tensor with meta tensor argument",),
        target=Destination.REAL,
        movers=Movers.META,
        reader=read_meta_only,
        lists_every_device=True,
        note="an in-place operation on a real tensor got a meta tensor (no data) as an "
        "argument: the meta tensor must be materialised on a real device first.",
    ),
    Rule(
        # codegen'd kernel wrappers (RegisterXXX.cpp) assert the output's device matches the
        # device guard: a backend kernel got inputs from two devices
        "device_guard",
        (r"current_device == options\.device\(\) INTERNAL ASSERT FAILED",),
    ),
    Rule(
        # an operation that needs values (or has no meta kernel) got a meta tensor
        "meta_unsupported",
        (
            r"(?P<op>[\w.]+\(\)) cannot be called on meta tensors",
            r"(?P<op>aten::[\w.]+): attempted to run this operator with Meta tensors",
            r"Cannot access data pointer of Tensor .*meta",
        ),
        target=Destination.REAL,
        movers=Movers.META,
        reader=read_meta_operator,
        lists_every_device=True,
        note="{operator} needs real values, and meta tensors have none: the meta tensor must "
        "be created (or its module materialised with to_empty and reloaded) on a real device.",
    ),
    Rule(
        "set_storage_device",  # Tensor.set_ / storage swaps
        (
            r"Attempted to set the storage of a tensor on device \"?"
            + device_group("want")
            + r"\"? to a storage on different device \"?"
            + device_group("got"),
        ),
        target=Destination.EXPECTED,
    ),
    # ---- autograd, generators, FakeTensor ----------------------------------------------------
    Rule(
        "grad_device",
        (
            r"attempting to assign a gradient with device type '(?P<got>\w+)' to a tensor "
            r"with device type '(?P<want>\w+)'",
            r"attempting to assign a gradient located on device with index '(?P<got>\d+)' to a "
            r"tensor located on device with index '(?P<want>\d+)'",
        ),
        target=Destination.EXPECTED,
        argument="grad",
    ),
    Rule(
        "fake_tensor_propagation",
        (
            r"Unhandled FakeTensor Device Propagation for (?P<op>[\w.]+), found two different "
            r"devices " + device_group("a") + ", " + device_group("b"),
        ),
    ),
    Rule(
        "fake_tensor_wrapped",  # torch/_subclasses/fake_tensor.py
        (
            r"FakeTensor is wrapped to wrong device, found "
            + device_group("got", DEVICE_OR_REPR)
            + ", expected "
            + device_group("want", DEVICE_OR_REPR),
        ),
        target=Destination.EXPECTED,
        note="a FakeTensor created for {devices} met tensors on another device while tracing "
        "(torch.compile / FakeTensorMode): create every input on one device.",
    ),
    Rule(
        "generator_device",
        (r"Expected a '(?P<want>\w+)' device type for generator but found '(?P<got>\w+)'",),
        target=Destination.NONE,
        argument="generator",
        replacement_fix='generator = torch.Generator(device="{destination}")  '
        "# pass generator=generator",
        note="a torch.Generator lives on one device; the operation (often a shuffling "
        "DataLoader or randperm under torch.set_default_device) wanted one on {expected}: "
        'pass generator=torch.Generator(device="{expected}").',
    ),
    Rule(
        "gradient_devices",
        (
            r"torch\.gradient expected each tensor to be on the same device, but got devices "
            + device_group("a")
            + " and "
            + device_group("b"),
        ),
        operator="gradient",
    ),
    Rule(
        "pair_devices",  # ``{op}: X and Y must/expected ... same device, got A and B``
        (
            r"(?P<op>[\w.]+)\(\)?:? expected input and grid to be on same device, but input is "
            r"on " + device_group("a") + " and grid is on " + device_group("b"),
            r"(?P<op>i?stft) input and window must be on the same device but got self on "
            + device_group("a")
            + r" and window on "
            + device_group("b"),
            r"(?P<op>[\w.]+): self and key must be on the same device, got "
            + device_group("a")
            + " and "
            r"" + device_group("b"),
            r"Expected divisor \(b\) to be on the same device \("
            + device_group("a")
            + r"\) as dividend "
            r"\(a\), but it is found on " + device_group("b"),
            r"expected (?P<arg>condition), x and y to be on the same device, but condition is "
            r"on " + device_group("a") + r" and x and y are on " + device_group("b"),
        ),
    ),
)

#: Any other device wording (:mod:`.messages` decides when a message is one): the default policy.
GENERIC = Rule("generic", ())
