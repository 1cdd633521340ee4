"""Pre-training from scratch, bertgpu against PyTorch/transformers: does `bertgpu pretrain --config --tokenizer`
teach a small BERT as much as transformers' BertForPreTraining does with the same recipe, and how fast (CPU)?

    BERTGPU_BIN=/path/to/bertgpu nice -n 19 python bench/pretrain_scratch.py [steps 800] [work dir /tmp/pretrain_scratch]

What it does, deterministically (fixed seeds throughout):
1. Corpus: the docstrings of CPython's standard library on this machine (sysconfig's stdlib path; Lib/test,
   site-packages, __pycache__ skipped), read with `ast` (nothing is imported): each .py file one document, each
   docstring's prose paragraphs (not doctest or code-like ones) joined and split into sentences, one per line, a
   blank line between documents. Real English technical prose, ~1.5 M characters. Documents sorted by path, then
   every 20th (k % 20 == 7) held out: ~95% train, ~5% held-out.
2. Vocabulary: `bertgpu train-tokenizer --vocab-size 4000` on the train corpus; both sides use that folder.
3. Model: BertConfig(hidden 128, 2 layers, 2 heads, intermediate 512, max_position_embeddings 128, vocab 4000,
   dropout 0.1 on hidden and attention, architectures BertForPreTraining).
4. bertgpu: `pretrain --config --tokenizer --data train.txt --device cpu --steps N --batch-size 32 --max-length 64
   --lr 1e-3 --warmup 0.1 --weight-decay 0.01 --mlm-probability 0.15 --short-seq-prob 0.1 --validation-split 0
   --seed 0` (its own init, its own rows, dropout as the config says).
5. PyTorch: torch.manual_seed(0); BertForPreTraining(config); rows made once by `make_rows` below, a Python version
   of bertgpu's recipe (Google's create_pretraining_data: NSP pairs 50/50 IsNext / random sentence of another
   document, short_seq_prob 0.1, truncation from the longer side; 15% of non-special tokens selected, 80/10/10
   [MASK]/random/unchanged; static masking, rows reshuffled each pass, as bertgpu), batches padded to their longest
   row (as bertgpu), AdamW (weight decay 0.01, none on biases and LayerNorm weights), get_linear_schedule_with_warmup
   (10%), clip_grad_norm_ 1.0, same steps, batch size, max length, learning rate.
6. Evaluation, the same Python code for every model, on the same held-out rows (pairs + masks made once from the
   held-out documents, five seeds' worth of rows): MLM accuracy over masked positions, MLM loss (mean cross-entropy
   over masked positions), NSP accuracy. Also for each side's model at initialisation (step 0; bertgpu's with
   --steps 1, whose one step is warm-up's first, at learning rate 0: its init unchanged) and a frequency baseline (always the most frequent training token;
   its loss is the unigram cross-entropy of the training tokens' frequencies).
7. Speed: each side's training-loop wall time, timed from the end of step 1 to the end of step N and scaled to N
   steps (excludes the data preparation, model construction and saving of both), and tokens/s = batch × max_length ×
   steps / seconds (padding included: nominal, the batches themselves are padded to their longest row only).
   PyTorch on TORCH_THREADS threads (default 2), bertgpu on the CPU backend (all cores; 2 here).

Writes WORK/results.json and prints a summary; per-step losses of both sides are kept in results.json
(and printed side by side every STEPS/20 steps).
"""
import ast, json, math, os, random, re, subprocess, sys, sysconfig, time

import torch
from transformers import (BertConfig, BertForPreTraining, PreTrainedTokenizerFast,
                          get_linear_schedule_with_warmup)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BERTGPU_BIN", os.path.join(ROOT, "target/release/bertgpu"))
THREADS = int(os.environ.get("TORCH_THREADS", "2"))
torch.set_num_threads(THREADS)
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 800
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/pretrain_scratch"
BATCH, MAX_LEN, LR, WARMUP, WD, MLM_P, SHORT_P, VOCAB = 32, 64, 1e-3, 0.1, 0.01, 0.15, 0.1, 4000
CONFIG = dict(architectures=["BertForPreTraining"], model_type="bert", vocab_size=VOCAB, hidden_size=128,
              num_hidden_layers=2, num_attention_heads=2, intermediate_size=512, hidden_act="gelu",
              hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, max_position_embeddings=128,
              type_vocab_size=2, initializer_range=0.02, layer_norm_eps=1e-12, pad_token_id=0)
