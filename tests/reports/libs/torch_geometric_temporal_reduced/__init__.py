"""Reduced copy of torch_geometric_temporal's recurrent graph cells (version 0.1, January 2021).

Mirrors ``torch_geometric_temporal/nn/recurrent/dcrnn.py`` and ``gconv_gru.py``: when no hidden
state is passed, ``_set_hidden_state`` makes ``H`` with ``torch.zeros`` and no device (the
bug of pytorch_geometric_temporal#18 and #20). The graph convolutions are reduced to one
linear map of the node features; the hidden-state path is the library's.
"""

from __future__ import annotations

import torch


class DCRNN(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int, K: int = 1) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.conv_x_z = torch.nn.Linear(in_channels + out_channels, out_channels)
        self.conv_x_h = torch.nn.Linear(in_channels + out_channels, out_channels)

    def _set_hidden_state(self, X, H):
        if H is None:
            H = torch.zeros(X.shape[0], self.out_channels)
        return H

    def forward(self, X, edge_index, edge_weight=None, H=None):
        H = self._set_hidden_state(X, H)
        Z = torch.cat([X, H], dim=1)
        Z = torch.sigmoid(self.conv_x_z(Z))
        H_tilde = torch.tanh(self.conv_x_h(torch.cat([X, H * Z], dim=1)))
        return Z * H + (1 - Z) * H_tilde


class GConvGRU(torch.nn.Module):
    def __init__(self, in_channels: int, out_channels: int, K: int = 1) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.conv_x_z = torch.nn.Linear(in_channels, out_channels)
        self.conv_h_z = torch.nn.Linear(out_channels, out_channels)

    def _set_hidden_state(self, X, H):
        if H is None:
            H = torch.zeros(X.shape[0], self.out_channels)
        return H

    def _calculate_update_gate(self, X, edge_index, edge_weight, H):
        Z = self.conv_x_z(X)
        Z = Z + self.conv_h_z(H)
        return torch.sigmoid(Z)

    def forward(self, X, edge_index, edge_weight=None, H=None):
        H = self._set_hidden_state(X, H)
        Z = self._calculate_update_gate(X, edge_index, edge_weight, H)
        return Z * H
