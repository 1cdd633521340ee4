// Types of the "bertgpu" entry (and, through worker.d.ts, of "bertgpu/worker").

export type {
  Pooling, EmbedOptions, Precision, SparseOptions, SparseVector, TokenVectorOptions, TokenVectors, SentenceModule,
  SentenceTransformersConfig,
} from "./vectors.js";
import type {
  Pooling, EmbedOptions, SparseOptions, SparseVector, TokenVectorOptions, TokenVectors, SentenceTransformersConfig,
} from "./vectors.js";

export type Device = "webgpu" | "cpu";

export interface Progress {
  /** File name: "config.json", "tokenizer.json", "model.safetensors", "model.gguf", ... */
  file: string;
  /** Bytes received so far. */
  loaded: number;
  /** Size from the server's Content-Length, or null when it did not say (or the body was compressed). */
  total: number | null;
  /** True when the file came from the cache. */
  cached?: boolean;
}

export type Bytes = ArrayBuffer | ArrayBufferView | string;

/** A model given as bytes or strings (config may also be the parsed object). */
export type ModelBytes =
  | {
      config: Bytes | Record<string, unknown>;
      /** tokenizer.json (or give `vocab`: the text of vocab.txt). */
      tokenizer?: Bytes;
      vocab?: Bytes;
      /** tokenizer_config.json (special tokens, lower-casing) when the tokenizer comes from vocab.txt. */
      tokenizerConfig?: Bytes;
      /** sentence-transformers' files by their path in the folder ("modules.json", "1_Pooling/config.json", ...). */
      sentence?: Record<string, Bytes>;
      /** model.safetensors, or pytorch_model.bin (its first bytes say which) */
      weights: Bytes;
    }
  | { gguf: Bytes };

/**
 * The base URL of a Hugging Face-style folder (config.json, tokenizer.json or vocab.txt, model.safetensors; where a
 * folder has no safetensors weights, its pytorch_model.bin, whose pickle is read as data and never run), a .gguf
 * URL, a Hugging Face repo id ("owner/name", fetched from the hub's resolve/main/ URLs), or the bytes.
 * Relative URLs must start with "./", "../" or "/" (otherwise "a/b" is read as a repo id). In Node.js also a local
 * path (absolute, or "./" / "../" against the working directory) of a folder or a .gguf file, and file: URLs.
 */
export type ModelSource = string | URL | ModelBytes;

/**
 * A compiled `WebAssembly.Module`. Named through `globalThis` because TypeScript declares the WebAssembly namespace
 * only in its DOM library: a Node.js project without it (`types: ["node"]`) gets `object` here instead of an error.
 */
export type CompiledWasm = typeof globalThis extends { WebAssembly: { Module: abstract new (...args: any[]) => infer M } }
  ? M : object;

/** Where the wasm module comes from: its URL, its bytes, the compiled module, or a fetch Response of it. */
export type WasmSource = string | URL | ArrayBuffer | ArrayBufferView | CompiledWasm | Response;

