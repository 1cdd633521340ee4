"""Continued pre-training of a real checkpoint, bertgpu against PyTorch/transformers: does `bertgpu pretrain --model
CKPT --no-nsp` lower a real checkpoint's masked-LM loss on held-out text of a new domain as much as transformers'
BertForMaskedLM does with the same recipe?

    BERTGPU_BIN=/path/to/bertgpu nice -n 19 python bench/pretrain_continued.py [steps 200] [work dir /tmp/pretrain_continued]

What it does, deterministically (fixed seeds throughout):
1. Checkpoint: models/splade-tiny (BertForMaskedLM: 2 layers, hidden 128, 2 heads, 30522-token uncased WordPiece
   vocabulary, tied decoder), with its own tokenizer on both sides. Masked LM only: it has no NSP head.
2. Corpus (the domain): the docstrings of CPython's standard library, documents split train/held-out exactly as
   bench/pretrain_scratch.py does (`corpus()`, imported from it).
3. bertgpu: `pretrain --model CKPT --no-nsp --data train.txt --device cpu --steps N --batch-size 32 --max-length 64
   --lr 1e-4 --warmup 0.1 --weight-decay 0.01 --mlm-probability 0.15 --validation-split 0 --seed 0` (its own
   rows, its own shuffling, dropout 0.1 as the config says).
4. PyTorch: torch.manual_seed(0); BertForMaskedLM.from_pretrained(CKPT); rows made once by `make_segment_rows`
   below, a Python version of bertgpu's --no-nsp rows (pretrain_data.rs `segments`: `[CLS] S [SEP]`, token types 0,
   S packing consecutive sentences of one document while they fit in max_length - 2 tokens, a longer sentence cut
   into consecutive windows; no short rows), masked by pretrain_scratch's `mask_row` (15% of non-special tokens,
   80/10/10); static masks, rows reshuffled each pass; batches padded to their longest row; AdamW (weight decay
   0.01, none on biases and LayerNorm weights), get_linear_schedule_with_warmup (10%), clip_grad_norm_ 1.0; the same
   steps, batch size, max length and learning rate. (bertgpu clips at 1.0 too: src/training.)
5. Evaluation: pretrain_scratch's `evaluate` (the same Python code for every model) on the same held-out rows
   (`make_segment_rows` on the held-out documents, seeds 101..105, i.e. five maskings of every held-out segment):
   MLM loss (mean cross-entropy over masked positions) and MLM accuracy, for the checkpoint before training, bertgpu's
   output and PyTorch's model after N steps. The result: each side's drop in held-out MLM loss, and the
   difference of the two drops in % of PyTorch's drop.

Writes WORK/results.json and prints a summary (per-step training losses side by side every STEPS/20 steps).

    BERTGPU_BIN=... python bench/pretrain_continued.py STEPS WORK --same-batches

The same comparison on the very same batches, dropout off on both sides: bertgpu trains with `--no-dropout
--save-batches WORK/batches.jsonl` (every step's masked rows, as it drew them), and PyTorch replays that file, one
line a step, in eval mode (no dropout) with the optimiser, schedule and clipping above. The two loss curves then
differ only by arithmetic: the summary gives their largest and mean per-step relative difference, besides the
held-out drop.
"""
import json, math, os, random, sys, time

SAME = "--same-batches" in sys.argv
if SAME:
    sys.argv.remove("--same-batches")
# pretrain_scratch reads argv[1] (steps) and argv[2] (work dir) at import; the defaults here differ, so set them first.
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/pretrain_continued"
sys.argv[1:] = [str(STEPS), WORK]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pretrain_scratch as ps  # noqa: E402  (sets torch's threads from TORCH_THREADS, default 2)

import torch  # noqa: E402
from transformers import BertForMaskedLM, PreTrainedTokenizerFast, get_linear_schedule_with_warmup  # noqa: E402

CKPT = os.path.join(ps.ROOT, "models/splade-tiny")
BATCH, MAX_LEN, LR, WARMUP, WD, MLM_P = 32, 64, 1e-4, 0.1, 0.01, 0.15
log = ps.log


