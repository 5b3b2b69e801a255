"""The project's own Countdown tokenizer: one token per character, plus whole-tag tokens.

Shipped as `tiny_tokenizer/` (a `tokenizer.json` that `PreTrainedTokenizerFast` loads).
Rebuild it with `python -m ablate.models.tokenizer` after changing the alphabet.
"""

from __future__ import annotations

import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

TOKENIZER_DIR = Path(__file__).resolve().parent / "tiny_tokenizer"

SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]
TAGS = ["<think>", "</think>", "<answer>", "</answer>", "<calc>", "</calc>", "<result>", "</result>"]
# Every printable ASCII character (digits, operators, letters for the oracle's words) and newline.
CHARACTERS = sorted(set(string.printable) - set("\r\x0b\x0c\t"))


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate(SPECIAL + TAGS + CHARACTERS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>",
                                        eos_token="<eos>", unk_token="<unk>")
    tokenizer.add_tokens(TAGS)  # whole tokens, decoded as text (not special)
    return tokenizer


def load_tiny_tokenizer() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast.from_pretrained(str(TOKENIZER_DIR))


if __name__ == "__main__":
    build_tokenizer().save_pretrained(str(TOKENIZER_DIR))
    print(f"wrote {TOKENIZER_DIR}")