export interface LoadOptions {
  /**
   * A LoRA adapter as peft saves it, folded into the weights at load (`W + alpha/r·B·A`, as merge_and_unload):
   * `{ config, weights }` (adapter_config.json, adapter_model.safetensors) or the URL (Node.js: also the path) of the
   * folder holding them. Beside a Hugging Face folder only.
   */
  adapter?: string | URL | { config: string | ArrayBuffer | Uint8Array; weights: ArrayBuffer | Uint8Array };
  /**
   * "auto" (default): WebGPU on a hardware adapter whose output passes the load-time check (the encoder on a fixed
   * input against the CPU backend's), else the CPU, saying why in `bert.deviceReason`. "webgpu": any adapter; a load
   * whose check fails rejects, naming the adapter and the error. "cpu": the wasm CPU backend.
   */
  device?: "auto" | Device;
  onProgress?: (progress: Progress) => void;
  /**
   * Keep downloaded files so the next load works offline (default true): in the Cache API in browsers; in Node.js,
   * which has none, only with `cacheDir`.
   */
  cache?: boolean;
  /**
   * Node.js only: the folder where downloaded files are kept (created if missing; one file per URL, named by the
   * SHA-256 of the URL). Without it Node keeps nothing. Local paths and file: URLs are read in place, never cached.
   */
  cacheDir?: string;
  /**
   * Pinned SHA-256 digests (64 hex digits) by file name, e.g. `{ "model.safetensors": "9f86d0..." }` (names as in the
   * folder: config.json, tokenizer_config.json, tokenizer.json, vocab.txt, model.safetensors, or for a folder saved
   * in shards model.safetensors.index.json and the shards it names, or for a folder without safetensors weights
   * pytorch_model.bin, or pytorch_model.bin.index.json and its shards, and sentence-transformers' modules.json,
   * sentence_bert_config.json, config_sentence_transformers.json and the modules' files such as
   * "2_Dense/model.safetensors" or "2_Dense/pytorch_model.bin"; for a .gguf URL its file name). A pin on a weights
   * file says which one the folder must have. Each pinned file is checked before it is used or
   * cached, a cached copy too (one that does not match is downloaded again); a mismatch rejects the load. A pinned
   * file must exist. Needs a secure context (https or
   * localhost) for `crypto.subtle`. Not for bytes sources.
   */
  sha256?: Record<string, string>;
  /**
   * The largest file accepted, in bytes (default 2 GiB): checked against Content-Length before downloading, as the
   * bytes arrive, and for cached files. For a folder saved in shards, each shard (the index: at most 8 MiB).
   */
  maxBytes?: number;
  /**
   * Which wasm build runs the model: "auto" (default) takes "relaxed" where the engine implements WebAssembly
   * relaxed SIMD (Chrome/Edge 114+), else "simd128". The two give the same results bit for bit. Relaxed SIMD runs
   * the CPU backend's Q8_0 kernel (.gguf q8_0 models) about 1.16–1.19× as fast as SIMD128 on x86 without AVX-VNNI
   * (BENCHMARKS.md); where the engine has a byte dot product (AVX-VNNI, ARM) it takes one instruction per 16
   * multiply-adds (not measured). Only the chosen build is downloaded.
   */
  simd?: "auto" | "relaxed" | "simd128";
  /**
   * The wasm module, handed over by the caller instead of loaded from the package's own files (for a Content-Security-
   * Policy, an extension, a bundler that does not copy them, or a CDN). One value is the SIMD128 build
   * (wasm/bertgpu_bg.wasm), or the relaxed one (wasm-relaxed/bertgpu_bg.wasm) with `simd: "relaxed"`; an object
   * gives either or both, and "auto" picks among them. Used when a page (or worker) first loads that build; later
   * loads share the running instance.
   */
  wasm?: WasmSource | { relaxed?: WasmSource; simd128?: WasmSource; threads?: WasmSource; threadsRelaxed?: WasmSource };
  /**
   * The threads the CPU backend runs on, the calling thread included (1 to 64). Default: the cores the browser
   * reports (navigator.hardwareConcurrency), at most 8. More than 1 loads a threaded build (a pool of Web Workers
   * over one shared memory, one copy of the model: wasm-threads-relaxed/ where relaxed SIMD would be chosen, else
   * wasm-threads/) where the page is cross-origin isolated (`crossOriginIsolated` and SharedArrayBuffer: the
   * headers Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp); elsewhere,
   * with 1, in Node.js, or when the `wasm` object gives no such build (`threadsRelaxed`, `threads`), the
   * single-threaded builds run, with no error (see Bert.threads and Bert.threadsReason). One pool serves every model
   * of the page (or worker): a load asking for another count restarts it, and the last model's dispose() ends it.
   */
  threads?: number;
  /**
   * How the GPU stores activations between kernels. "f16" halves their memory and the bytes the kernels move for
   * them (arithmetic stays f32), within about 2e-3 of PyTorch's hidden states (cosine ≥ 0.99999 per sentence:
   * BENCHMARKS.md, "f16 activations"); checked at load against the CPU like every kernel, and refused for training
   * (fineTune, trainHead, pretrain). WebGPU only: the CPU computes in f32 (Bert.activations says which runs).
   * Default "f32".
   */
  activations?: "f32" | "f16";
  /**
   * WebGPU only: also keep a CPU copy of the model for the short calls the CPU finishes sooner than the GPU (whose
   * calls cost a roughly fixed time to submit and read back). After the load, the CPU and the GPU are timed on this
   * model at growing lengths (about a second at the first such load on an adapter, whose result is cached for the
   * adapter, driver and model shape; the first calls wait for it), and calls of at most the longest length the CPU
   * won run on the copy (Bert.crossover, Bert.lastCallDevice). The copy is a second set of the weights in
   * wasm memory, kept only where the CPU wins at some length. Results are the CPU backend's or the GPU's, each checked
   * against PyTorch. Default false.
   */
  crossover?: boolean;
  /**
   * "bertgpu/worker" only: on the CPU backend, the number of workers (each a copy of the model on its own core)
   * that share calls over many texts; "auto" takes the cores the browser reports, at most 4. Default 1.
   */
  workers?: number | "auto";
  /**
   * "bertgpu/worker" only, with `workers` > 1: how the workers share a call. "data" (the default and the only
   * value): each holds a copy of the model and takes a part of the texts. ("tensor", a part of every layer in each
   * worker, was retired: on a cross-origin isolated page `threads` runs one model on every core, as fast or faster.)
   */
  parallel?: "data";
}

