"""One sentence per line through the native CLI: the round trip a program makes when it writes one query to
`bertgpu embed` and waits for its vector, against PyTorch embedding the same sentence in-process (transformers,
mean pooling and L2 normalisation, `torch.set_num_threads`), calls alternating, medians after a warm-up.

    python bench/cli_latency.py [--runs 200] [--threads 2] [--binary target/release/bertgpu]

Needs ./models/all-MiniLM-L6-v2 (scripts/fetch-models.sh) and, for the 8-bit row, the Q8_0 GGUF that
bench/browser.sh converts (bench/models/all-MiniLM-L6-v2.q8_0.gguf; the row is skipped without it). Ours includes
the pipe, the JSON line and the tokenizer; theirs includes the tokenizer. RAYON_NUM_THREADS gives the CLI the same
threads as PyTorch.

Any other line command, one binary against another (before and after a change, calls alternating):

    python bench/cli_latency.py --command classify --model DIR --binary OLD --binary NEW [--text LINE]

times `bertgpu classify --model DIR --device cpu` per line in each binary, without PyTorch, and checks that the two
print the same line.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

import torch
from transformers import AutoModel, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models/all-MiniLM-L6-v2")
GGUF = os.path.join(ROOT, "bench/models/all-MiniLM-L6-v2.q8_0.gguf")
# bench/latency.mjs's sentence (Debian's fortunes): 15 tokens with [CLS]/[SEP].
TEXT = "Anyone who has never made a mistake has never tried anything new."
WARMUP = 30


class Cli:
    """A line command of `bertgpu` (`embed`: its vector) on the CPU, fed one line at a time."""

    def __init__(self, binary, model, threads, command="embed", text=TEXT):
        env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
        self.command, self.text = command, text
        self.p = subprocess.Popen([binary, command, "--model", model, "--device", "cpu"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)

    def __call__(self):
        self.p.stdin.write(self.text + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        return json.loads(line)["embedding"] if self.command == "embed" else line

    def close(self):
        self.p.stdin.close()
        self.p.wait()


class Torch:
    def __init__(self, threads):
        torch.set_num_threads(threads)
        self.tok = AutoTokenizer.from_pretrained(MODEL)
        self.model = AutoModel.from_pretrained(MODEL).eval()

    @torch.inference_mode()
    def __call__(self):
        enc = self.tok([TEXT], return_tensors="pt")
        h = self.model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
        v = (h * m).sum(1) / m.sum(1)
        return torch.nn.functional.normalize(v, dim=-1)[0].tolist()


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return (time.perf_counter() - t0) * 1e3, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--binary", action="append", help="repeat to time several binaries against each other")
    ap.add_argument("--command", default="embed")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--text", default=TEXT)
    a = ap.parse_args()
    binaries = a.binary or [os.path.join(ROOT, "target/release/bertgpu")]
    if a.command != "embed" or len(binaries) > 1:
        return compare(a, binaries)
    a.binary = binaries[0]
    theirs = Torch(a.threads)
    ours = {"f32": Cli(a.binary, MODEL, a.threads)}
    if os.path.exists(GGUF):
        ours["q8_0"] = Cli(a.binary, GGUF, a.threads)
    # The vectors agree (f32): the two sides embed the same thing.
    ref = theirs()
    worst = max(abs(x - y) for x, y in zip(ours["f32"](), ref))
    for _ in range(WARMUP):
        theirs()
        for o in ours.values():
            o()
    times = {"pytorch": [], **{k: [] for k in ours}}
    for _ in range(a.runs):
        for name, f in [("pytorch", theirs), *ours.items()]:
            times[name].append(timed(f)[0])
    for o in ours.values():
        o.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"one sentence (15 tokens), {a.threads} threads, {a.runs} alternating calls each; "
          f"f32 vectors agree to {worst:.1e}")
    for k, v in times.items():
        print(f"{'PyTorch f32 in-process' if k == 'pytorch' else 'bertgpu CLI ' + k + ' per line'}: "
              f"{med[k]:.2f} ms (min {min(v):.2f})")
    for k in ours:
        print(f"bertgpu {k} / PyTorch f32: {med[k] / med['pytorch']:.2f}x")


def compare(a, binaries):
    """`a.command` per line in each binary, calls alternating, medians after a warm-up; the binaries must print the
    same line."""
    clis = {f"{i}: {b}": Cli(b, a.model, a.threads, a.command, a.text) for i, b in enumerate(binaries)}
    outs = {k: c() for k, c in clis.items()}
    assert len(set(outs.values())) == 1, f"the binaries print different lines: {outs}"
    for _ in range(WARMUP):
        for c in clis.values():
            c()
    times = {k: [] for k in clis}
    for _ in range(a.runs):
        for k, c in clis.items():
            times[k].append(timed(c)[0])
    for c in clis.values():
        c.close()
    print(f"bertgpu {a.command} --model {a.model}, one line ({len(a.text)} characters), {a.threads} threads, "
          f"{a.runs} alternating calls each; the same output line")
    for k, v in times.items():
        print(f"{k}: {statistics.median(v):.3f} ms per line (min {min(v):.3f})")


if __name__ == "__main__":
    main()