log = lambda *a: print(*a, flush=True)

# ---------------------------------------------------------------- 1. corpus
STDLIB = sysconfig.get_paths()["stdlib"]
SKIP_DIRS = {"test", "tests", "site-packages", "__pycache__"}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")


def stdlib_files():
    out = []
    for d, dirs, files in os.walk(STDLIB):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(out, key=lambda p: os.path.relpath(p, STDLIB))


def docstrings(path):
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [d for n in ast.walk(tree) if isinstance(n, nodes) for d in [ast.get_docstring(n, clean=True)] if d]


def sentences(doc):
    out = []
    for para in re.split(r"\n\s*\n", doc):
        lines = [l.strip() for l in para.strip().splitlines()]
        if not lines or any(l.startswith((">>>", "...", "$ ")) for l in lines):
            continue  # doctests, shell sessions
        text = " ".join(lines)
        if sum(c.isalpha() or c == " " for c in text) < 0.85 * len(text):
            continue  # code-like, tables
        out += [s.strip() for s in SENTENCE_END.split(text) if len(s.split()) >= 3 and len(s) <= 1000]
    return out


def corpus():
    docs = []
    for p in stdlib_files():
        s = [x for d in docstrings(p) for x in sentences(d)]
        if len(s) >= 2:
            docs.append(s)
    train = [d for k, d in enumerate(docs) if k % 20 != 7]
    held = [d for k, d in enumerate(docs) if k % 20 == 7]
    return train, held


def write_corpus(docs, path):
    with open(path, "w") as f:
        f.write("\n\n".join("\n".join(d) for d in docs) + "\n")


# ---------------------------------------------------------------- 5. the data recipe in Python
def make_rows(docs_ids, special, vocab, seed, max_length=MAX_LEN, short_p=SHORT_P, mlm_p=MLM_P):
    """NSP pairs and static masks from tokenized documents (lists of sentences of ids), after bertgpu's
    pretrain_data.rs / Google's create_instances_from_document. Returns dicts input_ids, token_type_ids, labels,
    nsp (0 IsNext, 1 NotNext)."""
    rng = random.Random(seed)
    docs = [[s for s in d if s] for d in docs_ids]
    docs = [d for d in docs if d]
    cls, sep, mask = special["[CLS]"], special["[SEP]"], special["[MASK]"]
    specials = set(special.values())
    max_num = max_length - 3
    rows = []
    for d, doc in enumerate(docs):
        i = 0
        while i + 1 < len(doc):
            target = rng.randint(2, max_num) if rng.random() < short_p else max_num
            end, n = i + 1, len(doc[i])
            while end < len(doc) and (end - i < 2 or n < target):
                n += len(doc[end])
                end += 1
            a_end = rng.randint(i + 1, end - 1)
            a = [t for s in doc[i:a_end] for t in s]
            if rng.random() < 0.5:
                b, label, i = [t for s in doc[a_end:end] for t in s], 0, end
            else:
                i, label = a_end, 1
                other = rng.randrange(len(docs) - 1)
                other += other >= d
                od = docs[other]
                start = rng.randrange(len(od))
                stop, nb = start, 0
                while stop < len(od) and (stop == start or nb < max(target - len(a), 0)):
                    nb += len(od[stop])
                    stop += 1
                b = [t for s in od[start:stop] for t in s]
            while len(a) + len(b) > target:  # truncate_seq_pair: the longer side (B on a tie), front or back
                side = a if len(a) > len(b) else b
                del side[0 if rng.random() < 0.5 else -1]
            ids = [cls] + a + [sep] + b + [sep]
            types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
            labels = mask_row(ids, specials, mask, vocab, rng, mlm_p)
            rows.append(dict(input_ids=ids, token_type_ids=types, labels=labels, nsp=label))
    return rows


