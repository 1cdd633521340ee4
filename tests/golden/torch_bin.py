#!/usr/bin/env python3
"""pytorch_model.bin files for tests/torch_bin.rs (src/weights/torch_bin.rs reads them), from PyTorch's own
`torch.save`, and hostile ones written opcode by opcode (never unpickled here or anywhere).

Run from the repository root (needs torch, transformers 5.x, safetensors):

    /path/to/venv/bin/python tests/golden/torch_bin.py

transformers 5.x writes only safetensors (`save_pretrained(safe_serialization=False)` is ignored), so the .bin files
are written as transformers 4.x's `save_pretrained(..., safe_serialization=False)` wrote them: `torch.save` of the
state dict (the zip format of torch >= 1.6), the names the safetensors file holds. It writes
  tests/models/tiny-classifier-bin/           tests/models/tiny-classifier (BertForSequenceClassification, f32) with
                                              only pytorch_model.bin, plus the i64 `bert.embeddings.position_ids`
                                              buffer transformers 4.x files carry
  tests/models/tiny-bert-f16-bin/             a seeded tiny BertModel in f16, only pytorch_model.bin
  tests/models/tiny-classifier-bin-sharded/   tiny-classifier as pytorch_model.bin.index.json and its .bin shards
  tests/data/torch_bin/tiny-bert-f16.safetensors   the same f16 tensors as safetensors (the bit-for-bit reference)
  tests/data/torch_bin/legacy.bin             tiny-classifier's state dict in the format before torch 1.6
                                              (`_use_new_zipfile_serialization=False`)
  tests/data/torch_bin/features.bin, features-legacy.bin, features.safetensors
                                              what a reader must get right: a transposed (non-contiguous) view, a
                                              view at a storage offset sharing its storage, a broadcast (stride 0),
                                              bf16, f16, an nn.Parameter, a 0-d tensor, an empty tensor, i64 and
                                              bool buffers; and each one contiguous, as safetensors
  tests/data/torch_bin/dense.bin              st-stacks/mean-dense-normalize's Dense module as sentence-transformers
                                              2.x saved it (torch.save of its state dict)
  tests/data/torch_bin/hostile/*.bin          files that must be refused by name: see HOSTILE below
  tests/golden/torch_bin.json                 the f16 model's last hidden state (its weights widened to f32) and
                                              the classifier's logits, from PyTorch
"""
import json
import os
import shutil
import struct
import sys
import zipfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")
DATA = os.path.join(ROOT, "tests", "data", "torch_bin")
OUT = os.path.join(ROOT, "tests", "golden", "torch_bin.json")
CLASSIFIER = os.path.join(MODELS, "tiny-classifier")
TOKENIZER_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
TEXTS = ["the cat sat on the mat.", "i went to the store yesterday, and it was closed!"]
# Small enough that the classifier's 170 kB split into several .bin files.
SHARD_BYTES = 40_000


def fresh(d, copy_from=None):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for f in TOKENIZER_FILES if copy_from else []:
        if os.path.exists(os.path.join(copy_from, f)):
            shutil.copy(os.path.join(copy_from, f), os.path.join(d, f))


def g(x):
    return [float("%.7g" % v) for v in x]


def classifier():
    """tiny-classifier's tensors (as its safetensors file holds them) as pytorch_model.bin; its logits."""
    sd = load_file(os.path.join(CLASSIFIER, "model.safetensors"))
    d = os.path.join(MODELS, "tiny-classifier-bin")
    fresh(d, CLASSIFIER)
    with_buffer = dict(sd)
    with_buffer["bert.embeddings.position_ids"] = torch.arange(64, dtype=torch.int64).unsqueeze(0)
    torch.save(with_buffer, os.path.join(d, "pytorch_model.bin"))
    torch.save(sd, os.path.join(DATA, "legacy.bin"), _use_new_zipfile_serialization=False)
    # Shards as transformers 4.x wrote them: pytorch_model-0000i-of-0000n.bin and an index of the same form.
    d = os.path.join(MODELS, "tiny-classifier-bin-sharded")
    fresh(d, CLASSIFIER)
    shards, size = [{}], 0
    for k in sorted(sd):
        nbytes = sd[k].numel() * sd[k].element_size()
        if size and size + nbytes > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][k] = sd[k]
        size += nbytes
    assert len(shards) >= 3, len(shards)
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"pytorch_model-{i + 1:05d}-of-{len(shards):05d}.bin"
        torch.save(shard, os.path.join(d, name))
        weight_map.update({k: name for k in shard})
    total = sum(v.numel() * v.element_size() for v in sd.values())
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    from transformers import BertForSequenceClassification
    m = BertForSequenceClassification.from_pretrained(CLASSIFIER).eval()
    tok = AutoTokenizer.from_pretrained(CLASSIFIER)
    with torch.no_grad():
        logits = m(**tok(TEXTS, padding=True, return_tensors="pt")).logits
    return {"texts": TEXTS, "logits": [g(r) for r in logits.tolist()]}


