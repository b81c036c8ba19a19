"""SHA-256 of files: what the manifest of a written folder and the tokenizer fingerprint of a CTranslate2 export
record."""

import hashlib


def sha256_of_file(path) -> str:
    """The SHA-256 of a file's bytes, as hex (what `sha256sum` prints)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["sha256_of_file"]