export interface Tokenized {
  input_ids: number[];
  token_type_ids: number[];
  tokens: string[];
  /**
   * Whether the text (or pair) was cut to the model's `max_position_embeddings` tokens; `embed` and every task cut
   * the same way, so a long text's vector is the vector of its beginning.
   */
  truncated: boolean;
}

/** One candidate for a mask (a text with several masks gives one list per mask). */
export interface FillMaskResult {
  score: number;
  token: number;
  token_str: string;
  sequence: string;
}

export interface LabelScore {
  label: string;
  score: number;
}

/** `entity` and `index` with aggregation "none"; `entity_group` with "simple". Offsets index the JS string. */
export interface TokenEntity {
  entity?: string;
  entity_group?: string;
  score: number;
  index?: number;
  word: string;
  start: number;
  end: number;
}

export interface Answer {
  answer: string;
  score: number;
  start: number;
  end: number;
}

/** Options of `zeroShot`. */
export interface ZeroShotOptions {
  /** The hypothesis, with `{}` where the label goes (default "This example is {}."). */
  template?: string;
  /**
   * Score each label on its own: the softmax of its (contradiction, entailment) logits, so several labels can be
   * likely. Default false: one softmax of the entailment logits over the labels (scores sum to 1). With one label the
   * multi-label score is given either way, as the pipeline does.
   */
  multiLabel?: boolean;
}

/** One document of a reranking: its index in the input, the cross-encoder's relevance logit, and its text. */
export interface RankedDocument {
  index: number;
  score: number;
  document: string;
}

/** One token of ELECTRA's replaced-token detection: `score` is the probability that it was replaced. */
export interface ReplacedToken {
  index: number;
  token: string;
  start: number;
  end: number;
  score: number;
}

export interface TrainExample {
  text: string;
  label: string;
}

/** One epoch of `trainHead`: mean cross-entropy and accuracy on the training and the validation examples. */
export interface EpochProgress {
  epoch: number;
  loss: number;
  accuracy: number;
  /** null without a validation split. */
  valLoss: number | null;
  valAccuracy: number | null;
}

export interface TrainOptions {
  /** The label set in class order (default: the examples' labels in order of first appearance). */
  labels?: string[];
  /** Default 20. */
  epochs?: number;
  /** AdamW's learning rate (default 1e-3). */
  learningRate?: number;
  /** Default 16. */
  batchSize?: number;
  /** AdamW's decoupled weight decay (default 0.01). */
  weightDecay?: number;
  /** Fraction held out for early stopping, in [0, 1) (default 0.1). */
  validationSplit?: number;
  /** The shuffle, split and initialisation seed (default 0): the same seed gives the same head. */
  seed?: number;
  /** One hidden layer of this width; default none (a linear head). */
  hidden?: number;
  /** The hidden layer's activation (default "relu"). */
  activation?: "relu" | "gelu" | "gelu_tanh" | "tanh";
  /** Features: "mean" over the tokens (default) or "cls". */
  pooling?: "mean" | "cls";
  /** Epochs without a lower validation loss before stopping (default 5). */
  patience?: number;
  onProgress?: (epoch: EpochProgress) => void;
}

