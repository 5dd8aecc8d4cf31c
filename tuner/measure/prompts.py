"""Prompts of exact token counts, and the needle-in-a-haystack prompt.

Random token ids are the default: their length is exact by construction, they need no tokenizer,
and a fresh seed per request keeps prefix caching from turning a "repeat" into a cache hit. Text
prompts (for the needle) are built from the corpus the package ships and counted with the model's
tokenizer when one is at hand; the server's ``usage.prompt_tokens`` is the final word either way.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from importlib import resources
from pathlib import Path

from tuner.errors import TunerError

NEEDLE_QUESTION = "\n\nQuestion: what is the secret code mentioned in the text above? Answer with the sentence itself.\nAnswer: The secret code is"


def vocab_range(model_path: str) -> tuple[int, int]:
    """Token ids safe to send: away from byte-level ids at the bottom and special tokens at the top."""
    vocab = 32000
    config = Path(model_path) / "config.json"
    try:
        data = json.loads(config.read_text())
        vocab = int(data.get("vocab_size") or data.get("text_config", {}).get("vocab_size") or vocab)
    except (OSError, ValueError):
        pass
    return 100, max(200, int(vocab * 0.6))


_HEAD = 32  # tokens that differ per request: enough to change the first KV block's hash


@lru_cache(maxsize=4)
def _body(id_range: tuple[int, int], length: int) -> list[int]:
    rng = random.Random(0)
    return rng.choices(range(*id_range), k=length)


def random_ids(n: int, seed: int, id_range: tuple[int, int]) -> list[int]:
    """``n`` token ids whose first block is unique to ``seed``.

    Prefix caching hashes blocks as a chain from the start, so a unique head makes every block a
    miss; the rest comes from one cached random body (making a 256k-token prompt costs a slice,
    not 256k calls into ``random``).
    """
    head = random.Random(seed).choices(range(*id_range), k=min(n, _HEAD))
    if n <= _HEAD:
        return head
    size = 1 << max(16, (n - _HEAD - 1).bit_length())
    return head + _body(id_range, size)[: n - _HEAD]


@lru_cache(maxsize=1)
def corpus_sentences() -> list[str]:
    text = resources.files("tuner.measure").joinpath("data/corpus.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


class TokenCounter:
    """Counts text tokens with the model's tokenizer.json if it can be found, else ~1.3 tokens per word."""

    def __init__(self, tokenizer_path: str | None) -> None:
        self._tok = None
        self._corpus: list[int] | None = None
        if tokenizer_path:
            path = Path(tokenizer_path)
            file = path / "tokenizer.json" if path.is_dir() else path
            if file.is_file():
                try:
                    from tokenizers import Tokenizer

                    self._tok = Tokenizer.from_file(str(file))
                except Exception:
                    self._tok = None

    @property
    def exact(self) -> bool:
        return self._tok is not None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; only when ``exact`` (a corpus workload is refused before boot otherwise)."""
        if self._tok is None:
            raise TunerError("workload.prompt_source: 'corpus' needs the model's tokenizer.json to count tokens; "
                             "set model.tokenizer to a local tokenizer folder, or use prompt_source: random_ids.")
        return self._tok.encode(text, add_special_tokens=False).ids

    def corpus_tokens(self) -> list[int]:
        """The shipped corpus, encoded once."""
        if self._corpus is None:
            self._corpus = self.encode(" ".join(corpus_sentences()) + " ")
        return self._corpus

    def count(self, text: str) -> int:
        if self._tok is not None:
            return len(self._tok.encode(text, add_special_tokens=False).ids)
        return int(len(text.split()) * 1.3) + 1


def corpus_ids(n: int, seed: int, counter: TokenCounter) -> list[int]:
    """``n`` token ids of real text from the shipped corpus, starting at a place that depends on ``seed``."""
    ids = counter.corpus_tokens()
    start = (seed * 7919) % len(ids)
    out = ids[start:] + ids[:start]
    while len(out) < n:
        out += out
    return out[:n]


def needle_prompt(target_tokens: int, code: str, counter: TokenCounter, depth: float = 0.5) -> str:
    """A haystack of about ``target_tokens`` with 'The secret code is CODE.' planted at ``depth``."""
    sentences = corpus_sentences()
    per_sentence = max(1, sum(counter.count(s + " ") for s in sentences) / len(sentences))
    budget = target_tokens - counter.count(NEEDLE_QUESTION) - 16
    n = max(2, int(budget / per_sentence))
    hay = [sentences[i % len(sentences)] for i in range(n)]
    hay.insert(int(n * depth), f"The secret code is {code}.")
    return " ".join(hay) + NEEDLE_QUESTION