def bert_f16():
    """A seeded tiny BertModel, its weights in f16."""
    torch.manual_seed(7)
    cfg = BertConfig(vocab_size=480, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, initializer_range=0.3,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, dtype="float16",
                     architectures=["BertModel"])
    m = BertModel(cfg, add_pooling_layer=True).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    m = m.half()
    sd = {k: v.contiguous() for k, v in m.state_dict().items() if v.dtype == torch.float16}
    d = os.path.join(MODELS, "tiny-bert-f16-bin")
    fresh(d, CLASSIFIER)
    cfg.save_pretrained(d)
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))
    save_file(sd, os.path.join(DATA, "tiny-bert-f16.safetensors"))
    tok = AutoTokenizer.from_pretrained(d)
    m = m.float()
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = m(**enc).last_hidden_state
    rows = []
    for i in range(len(TEXTS)):
        n = int(enc["attention_mask"][i].sum())
        rows.append({"input_ids": enc["input_ids"][i, :n].tolist(),
                     "hidden": [g(hidden[i, t].tolist()) for t in range(n)]})
    return {"texts": TEXTS, "rows": rows}


def features():
    """Tensors that are not each a whole contiguous storage of their own, and the dtypes a state dict may hold."""
    torch.manual_seed(3)
    base = torch.randn(4, 6)
    shared = torch.randn(10)
    sd = {
        "plain": torch.randn(2, 3),
        "transposed": base.t(),                     # (6, 4), strides (1, 6)
        "shared_whole": shared,
        "shared_tail": shared[3:9],                 # the same storage, offset 3
        "shared_strided": shared[1::3],             # offset 1, stride 3
        "broadcast": torch.randn(1, 5).expand(3, 5),  # stride 0
        "bf16": torch.randn(3, 4).to(torch.bfloat16),
        "f16_transposed": torch.randn(3, 2).half().t(),
        "param": torch.nn.Parameter(torch.randn(4)),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "ids": torch.arange(5, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
    }
    assert not sd["transposed"].is_contiguous() and sd["shared_tail"].storage_offset() == 3
    torch.save(sd, os.path.join(DATA, "features.bin"))
    torch.save(sd, os.path.join(DATA, "features-legacy.bin"), _use_new_zipfile_serialization=False)
    save_file({k: v.detach().contiguous().clone() for k, v in sd.items()}, os.path.join(DATA, "features.safetensors"))


def dense():
    sd = load_file(os.path.join(MODELS, "st-stacks", "mean-dense-normalize", "2_Dense", "model.safetensors"))
    torch.save(sd, os.path.join(DATA, "dense.bin"))


# ---------------------------------------------------------------------------------------------------------------
# Hostile files: pickles built opcode by opcode (pickle's own opcodes, as pickletools names them), never loaded.
# ---------------------------------------------------------------------------------------------------------------
PROTO2 = b"\x80\x02"
STOP = b"."


def uni(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def short_uni(s):
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def binint(n):
    """BININT where it fits, else LONG1 (8 bytes)."""
    return b"J" + struct.pack("<i", n) if -(1 << 31) <= n < (1 << 31) else b"\x8a\x08" + struct.pack("<q", n)


def tensor(key, numel, size, stride, storage="FloatStorage", offset=0):
    """_rebuild_tensor_v2((storage persistent id), offset, size, stride, False, OrderedDict())."""
    persid = b"(" + uni("storage") + glob("torch", storage) + uni(key) + uni("cpu") + binint(numel) + b"tQ"
    tup = lambda xs: b"(" + b"".join(binint(x) for x in xs) + b"t"  # noqa: E731
    return (glob("torch._utils", "_rebuild_tensor_v2") + b"(" + persid + binint(offset) + tup(size) + tup(stride)
            + b"\x89" + glob("collections", "OrderedDict") + b")R" + b"tR")


def state_dict(items):
    return PROTO2 + glob("collections", "OrderedDict") + b")R(" + b"".join(uni(k) + v for k, v in items) + b"u" + STOP


def archive(path, pickle, storages=(), name="archive"):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", pickle)
        z.writestr(f"{name}/byteorder", "little")
        for key, data in storages:
            z.writestr(f"{name}/data/{key}", data)
        z.writestr(f"{name}/version", "3\n")


HOSTILE = {
    # The classic: os.system("...") as the pickle's result. Refused at the GLOBAL, naming it.
    "os_system.bin": lambda p: archive(p, PROTO2 + glob("os", "system") + uni("echo pwned > /tmp/pwned") + b"\x85R"
                                       + STOP),
    # Protocol 4's STACK_GLOBAL: builtins.eval, inside an otherwise well-formed state dict.
    "builtins_eval.bin": lambda p: archive(p, b"\x80\x04" + glob("collections", "OrderedDict") + b")R("
                                           + uni("w") + short_uni("builtins") + short_uni("eval") + b"\x93"
                                           + uni("__import__('os').system('echo pwned')") + b"\x85R" + b"u" + STOP),
    # An allowed callable reached through REDUCE of something else: `__reduce__` of another class (NEWOBJ).
    "newobj.bin": lambda p: archive(p, PROTO2 + glob("collections", "OrderedDict") + b")\x81" + STOP),
    # The same as a file of the format before torch 1.6.
    "legacy_os_system.bin": lambda p: open(p, "wb").write(
        PROTO2 + b"\x8a\x0a" + (0x1950a86a20f9469cfc6c).to_bytes(10, "little") + STOP
        + PROTO2 + b"M\xe9\x03" + STOP
        + PROTO2 + b"}(" + uni("protocol_version") + b"M\xe9\x03" + uni("little_endian") + b"\x88u" + STOP
        + PROTO2 + glob("posix", "system") + uni("echo pwned") + b"\x85R" + STOP),
    # The tensor claims 100 floats of a storage of 10 (40 bytes, as the archive holds).
    "short_storage.bin": lambda p: archive(p, state_dict([("w", tensor("0", 10, [100], [1]))]),
                                           [("0", b"\0" * 40)]),
    # The pickle says the storage has 100 floats; the archive's entry holds 10.
    "short_entry.bin": lambda p: archive(p, state_dict([("w", tensor("0", 100, [100], [1]))]), [("0", b"\0" * 40)]),
    # A dimension of 2^40 (2^80 elements: more than any memory) on a storage of 4 floats.
    "huge_dim.bin": lambda p: archive(p, state_dict([("w", tensor("0", 4, [1 << 40, 1 << 40], [1 << 40, 1]))]),
                                      [("0", b"\0" * 16)]),
    # A broadcast (strides 0) of 2^62 elements of a storage of one float: within the storage, but more elements than
    # a file of this size can give.
    "broadcast.bin": lambda p: archive(p, state_dict([("w", tensor("0", 1, [1 << 31, 1 << 31], [0, 0]))]),
                                       [("0", b"\0" * 4)]),
    # The storage the pickle names is not in the archive.
    "missing_storage.bin": lambda p: archive(p, state_dict([("w", tensor("7", 4, [4], [1]))]), [("0", b"\0" * 16)]),
    # Two hundred thousand marks deep: the stack machine's bound, not the memory, refuses it.
    "deep.bin": lambda p: archive(p, PROTO2 + b"(" * 200_000 + STOP),
}


def hostile():
    d = os.path.join(DATA, "hostile")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, write in HOSTILE.items():
        write(os.path.join(d, name))
    # A real file cut in half: the zip's directory (at its end) is gone.
    with open(os.path.join(MODELS, "tiny-classifier-bin", "pytorch_model.bin"), "rb") as f:
        whole = f.read()
    with open(os.path.join(d, "truncated.bin"), "wb") as f:
        f.write(whole[: len(whole) // 2])


def main():
    os.makedirs(DATA, exist_ok=True)
    golden = {"classifier": classifier(), "bert_f16": bert_f16()}
    features()
    dense()
    hostile()
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(golden, fh, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}: {os.path.getsize(OUT)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