export interface TrainReport {
  labels: string[];
  /** The epoch whose weights were kept (the best validation loss, or the last). */
  bestEpoch: number;
  history: EpochProgress[];
}

/** fineTune's examples, by task. */
export type FineTuneExample =
  | { text: string; label: string; text_pair?: string }
  | { tokens: string[]; tags: string[] }
  | { question: string; context: string; answers: { text: string[]; answer_start: number[] } }
  | { anchor: string; positive: string };

/** After each optimiser step of `fineTune`. */
export interface FineTuneStep {
  type: "step";
  epoch: number;
  step: number;
  totalSteps: number;
  /** The step's mean training loss. */
  loss: number;
  learningRate: number;
}

/** After each epoch of `fineTune`: the mean loss of its steps, and on the validation examples the loss and the
 * accuracy (of classes, of labelled tokens, of answers whose start and end both match, or of anchors whose own
 * positive scores highest in their batch). */
export interface FineTuneEpoch {
  type: "epoch";
  epoch: number;
  trainLoss: number;
  /** null without a validation split. */
  valLoss: number | null;
  valAccuracy: number | null;
  /** "ner": entity-level F1 (seqeval's); "qa": SQuAD's F1 over the examples. */
  valF1?: number;
  /** "qa": SQuAD's exact match over the examples. */
  valExactMatch?: number;
}

/**
 * Before the first step of fineTune and pretrain: what training holds besides the model, in bytes, for the run's
 * batch size and longest example. `total` = parameters + gradients + optimizer + the larger of activations and update
 * (the update comes after the backward has freed the activations) + 1 MiB of small buffers. On the wasm CPU backend a
 * run whose total exceeds the 4 GiB address space is refused before it starts.
 */
export interface TrainingMemory {
  type: "memory";
  /** The trained copy of every parameter (f32). */
  parameters: number;
  /** One gradient per trained parameter. */
  gradients: number;
  /** AdamW's two moments per trained parameter. */
  optimizer: number;
  /** A batch's activations kept for the backward, and the backward's largest temporaries. */
  activations: number;
  /** The update's temporaries: the largest trained parameter's new value and moments. */
  update: number;
  total: number;
}

/** A checkpoint saved, the run resumed from one, or a damaged one skipped (`reason`) on the way to an intact one. */
export interface FineTuneCheckpoint {
  type: "checkpoint";
  checkpoint: "saved" | "resumed" | "skipped";
  name: string;
  /** Optimiser steps done when it was saved. */
  step: number;
  reason?: string;
  /** "saved": its size. */
  bytes?: number;
}

/**
 * A checkpointed run's GPU device was lost; the run goes on from its last checkpoint on `device` (a new GPU device,
 * or "cpu" if none could be had).
 */
export interface FineTuneDeviceLost {
  type: "deviceLost";
  reason: string;
  device: Device;
}

export interface CheckpointInfo {
  name: string;
  step: number;
  /** The run's optimiser steps in all (null if unreadable). */
  totalSteps: number | null;
  size: number;
  date: Date;
}

