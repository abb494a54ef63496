"""Random draws that every data-parallel worker makes alike, without touching torch's
global generator (which workers consume differently: dropout on different batches).

fairseq's ``utils.set_torch_seed``/``data_utils.numpy_seed`` reseed the *global* generators;
here each draw gets its own ``torch.Generator`` seeded from fairseq's ``--seed`` and the
numbers that identify the draw (update number, draw index within the update, stream).
"""
import torch

# one multiplier per position, so that (seed, a, b, c) tuples do not collide in practice
_MULTIPLIERS = (1_000_003, 10_007, 101)


def seeded_generator(seed: int, *numbers: int) -> torch.Generator:
    """A generator determined by ``seed`` and up to three further numbers."""
    if len(numbers) > len(_MULTIPLIERS):
        raise ValueError(f"seeded_generator takes at most {len(_MULTIPLIERS)} numbers after the seed")
    mixed = int(seed)
    for multiplier, number in zip(_MULTIPLIERS, numbers):
        mixed = mixed * multiplier + int(number)
    generator = torch.Generator()
    generator.manual_seed(mixed % (2**63 - 1))
    return generator
