"""Build the tokenizer and the dataset the torchtitan CPU job trains on, from text this project ships.

torchtitan's wheel ships no test assets, and nothing may come from a model or data hub, so both are made
here, deterministically, from the project's own documentation and source:

    <out>/tokenizer/tokenizer.json          a byte-level BPE (Hugging Face ``tokenizers``), vocab 2048
    <out>/tokenizer/tokenizer_config.json   names <|begin_of_text|> / <|end_of_text|> as bos / eos
    <out>/data/train.jsonl                  one {"text": ...} record per paragraph block (~2 KiB each)

The JSONL is loaded by torchtitan as its ``c4_test`` dataset (``load_dataset(path, split="train")``), with
``--training.dataset_path <out>/data``. Vocab 2048 matches llama3's ``debugmodel`` flavor, so the
embedding and output layers have the shapes that flavor declares.

Usage::

    python launchers/torchtitan_assets.py contracts/torchtitan-cpu/assets
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 2048
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
# The project's own text, in a fixed order: docs first, then every module's source.
SOURCES = ("README.md", "BENCHMARKS.md", "kernels/README.md")
SOURCE_GLOBS = ("infrarsi/**/*.py", "kernels/**/*.py")
MAX_BYTES = 320_000  # ~110k tokens at ~3 bytes/token: more than 20 steps of 8 x 512 tokens need
RECORD_BYTES = 2048


def corpus(root: Path = ROOT, max_bytes: int = MAX_BYTES) -> list[str]:
    """Records of about RECORD_BYTES each, paragraphs kept whole, in a fixed file order."""
    files = [root / s for s in SOURCES if (root / s).is_file()]
    for g in SOURCE_GLOBS:
        files.extend(sorted(p for p in root.glob(g) if "__pycache__" not in p.parts))
    out: list[str] = []
    cur: list[str] = []
    size = total = 0
    for path in files:
        for para in path.read_text(encoding="utf-8").split("\n\n"):
            para = para.strip()
            if not para:
                continue
            cur.append(para)
            size += len(para) + 2
            if size >= RECORD_BYTES:
                out.append("\n\n".join(cur))
                total += size
                cur, size = [], 0
                if total >= max_bytes:
                    return out
    if cur:
        out.append("\n\n".join(cur))
    return out


def build(out_dir: str | Path, *, root: Path = ROOT) -> Path:
    """Write the tokenizer and the dataset under ``out_dir`` (replacing them); returns ``out_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = Path(out_dir)
    records = corpus(root)
    (out / "data").mkdir(parents=True, exist_ok=True)
    (out / "tokenizer").mkdir(parents=True, exist_ok=True)
    tmp = out / "data" / "train.jsonl.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for text in records:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    os.replace(tmp, out / "data" / "train.jsonl")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(records, trainer=trainer)
    tok.save(str(out / "tokenizer" / "tokenizer.json"))
    cfg = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True}
    (out / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", help="where tokenizer/ and data/ are written")
    out = build(ap.parse_args().out_dir)
    print(f"wrote {out}/tokenizer and {out}/data")


if __name__ == "__main__":
    main()
