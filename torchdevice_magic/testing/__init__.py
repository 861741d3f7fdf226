"""Test support: the simulated accelerator, a second device with data for machines without a GPU.

    from torchdevice_magic.testing import simulated_accelerator
    device_type = simulated_accelerator()          # "simdev"
    simulated_accelerator(devices=2)               # simdev:0 and simdev:1

:mod:`.backend` is the PrivateUse1 backend itself; :mod:`.cuda_rules` holds the device rules it
takes from CUDA (which mixes are allowed, and the message each operator family raises).
"""

from __future__ import annotations

from .backend import DEVICE_TYPE, DEVICES_VARIABLE, is_registered, simulated_accelerator

__all__ = ["DEVICES_VARIABLE", "DEVICE_TYPE", "is_registered", "simulated_accelerator"]