def mask_row(ids, specials, mask, vocab, rng, mlm_p=MLM_P):
    """Masks a framed row in place (pretrain_data.rs's `masked`, whole-word masking off): each non-special token
    selected with probability mlm_p, then 80/10/10 [MASK]/random id in 0..vocab/unchanged. Returns the labels."""
    labels = [-100] * len(ids)
    for k, t in enumerate(ids):
        if t in specials or rng.random() >= mlm_p:
            continue
        labels[k] = t
        r = rng.random()
        if r < 0.8:
            ids[k] = mask
        elif r < 0.9:
            ids[k] = rng.randrange(vocab)
    return labels


def collate(rows):
    """A padded batch; next_sentence_label only for rows with an "nsp" key (MLM-only rows have none)."""
    t = max(len(r["input_ids"]) for r in rows)
    pad = lambda key, v: torch.tensor([r[key] + [v] * (t - len(r[key])) for r in rows])
    b = dict(input_ids=pad("input_ids", 0), token_type_ids=pad("token_type_ids", 0),
             attention_mask=torch.tensor([[1] * len(r["input_ids"]) + [0] * (t - len(r["input_ids"])) for r in rows]),
             labels=pad("labels", -100))
    if "nsp" in rows[0]:
        b["next_sentence_label"] = torch.tensor([r["nsp"] for r in rows])
    return b