def make_segment_rows(docs_ids, special, vocab, seed, max_length=MAX_LEN, mlm_p=MLM_P):
    """bertgpu's --no-nsp rows (pretrain_data.rs `segments`, then `masked`) from tokenized documents (lists of
    sentences of ids): dicts input_ids, token_type_ids, labels (no "nsp")."""
    rng = random.Random(seed)
    cls, sep, mask = special["[CLS]"], special["[SEP]"], special["[MASK]"]
    specials = set(special.values())
    cap = max_length - 2
    rows = []

    def emit(pieces):
        ids = [cls] + list(pieces) + [sep]
        labels = ps.mask_row(ids, specials, mask, vocab, rng, mlm_p)
        rows.append(dict(input_ids=ids, token_type_ids=[0] * len(ids), labels=labels))

    for doc in docs_ids:
        cur = []
        for sentence in (s for s in doc if s):
            if cur and len(cur) + len(sentence) > cap:
                emit(cur)
                cur = []
            if len(sentence) <= cap:
                cur += sentence
                continue
            windows = [sentence[k:k + cap] for k in range(0, len(sentence), cap)]
            for j, w in enumerate(windows):
                if j == len(windows) - 1 and len(w) < cap:
                    cur = list(w)
                else:
                    emit(w)
        if cur:
            emit(cur)
    return rows


def run_bertgpu(train_txt, out, steps, batches=None):
    extra = ["--no-dropout", "--save-batches", batches] if batches else []
    cmd = [ps.BIN, "pretrain", "--model", CKPT, "--no-nsp", "--data", train_txt, "--out", out, "--device", "cpu",
           "--steps", str(steps), "--batch-size", str(BATCH), "--max-length", str(MAX_LEN), "--lr", str(LR),
           "--warmup", str(WARMUP), "--weight-decay", str(WD), "--mlm-probability", str(MLM_P),
           "--validation-split", "0", "--seed", "0"] + extra
    return ps.run_logged(cmd)


def torch_batches(rows, steps):
    """PyTorch's own batches of `rows`: reshuffled each pass, BATCH rows each."""
    g = torch.Generator().manual_seed(0)
    step = 0
    while step < steps:
        order = torch.randperm(len(rows), generator=g).tolist()
        for k in range(0, len(order), BATCH):
            if step == steps:
                return
            yield [rows[j] for j in order[k:k + BATCH]]
            step += 1


def saved_batches(path):
    """The batches bertgpu trained on (`--save-batches`), one line a step."""
    for step, line in enumerate(open(path), 1):
        b = json.loads(line)
        assert b["step"] == step, (b["step"], step)
        yield [dict(input_ids=i, token_type_ids=t, labels=l)
               for i, t, l in zip(b["input_ids"], b["token_type_ids"], b["labels"])]


def run_torch(batches, steps, dropout=True):
    torch.manual_seed(0)
    model = BertForMaskedLM.from_pretrained(CKPT)
    no_decay = lambda n: n.endswith("bias") or "LayerNorm.weight" in n
    params = list(model.named_parameters())
    opt = torch.optim.AdamW([{"params": [p for n, p in params if not no_decay(n)], "weight_decay": WD},
                             {"params": [p for n, p in params if no_decay(n)], "weight_decay": 0.0}], lr=LR)
    sched = get_linear_schedule_with_warmup(opt, math.ceil(WARMUP * steps), steps)
    model.train(dropout)  # eval mode: the same graph without dropout
    losses, times = [], []
    for batch in batches:
        loss = model(**ps.collate(batch)).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        times.append(time.monotonic())
    assert len(losses) == steps, (len(losses), steps)
    return model, losses, times