export interface FineTuneOptions {
  /** The examples' shape (default "classify"). */
  task?: "classify" | "pair" | "ner" | "qa" | "embed";
  /** Default 3. */
  epochs?: number;
  /** AdamW's peak learning rate (default 5e-5). */
  learningRate?: number;
  /** Examples per forward pass (default 16). */
  batchSize?: number;
  /** Forward passes whose mean gradient makes one step (default 1). */
  accumulate?: number;
  /** "all" (default), or how many of the top encoder layers train with the head (0: the head alone). */
  layers?: "all" | number;
  /** Fraction of the steps with a rising learning rate, then linear decay to 0 (default 0.1). */
  warmup?: number;
  /** AdamW's decoupled weight decay, not on biases and LayerNorm weights (default 0.01). */
  weightDecay?: number;
  /** Fraction of the examples held out and evaluated after each epoch, in [0, 1) (default 0.1). */
  validationSplit?: number;
  /** The shuffle, split, and new head's seed (default 0). */
  seed?: number;
  /** "qa": context tokens shared by consecutive windows of a long context (default 128). */
  docStride?: number;
  /** The checkpoint's dropout probabilities, seeded (default true); false trains without dropout. */
  dropout?: boolean;
  /**
   * Early stopping: stop after this many epochs without a lower validation loss, and end with the best epoch's
   * model (needs a validation split). Default: every epoch runs, and the last one's model is kept.
   */
  patience?: number;
  /**
   * Save the whole training state in this origin's private file system (OPFS; IndexedDB where OPFS cannot write
   * files) under `name`, every `every` steps
   * (default 100) and at each epoch's end, keeping the newest `keep` (default 2).
   */
  checkpoint?: { name: string; every?: number; keep?: number };
  /**
   * Continue run `checkpoint.name` from its newest intact checkpoint (a closed tab, a lost device), with the first
   * run's examples and options; it ends with the model the uninterrupted run would have made. With none yet, starts
   * afresh.
   */
  resume?: boolean;
  /**
   * LoRA adapters of rank `r` on a frozen encoder (scaled by alpha / r; alpha default 8) on the query and value
   * ("qv", the default) or every linear ("all"; "all-projection": and ALBERT's `embedding_hidden_mapping_in` or
   * ELECTRA's `embeddings_project`), and the head; the model then holds them merged, and
   * `exportModel({ format: "adapter" })` gives peft's files.
   */
  lora?: { r: number; alpha?: number; targets?: "qv" | "all" | "all-projection" };
  onProgress?: (progress: FineTuneStep | FineTuneEpoch | FineTuneCheckpoint | FineTuneDeviceLost | TrainingMemory) => void;
  /** Stops fine-tuning between two steps; the model is left as it was. */
  signal?: AbortSignal;
}

export interface FineTuneReport {
  /** The classifier's labels in class order ("classify", "pair", "ner"), else null. */
  labels: string[] | null;
  steps: FineTuneStep[];
  epochs: FineTuneEpoch[];
  /** The epoch whose model this is: the last, or with `patience` the one with the lowest validation loss. */
  bestEpoch: number;
}

/** After each optimiser step of `pretrain`: the loss, and each head's loss and accuracy over the step's rows. */
export interface PretrainStep {
  type: "step";
  epoch: number;
  step: number;
  totalSteps: number;
  /** `mlmLoss + nspLoss` (the masked LM's alone without NSP). */
  loss: number;
  /** The masked LM's mean cross-entropy over the selected tokens. */
  mlmLoss: number;
  /** The masked tokens predicted right, over all the step's masked tokens, in [0, 1]. */
  mlmAccuracy: number;
  /** Next-sentence prediction's loss and accuracy over the step's rows; null with `nsp: false`. */
  nspLoss: number | null;
  nspAccuracy: number | null;
  learningRate: number;
}

/** After each pass over the rows of `pretrain`: the mean loss of its steps, and on the held-out rows the loss
 * (MLM + NSP), the masked LM's accuracy and the next-sentence accuracy. */
export interface PretrainEpoch {
  type: "epoch";
  epoch: number;
  trainLoss: number;
  /** null without a validation split. */
  valLoss: number | null;
  /** The masked LM's accuracy. */
  valAccuracy: number | null;
  /** With NSP and a validation split. */
  valNspAccuracy?: number;
}