# ---------------------------------------------------------------- 6. evaluation (same for every model)
@torch.no_grad()
def evaluate(model, rows):
    """MLM accuracy and loss over the masked positions; NSP accuracy for models with an NSP head (BertForPreTraining)
    on rows with NSP labels."""
    model.eval()
    correct = total = nsp_ok = 0
    nsp = False
    nll = 0.0
    for k in range(0, len(rows), 64):
        b = collate(rows[k:k + 64])
        out = model(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"])
        sel = b["labels"] != -100
        scores = out.prediction_logits if hasattr(out, "prediction_logits") else out.logits
        logits, gold = scores[sel], b["labels"][sel]
        nll += torch.nn.functional.cross_entropy(logits, gold, reduction="sum").item()
        correct += (logits.argmax(-1) == gold).sum().item()
        total += gold.numel()
        if "next_sentence_label" in b and getattr(out, "seq_relationship_logits", None) is not None:
            nsp = True
            nsp_ok += (out.seq_relationship_logits.argmax(-1) == b["next_sentence_label"]).sum().item()
    res = dict(mlm_accuracy=correct / total, mlm_loss=nll / total, masked=total)
    if nsp:
        res["nsp_accuracy"] = nsp_ok / len(rows)
    return res


def frequency_baseline(train_ids, rows, specials):
    counts = torch.zeros(VOCAB)
    for d in train_ids:
        for s in d:
            counts += torch.bincount(torch.tensor(s, dtype=torch.long), minlength=VOCAB).float()
    for t in specials:
        counts[t] = 0
    probs = (counts + 1) / (counts + 1).sum()  # add-one smoothed unigram
    top = int(counts.argmax())
    gold = torch.tensor([t for r in rows for t in r["labels"] if t != -100])
    nsp = sum(r["nsp"] == 0 for r in rows) / len(rows)  # always IsNext
    return dict(mlm_accuracy=(gold == top).float().mean().item(), mlm_loss=-probs[gold].log().mean().item(),
                nsp_accuracy=max(nsp, 1 - nsp), masked=gold.numel(), token=top)


# ---------------------------------------------------------------- 4. bertgpu
def run_bertgpu(train_txt, tok_dir, cfg_path, out, steps, lr=LR):
    cmd = [BIN, "pretrain", "--config", cfg_path, "--tokenizer", tok_dir, "--data", train_txt, "--out", out,
           "--device", "cpu", "--steps", str(steps), "--batch-size", str(BATCH), "--max-length", str(MAX_LEN),
           "--lr", str(lr), "--warmup", str(WARMUP), "--weight-decay", str(WD), "--mlm-probability", str(MLM_P),
           "--short-seq-prob", str(SHORT_P), "--validation-split", "0", "--seed", "0"]
    return run_logged(cmd)


def rows_info(train_rows, eval_rows, steps=None, batch=None):
    """How many rows each side has, the passes STEPS × BATCH makes over the training rows, their mean length."""
    return dict(train=len(train_rows), heldout=len(eval_rows),
                train_epochs=(steps or STEPS) * (batch or BATCH) / len(train_rows),
                train_mean_length=sum(len(r["input_ids"]) for r in train_rows) / len(train_rows))


def log_curves(b_losses, t_losses, what=""):
    """The two training-loss curves side by side, 20 rows: each the mean of its steps."""
    every = max(1, len(b_losses) // 20)
    log(f"step  bertgpu-loss  torch-loss ({what}mean of the last", every, "steps)")
    for s in range(every, len(b_losses) + 1, every):
        m = lambda l: sum(l[s - every:s]) / every
        log(f"{s:5d}  {m(b_losses):10.3f}  {m(t_losses):10.3f}")


def run_logged(cmd):
    """Runs a bertgpu command; returns its per-step losses, the times they were printed, the process's wall time
    and its other stderr lines."""
    log("$", " ".join(cmd))
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", "/tmp")))
    losses, times, other = [], [], []
    for line in p.stderr:
        try:
            j = json.loads(line)
        except ValueError:
            other.append(line.rstrip())
            continue
        if isinstance(j, dict) and "loss" in j and "step" in j:
            times.append(time.monotonic())
            losses.append(j["loss"])
        else:
            other.append(line.rstrip())
    p.wait()
    total = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit("bertgpu failed:\n" + "\n".join(other[-20:]))
    return losses, times, total, other


# ---------------------------------------------------------------- 5. PyTorch
def run_torch(rows, steps):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**CONFIG))
    init = {k: v.clone() for k, v in model.state_dict().items()}
    no_decay = lambda n: n.endswith("bias") or "LayerNorm.weight" in n
    params = [(n, p) for n, p in model.named_parameters()]
    opt = torch.optim.AdamW([{"params": [p for n, p in params if not no_decay(n)], "weight_decay": WD},
                             {"params": [p for n, p in params if no_decay(n)], "weight_decay": 0.0}], lr=LR)
    sched = get_linear_schedule_with_warmup(opt, math.ceil(WARMUP * steps), steps)
    g = torch.Generator().manual_seed(0)
    model.train()
    losses, times, step = [], [], 0
    while step < steps:
        order = torch.randperm(len(rows), generator=g).tolist()
        for k in range(0, len(order), BATCH):
            if step == steps:
                break
            loss = model(**collate([rows[j] for j in order[k:k + BATCH]])).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            losses.append(loss.item())
            times.append(time.monotonic())
    return model, init, losses, times


def loop_seconds(times, steps):
    return (times[-1] - times[0]) * steps / (steps - 1)


