"""mozilla/TTS's ``sequence_mask`` makes ``torch.arange(max_len)`` on the CPU.

mozilla/TTS#473, fixed again by PR #549: in the masked L1 loss, ``seq_range =
torch.arange(max_len)`` has no device while the lengths are on cuda ("torch.arange returns a
tensor on cpu for me even though the input was on cuda"); the PR makes the range on the
lengths' device. Library code: the user can only upgrade or compute the loss
where the library's constants are.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from tts_reduced import L1LossMasked
    criterion = L1LossMasked()
    decoder_output = torch.randn(2, 5, 3, device=DEV)
    mel_input = torch.randn(2, 5, 3, device=DEV)
    mel_lengths = torch.tensor([5, 3], device=DEV)
    """,
    """
    loss = criterion(decoder_output, mel_input, mel_lengths)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("seq_range|torch.arange(max_len)", "cpu"),),
    fix="names the library's torch.arange(max_len) (needs device=sequence_length.device); user-side: upgrade",
    check="loss.dim() == 0",
)