export interface PretrainOptions {
  /** Optimiser steps (default 1000); the rows are reshuffled each time they have all been seen. */
  steps?: number;
  /** Rows per step (default 16). */
  batchSize?: number;
  /** Tokens per row, special tokens included (default 128, or the model's positions if fewer). */
  maxLength?: number;
  /** Fraction of the tokens selected for the masked LM, in (0, 1] (default 0.15): 80% [MASK], 10% random, 10% kept. */
  mlmProbability?: number;
  /** Select whole words, every piece of a word together (default false). */
  wholeWordMask?: boolean;
  /** Mask the rows again every epoch, as RoBERTa does (default false: masked once for the run, as BERT's data). */
  dynamicMasking?: boolean;
  /** Sentence pairs and the next-sentence loss (default true; needs the checkpoint's NSP head); false: the masked LM
   * alone, on segments of one document. */
  nsp?: boolean;
  /** Fraction of the sentence pairs given a shorter random length, in [0, 1] (default 0.1). */
  shortSeqProb?: number;
  /** AdamW's peak learning rate (default 1e-4). */
  learningRate?: number;
  /** Fraction of the steps with a rising learning rate, then linear decay to 0 (default 0.1). */
  warmup?: number;
  /** AdamW's decoupled weight decay (default 0.01). */
  weightDecay?: number;
  /** Fraction of the rows held out and evaluated after each pass, in [0, 1) (default 0.05). */
  validationSplit?: number;
  /** The masking, pairs, shuffle and split's seed (default 0). */
  seed?: number;
  /** The checkpoint's dropout probabilities, seeded (default true); false trains without dropout. */
  dropout?: boolean;
  /** As FineTuneOptions.checkpoint. */
  checkpoint?: { name: string; every?: number; keep?: number };
  /** As FineTuneOptions.resume: the first run's corpus and options. */
  resume?: boolean;
  onProgress?: (progress: PretrainStep | PretrainEpoch | FineTuneCheckpoint | FineTuneDeviceLost | TrainingMemory) => void;
  /** Stops pre-training between two steps; the model is left as it was. */
  signal?: AbortSignal;
}

export interface PretrainReport {
  steps: PretrainStep[];
  epochs: PretrainEpoch[];
}

/** The GPU kernels chosen for a model on this adapter (`bert.tuning`). */
export interface KernelTuning {
  /** The knobs as text, e.g. "matmul=tiled:16x16,attention=vec4:64,row=128,elem=64". */
  tuning: string;
  source: "cached" | "calibrated" | "default";
  /** Why the defaults run (source "default"). */
  why?: string;
  /** A calibration's: one layer's stages with the defaults and with the choice, ms. */
  defaultMs?: number;
  chosenMs?: number;
  /** How long the calibration took, ms. */
  spentMs?: number;
  /** False when the budget ran out before every variant was timed (the rest kept their defaults). */
  complete?: boolean;
  /** How far the calibration got, as text: the tuning alone when complete, else "TUNING;stages=N" (N of 4 stages
   * done), what the next load on this adapter resumes from. */
  progress?: string;
  /** Every variant timed: [tuning, ms of its stage]. */
  timed?: Array<[string, number]>;
}

/** Bert.create's options: the seed of the initial weights, and where the model runs (as Bert.load). */
export interface CreateOptions {
  seed?: number;
  device?: LoadOptions["device"];
  simd?: LoadOptions["simd"];
  wasm?: LoadOptions["wasm"];
  threads?: LoadOptions["threads"];
}

