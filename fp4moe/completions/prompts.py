"""Seeded prompt streams for the serving gate: GSM8K text (no hub) or random token ids.

``gsm8k``: the GSM8K gate's own prompt format (lm-eval's ``gsm8k``: ``Question: ...\\nAnswer:``
after ``num_fewshot`` solved examples), built from the local data folder
(``../shared/data/gsm8k`` when present, else the shipped ``fp4moe/data/gsm8k/mini``). Questions
and few-shot examples are drawn with ``numpy.random.default_rng(seed)``; questions repeat when
more prompts than questions are needed (a server's prefix cache then sees the repeats on base
and head alike). Input length is whatever the text tokenizes to on the server; the gate checks
that base and head count the same ``prompt_tokens``.

``random``: ``input_len`` token ids drawn uniformly from ``[lo, hi)``, exact in tokens without
a tokenizer on the client, since ``/v1/completions`` accepts a list of token ids as ``prompt``
(SGLang's ``CompletionRequest.prompt`` is ``List[int] | str | ...``). Every prompt is distinct,
so no prefix-cache hits. The default id range avoids the low ids where tokenizers keep
special tokens; it must lie inside the model's vocabulary.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DEFAULT_TOKEN_RANGE = (1000, 30000)


def gsm8k_prompts(n: int, *, data_dir: str | Path | None, num_fewshot: int, seed: int) -> list[str]:
    from fp4moe.completions.data import MINI_DATA_DIR, default_data_dir, load_data_dir
    from fp4moe.completions.replay_server import load_records

    data = load_data_dir(data_dir or default_data_dir() or MINI_DATA_DIR, num_fewshot=num_fewshot)
    tests, pool = load_records(data.test_file), load_records(data.fewshot_file)
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(len(tests)) for _ in range(-(-n // len(tests)))])[:n]
    out = []
    for qi in order:
        shots = rng.choice(len(pool), size=num_fewshot, replace=False) if num_fewshot else []
        head = "".join(f"Question: {pool[j]['question']}\nAnswer: {pool[j]['answer']}\n\n" for j in shots)
        out.append(f"{head}Question: {tests[qi]['question']}\nAnswer:")
    return out


def random_token_prompts(n: int, *, input_len: int, seed: int, token_range=DEFAULT_TOKEN_RANGE) -> list[list[int]]:
    lo, hi = token_range
    if input_len < 1:
        raise ValueError(f"--input-len {input_len}: must be >= 1 token")
    if not (0 <= lo < hi):
        raise ValueError(f"--token-range {lo}:{hi}: need 0 <= lo < hi")
    rng = np.random.default_rng(seed)
    return rng.integers(lo, hi, size=(n, input_len)).tolist()


def parse_token_range(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--token-range {text!r}: write LO:HI, e.g. 1000:30000") from None
    return lo, hi