def main():
    os.makedirs(WORK, exist_ok=True)
    train, held = corpus()
    train_txt, held_txt = os.path.join(WORK, "train.txt"), os.path.join(WORK, "heldout.txt")
    write_corpus(train, train_txt)
    write_corpus(held, held_txt)
    tok_dir = os.path.join(WORK, "tokenizer")
    subprocess.run([BIN, "train-tokenizer", "--data", train_txt, "--vocab-size", str(VOCAB), "--out", tok_dir],
                   check=True, stdout=subprocess.DEVNULL)
    tok = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    assert len(tok) <= VOCAB, len(tok)
    special = {t: tok.convert_tokens_to_ids(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]}
    enc = lambda docs: [[tok(s, add_special_tokens=False)["input_ids"] for s in d] for d in docs]
    train_ids, held_ids = enc(train), enc(held)
    stats = lambda docs, ids: dict(documents=len(docs), sentences=sum(map(len, docs)),
                                   characters=sum(len(s) for d in docs for s in d),
                                   tokens=sum(len(s) for d in ids for s in d))
    info = dict(corpus=dict(source=f"docstrings of the Python {sys.version.split()[0]} standard library ({STDLIB})",
                            train=stats(train, train_ids), heldout=stats(held, held_ids)),
                config=CONFIG, recipe=dict(steps=STEPS, batch=BATCH, max_length=MAX_LEN, lr=LR, warmup=WARMUP,
                                           weight_decay=WD, mlm_probability=MLM_P, short_seq_prob=SHORT_P,
                                           torch_threads=THREADS))
    log(json.dumps(info["corpus"]))
    eval_rows = [r for s in (101, 102, 103, 104, 105) for r in make_rows(held_ids, special, VOCAB, s)]
    train_rows = make_rows(train_ids, special, VOCAB, 0)
    info["rows"] = rows_info(train_rows, eval_rows)
    log(json.dumps(info["rows"]))
    cfg_path = os.path.join(WORK, "config.json")
    json.dump(CONFIG, open(cfg_path, "w"), indent=1)
    res = {"frequency baseline": frequency_baseline(train_ids, eval_rows, set(special.values()))}

    # bertgpu's init: a 1-step run's only step is its warm-up's first, at learning rate 0 (0/1 of --lr), so the
    # drawn weights come out unchanged.
    run_bertgpu(train_txt, tok_dir, cfg_path, os.path.join(WORK, "bertgpu-init"), 1)
    res["bertgpu init (step 0)"] = evaluate(BertForPreTraining.from_pretrained(os.path.join(WORK, "bertgpu-init")), eval_rows)

    b_losses, b_times, b_total, b_other = run_bertgpu(train_txt, tok_dir, cfg_path, os.path.join(WORK, "bertgpu"), STEPS)
    b_loop = loop_seconds(b_times, STEPS)
    log(f"bertgpu: {b_loop:.1f} s loop, {b_total:.1f} s process")
    model, init, t_losses, t_times = run_torch(train_rows, STEPS)
    t_loop = loop_seconds(t_times, STEPS)
    log(f"torch: {t_loop:.1f} s loop")
    res["PyTorch"] = evaluate(model, eval_rows)
    model.load_state_dict(init)
    res["PyTorch init (step 0)"] = evaluate(model, eval_rows)
    res["bertgpu"] = evaluate(BertForPreTraining.from_pretrained(os.path.join(WORK, "bertgpu")), eval_rows)
    nominal = BATCH * MAX_LEN * STEPS
    info["speed"] = {"bertgpu": dict(seconds=b_loop, tokens_per_s=nominal / b_loop, process_seconds=b_total),
                     "PyTorch": dict(seconds=t_loop, tokens_per_s=nominal / t_loop),
                     "ratio_bertgpu_over_torch": (nominal / b_loop) / (nominal / t_loop)}
    info["eval"] = res
    info["mlm_accuracy_difference_points"] = 100 * (res["bertgpu"]["mlm_accuracy"] - res["PyTorch"]["mlm_accuracy"])
    info["losses"] = {"bertgpu": b_losses, "PyTorch": t_losses}
    info["bertgpu_stderr_other"] = b_other[-10:]
    json.dump(info, open(os.path.join(WORK, "results.json"), "w"), indent=1)

    log_curves(b_losses, t_losses)
    log("| model | MLM accuracy | MLM loss | NSP accuracy |")
    for k in ["frequency baseline", "bertgpu init (step 0)", "PyTorch init (step 0)", "PyTorch", "bertgpu"]:
        r = res[k]
        log(f"| {k} | {100 * r['mlm_accuracy']:.2f}% | {r['mlm_loss']:.3f} | {100 * r['nsp_accuracy']:.2f}% |")
    log(f"bertgpu - PyTorch MLM accuracy: {info['mlm_accuracy_difference_points']:+.2f} points "
        f"({res['PyTorch']['masked']} masked positions)")
    sp = info["speed"]
    log(f"speed: bertgpu {b_loop:.1f} s {sp['bertgpu']['tokens_per_s']:.0f} tok/s; PyTorch {t_loop:.1f} s "
        f"{sp['PyTorch']['tokens_per_s']:.0f} tok/s; ratio {sp['ratio_bertgpu_over_torch']:.2f}")


if __name__ == "__main__":
    main()