export declare class Bert {
  static load(source: ModelSource, options?: LoadOptions): Promise<Bert>;
  /**
   * A BERT from scratch (BertForPreTraining, or BertForMaskedLM as config.architectures says), weights drawn as
   * transformers initialises them from `seed`, with a tokenizer's files (trainTokenizer's result): to pre-train.
   */
  static create(config: Record<string, unknown> | string, tokenizer: Partial<TokenizerFiles>,
    options?: CreateOptions): Promise<Bert>;
  /** fineTune's and pretrain's checkpoints kept by this origin: the newest of each run, most recent first. */
  static checkpoints(): Promise<CheckpointInfo[]>;
  /** Removes run `name`'s checkpoints; false if it had none. */
  static deleteCheckpoint(name: string): Promise<boolean>;
  /** Where the model runs. */
  readonly device: Device;
  /**
   * Why the model runs on the CPU although `device: "auto"` considered WebGPU: no WebGPU, a software fallback
   * adapter, or an adapter that failed the load-time check (which adapter, its error against the tolerance, where);
   * or a GPU device lost during fineTune with no new one. null on WebGPU, and when "cpu" was asked for.
   */
  readonly deviceReason: string | null;
  /** "f16" where LoadOptions.activations asked for it and WebGPU runs the model, else "f32". */
  readonly activations: "f32" | "f16";
  /** Which wasm build runs the model (see LoadOptions.simd). */
  readonly simd: "relaxed" | "simd128";
  /**
   * The threads the model's CPU work runs on, the calling thread included: 1 unless a threaded build runs the model on
   * the CPU (a model on WebGPU starts no thread pool, but for the CPU copy LoadOptions.crossover keeps).
   */
  readonly threads: number;
  /** Why the model runs on one thread although more were asked for (or by default), or null. */
  readonly threadsReason: string | null;
  /**
   * The GPU kernels this model runs: null on the CPU and while the first calibration after load is under way.
   * "cached": chosen on an earlier load on this adapter; "calibrated": chosen now; "default": a CPU adapter.
   */
  readonly tuning: KernelTuning | null;
  /**
   * With LoadOptions.crossover on WebGPU: calls of at most `maxTokens` tokens (all texts of the call, special tokens
   * included) run on the CPU copy, longer ones on the GPU (0: all on the GPU, no copy kept); `points` holds what was
   * timed, `[tokens, cpuMs, gpuMs]`; `text` says it in words; `source` says whether it was measured now, read from
   * the cache (measured at an earlier load on this adapter: no points), or failed (every call on the GPU). null
   * before it is measured and without the option.
   */
  readonly crossover: { maxTokens: number; points: Array<[number, number, number]>; text: string;
    source: "measured" | "cached" | "failed" } | null;
  /** Where the last call ran: "webgpu" or "cpu". It differs from `device` only with LoadOptions.crossover. */
  readonly lastCallDevice: Device;
  /** Times the GPU kernels' variants on this model again and switches to the fastest; null on the CPU. */
  calibrate(options?: { budgetMs?: number }): Promise<KernelTuning | null>;
  /** The model's prompts by name (config_sentence_transformers.json); empty where it has none. */
  readonly prompts: Record<string, string>;
  /** sentence-transformers' description of the model as its files give it, or null: what `embed` does by default. */
  readonly sentenceTransformers: SentenceTransformersConfig | null;
  /** The tasks this model can run besides tokenize and embed (the heads its checkpoint carries). */
  readonly tasks: Array<"fillMask" | "nextSentence" | "classify" | "rerank" | "tokenClassify" | "answer" | "replacedTokens"
    | "zeroShot">;
  tokenize(text: string, textPair?: string): Promise<Tokenized>;
  tokenize(text: string[], textPair?: string[]): Promise<Tokenized[]>;
  embed(text: string, options?: EmbedOptions & { precision?: "float32" }): Promise<Float32Array>;
  embed(texts: string[], options?: EmbedOptions & { precision?: "float32" }): Promise<Float32Array[]>;
  embed(text: string, options: EmbedOptions & { precision: "int8" | "binary" }): Promise<Int8Array>;
  embed(texts: string[], options: EmbedOptions & { precision: "int8" | "binary" }): Promise<Int8Array[]>;
  embed(text: string, options: EmbedOptions & { precision: "uint8" | "ubinary" }): Promise<Uint8Array>;
  embed(texts: string[], options: EmbedOptions & { precision: "uint8" | "ubinary" }): Promise<Uint8Array[]>;
  embedSparse(text: string, options?: SparseOptions): Promise<SparseVector>;
  embedSparse(texts: string[], options?: SparseOptions): Promise<SparseVector[]>;
  embedTokens(text: string, options?: TokenVectorOptions): Promise<TokenVectors>;
  embedTokens(texts: string[], options?: TokenVectorOptions): Promise<TokenVectors[]>;
  fillMask(text: string, options?: { topK?: number }): Promise<FillMaskResult[]>;
  fillMask(texts: string[], options?: { topK?: number }): Promise<FillMaskResult[][]>;
  classify(input: string | [string, string], options?: { topK?: number }): Promise<LabelScore[]>;
  classify(inputs: Array<string | [string, string]>, options?: { topK?: number }): Promise<LabelScore[][]>;
  nextSentence(a: string, b: string): Promise<{ is_next: number }>;
  nextSentence(a: string[], b: string[]): Promise<Array<{ is_next: number }>>;
  tokenClassify(text: string, options?: { aggregation?: "none" | "simple" }): Promise<TokenEntity[]>;
  tokenClassify(texts: string[], options?: { aggregation?: "none" | "simple" }): Promise<TokenEntity[][]>;
  answer(question: string, context: string): Promise<Answer>;
  /** ELECTRA's replaced-token detection (a discriminator checkpoint). */
  replacedTokens(text: string): Promise<ReplacedToken[]>;
  replacedTokens(texts: string[]): Promise<ReplacedToken[][]>;
  /** Reranks documents for a query with a cross-encoder: best first (all, or the `topK` best). */
  rerank(query: string, documents: string[], options?: { topK?: number }): Promise<RankedDocument[]>;
  /**
   * Zero-shot classification through an NLI checkpoint (a sequence classifier with an entailment label), as
   * transformers' zero-shot-classification pipeline: every label with its score, best first.
   */
  zeroShot(text: string, labels: string[], options?: ZeroShotOptions): Promise<LabelScore[]>;
  zeroShot(texts: string[], labels: string[], options?: ZeroShotOptions): Promise<LabelScore[][]>;
  /** Trains a classification head on the frozen encoder; `classify` then uses it. */
  trainHead(examples: TrainExample[], options?: TrainOptions): Promise<TrainReport>;
  /**
   * Fine-tunes the whole model (or its top layers and the head) on `examples`; the model is then the fine-tuned one.
   * Other calls made meanwhile reject; an error or `signal` leaves the model as it was.
   */
  fineTune(examples: FineTuneExample[], options?: FineTuneOptions): Promise<FineTuneReport>;
  /**
   * Pre-trains the model further (masked LM, and next-sentence prediction unless `nsp: false`) on `corpus`: a string
   * (one sentence or line per line, a blank line between documents) or an array of documents (each a string whose
   * lines are its sentences). The model is then the pre-trained one. Other calls made meanwhile reject; an error or
   * `signal` leaves the model as it was. BERT, or RoBERTa, XLM-R, CamemBERT, DistilBERT and ALBERT with their own
   * masked-LM head alone (no next-sentence head; `nsp` is BERT's).
   */
  pretrain(corpus: string | string[], options?: PretrainOptions): Promise<PretrainReport>;
  /**
   * The model's files as a Hugging Face folder (after fineTune or pretrain: the trained model, f32), or with
   * `{ format: "gguf", dtype }` one `model.gguf` quantized again (default "q8_0").
   */
  exportModel(options?: { format?: "folder" | "gguf" | "adapter"; dtype?: "f32" | "f16" | "q8_0" | "q4_0" }): Promise<Record<string, Uint8Array>>;
  /** The live trained head as safetensors bytes. */
  exportHead(): Promise<Uint8Array>;
  /** Makes a head file from `exportHead` the live head; resolves to its labels. */
  loadHead(bytes: ArrayBuffer | ArrayBufferView): Promise<string[]>;
  /** Drops the trained head (classify returns to the checkpoint's own classifier, if any). */
  clearHead(): Promise<void>;
  /** The live trained head's labels, or null. */
  readonly headLabels: string[] | null;
  /**
   * Frees the model; calls made before still finish, later calls reject. (If the GPU device is lost, e.g. after a
   * driver reset, the call that finds out rejects saying so and the next call loads the model again on a new
   * device, with its trained head.) Resolves once the model is freed and, where it was the last model on a thread
   * pool, the pool's workers have ended; nothing needs to wait for it.
   */
  dispose(): Promise<void>;
}

/** Deletes every model file bertgpu cached. Resolves to whether there was a cache. */
export declare function clearCache(): Promise<boolean>;

export interface TrainTokenizerOptions {
  /** Tokens in the vocabulary, the 5 special tokens included (default 30000). */
  vocabSize?: number;
  /** How often a pair of pieces must occur to become a token (default 2). */
  minFrequency?: number;
  /** Lower-case and strip accents, as an uncased BERT (default true). */
  lowercase?: boolean;
}

/** The files of a trained WordPiece tokenizer (a Hugging Face folder's tokenizer files). */
export interface TokenizerFiles {
  "tokenizer.json": Uint8Array;
  "vocab.txt": Uint8Array;
  "tokenizer_config.json": Uint8Array;
  "special_tokens_map.json": Uint8Array;
}

/** Trains a BERT WordPiece vocabulary on `texts`, as Python's BertWordPieceTokenizer does; needs no model. */
export declare function trainTokenizer(texts: string[], options?: TrainTokenizerOptions): Promise<TokenizerFiles>;