def load(path):
    model, info = BertForMaskedLM.from_pretrained(path, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        log(f"loading {path}: {bad}")
    return model, {k: sorted(map(str, v)) for k, v in info.items()}


def main():
    os.makedirs(WORK, exist_ok=True)
    train, held = ps.corpus()
    train_txt = os.path.join(WORK, "train.txt")
    ps.write_corpus(train, train_txt)
    ps.write_corpus(held, os.path.join(WORK, "heldout.txt"))
    tok = PreTrainedTokenizerFast.from_pretrained(CKPT)
    special = {t: tok.convert_tokens_to_ids(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]}
    assert set(special.values()) == set(tok.all_special_ids), (special, tok.all_special_ids)
    vocab = len(tok)
    enc = lambda docs: [[tok(s, add_special_tokens=False)["input_ids"] for s in d] for d in docs]
    train_ids, held_ids = enc(train), enc(held)
    stats = lambda docs, ids: dict(documents=len(docs), sentences=sum(map(len, docs)),
                                   characters=sum(len(s) for d in docs for s in d),
                                   tokens=sum(len(s) for d in ids for s in d))
    info = dict(checkpoint=CKPT, tokenizer_vocab=vocab,
                corpus=dict(source=f"docstrings of the Python {sys.version.split()[0]} standard library ({ps.STDLIB})",
                            train=stats(train, train_ids), heldout=stats(held, held_ids)),
                recipe=dict(steps=STEPS, batch=BATCH, max_length=MAX_LEN, lr=LR, warmup=WARMUP, weight_decay=WD,
                            mlm_probability=MLM_P, nsp=False, torch_threads=ps.THREADS,
                            same_batches_no_dropout=SAME))
    log(json.dumps(info["corpus"]))
    eval_rows = [r for s in (101, 102, 103, 104, 105) for r in make_segment_rows(held_ids, special, vocab, s)]
    train_rows = make_segment_rows(train_ids, special, vocab, 0)
    info["rows"] = ps.rows_info(train_rows, eval_rows, STEPS, BATCH)
    log(json.dumps(info["rows"]))

    res = {}
    before, _ = load(CKPT)
    res["checkpoint (before)"] = ps.evaluate(before, eval_rows)
    log("before:", res["checkpoint (before)"])

    out = os.path.join(WORK, "bertgpu")
    batches = os.path.join(WORK, "batches.jsonl") if SAME else None
    b_losses, b_times, b_total, b_other = run_bertgpu(train_txt, out, STEPS, batches)
    b_loop = ps.loop_seconds(b_times, STEPS)
    log(f"bertgpu: {b_loop:.1f} s loop, {b_total:.1f} s process")
    bmodel, b_load = load(out)
    res["bertgpu"] = ps.evaluate(bmodel, eval_rows)
    log("bertgpu:", res["bertgpu"])

    t0 = time.monotonic()
    if SAME:
        model, t_losses, t_times = run_torch(saved_batches(batches), STEPS, dropout=False)
    else:
        model, t_losses, t_times = run_torch(torch_batches(train_rows, STEPS), STEPS)
    t_total = time.monotonic() - t0
    t_loop = ps.loop_seconds(t_times, STEPS)
    log(f"torch: {t_loop:.1f} s loop")
    res["PyTorch"] = ps.evaluate(model, eval_rows)
    log("PyTorch:", res["PyTorch"])

    base = res["checkpoint (before)"]["mlm_loss"]
    drop = {k: base - res[k]["mlm_loss"] for k in ("bertgpu", "PyTorch")}
    info["eval"] = res
    info["mlm_loss_drop"] = drop
    info["drop_difference_pct_of_torch"] = 100 * (drop["bertgpu"] - drop["PyTorch"]) / drop["PyTorch"]
    info["mlm_accuracy_difference_points"] = 100 * (res["bertgpu"]["mlm_accuracy"] - res["PyTorch"]["mlm_accuracy"])
    nominal = BATCH * MAX_LEN * STEPS
    info["speed"] = {"bertgpu": dict(loop_seconds=b_loop, process_seconds=b_total, tokens_per_s=nominal / b_loop),
                     "PyTorch": dict(loop_seconds=t_loop, process_seconds=t_total, tokens_per_s=nominal / t_loop)}
    info["bertgpu_output_loading_info"] = b_load
    info["losses"] = {"bertgpu": b_losses, "PyTorch": t_losses}
    if SAME:
        rel = [abs(b - t) / t for b, t in zip(b_losses, t_losses)]
        info["same_batches"] = dict(max_step_rel_diff=max(rel), mean_step_rel_diff=sum(rel) / len(rel),
                                    first_step=(b_losses[0], t_losses[0]), last_step=(b_losses[-1], t_losses[-1]))
    info["bertgpu_stderr_other"] = b_other[-10:]
    json.dump(info, open(os.path.join(WORK, "results.json"), "w"), indent=1)

    ps.log_curves(b_losses, t_losses, "training batches; ")
    log("| model | held-out MLM loss | drop | held-out MLM accuracy |")
    for k in ["checkpoint (before)", "bertgpu", "PyTorch"]:
        r = res[k]
        log(f"| {k} | {r['mlm_loss']:.4f} | {base - r['mlm_loss']:.4f} | {100 * r['mlm_accuracy']:.2f}% |")
    log(f"drop bertgpu {drop['bertgpu']:.4f} vs PyTorch {drop['PyTorch']:.4f}: "
        f"{info['drop_difference_pct_of_torch']:+.1f}% of PyTorch's drop; MLM accuracy "
        f"{info['mlm_accuracy_difference_points']:+.2f} points ({res['PyTorch']['masked']} masked positions)")
    if SAME:
        sb = info["same_batches"]
        log(f"same batches, dropout off: per-step loss relative difference max {100 * sb['max_step_rel_diff']:.3f}%, "
            f"mean {100 * sb['mean_step_rel_diff']:.3f}%; step 1 {sb['first_step']}, step {STEPS} {sb['last_step']}")
    log(f"speed: bertgpu {b_loop:.1f} s loop ({b_total:.1f} s process), PyTorch {t_loop:.1f} s loop")


if __name__ == "__main__":
    main()
