"""config/data_paths.py: which data values are paths."""

from __future__ import annotations

from jeanzay_kit.config.data_paths import path_values


def test_path_like_keys_nested_and_lists_and_no_urls() -> None:
    data = {
        "_target_": "my.Data",
        "path": "/scratch/set",
        "cache_dir": "cache",
        "train_files": ["a.bin", "b.bin"],
        "url_root": "https://example.org/set",
        "size": 10,
        "tokenizer": {"vocab_file": "vocab.json", "name": "bpe"},
        "empty_path": "",
        "seed_file": None,
    }
    assert path_values(data) == [
        ("data.path", "/scratch/set"),
        ("data.cache_dir", "cache"),
        ("data.train_files[0]", "a.bin"),
        ("data.train_files[1]", "b.bin"),
        ("data.tokenizer.vocab_file", "vocab.json"),
    ]
