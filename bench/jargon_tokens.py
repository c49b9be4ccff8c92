"""The token data of the language-model benchmarks: the Jargon File (Debian's jargon-text,
public domain) tokenized by `loom data tokenize` (4000 pieces unless asked otherwise) into a
temporary folder."""
import contextlib
import os
import subprocess
import tempfile

JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"


@contextlib.contextmanager
def jargon_tokens(loom, vocab_size=4000):
    """Yields the tokenize folder, or None (after saying why) when jargon-text is missing."""
    if not os.path.exists(JARGON):
        print(f"skipped: {JARGON} missing (jargon-text)")
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tok")
        subprocess.run([loom, "data", "tokenize", JARGON, "--out", data, "--vocab-size",
                        str(vocab_size)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield data
