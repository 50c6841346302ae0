"""LAB FIXTURE generator: writes the small tokenizer that the lab's planted model directory ships.

The real router loads `tokenizer.json` from `--tokenizer-path` (the model directory) and exits when there is
none; a real DeepSeek-V4-Flash checkpoint ships its own. Lab hosts get this word-level tokenizer over the
lab stand-in's vocabulary instead, made offline with the `tokenizers` package of the contract venv:

    $(scripts/sglang-contract-venv.sh) scripts/make_lab_tokenizer.py roles/lab_hosts/files/model
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers

SPECIAL = ["<unk>", "<eos>", "<bos>"]


def vocabulary() -> list[str]:
    standin = Path(__file__).resolve().parent.parent / "roles/lab_hosts/files/sglang_lab_standin.py"
    namespace: dict[str, object] = {}
    source = standin.read_text()
    start = source.index("VOCAB = (")
    exec(source[start : source.index(".split()", start) + len(".split()")], namespace)  # noqa: S102 - our own file
    return list(namespace["VOCAB"])  # type: ignore[arg-type]


def main(target: str) -> int:
    words = SPECIAL + [w for w in vocabulary() if w not in SPECIAL]
    unknown = SPECIAL[0]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=unknown))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    out = Path(target)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "_lab_note": "LAB FIXTURE: a word-level tokenizer over the lab stand-in's vocabulary, not DeepSeek's.",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "unk_token": "<unk>",
        "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "roles/lab_hosts/files/model"))
