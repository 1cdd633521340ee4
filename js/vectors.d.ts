// The types of the embedding tasks ("bertgpu" re-exports them): embed's options and encodings, sentence-transformers'
// description of a model, embedSparse's and embedTokens's options and results.

/** sentence-transformers' pooling modes. */
export type Pooling = "mean" | "cls" | "max" | "mean_sqrt_len" | "weightedmean" | "lasttoken";

/**
 * Each option left out is what the model's sentence-transformers files say (`Bert.sentenceTransformers`); a model
 * without them pools by "mean" and normalises.
 */
export interface EmbedOptions {
  /** How token vectors become one: overrides the model's Pooling module. */
  pooling?: Pooling;
  /** Scale every vector to unit length: overrides the model's Normalize module. */
  normalize?: boolean;
  /** One of the model's prompts (`Bert.prompts`), by name, put before every text; default its default prompt. */
  prompt?: string;
  /** Keep the first n values of each vector (Matryoshka), normalised again where normalising. */
  dimensions?: number;
  /** Texts per forward pass (default 32). */
  batchSize?: number;
  /**
   * The vectors' encoding, as sentence-transformers' `quantize_embeddings`: "int8" / "uint8" give one code per value
   * (Int8Array / Uint8Array) by `ranges`, "binary" / "ubinary" one bit per value packed eight to a byte.
   */
  precision?: Precision;
  /** int8/uint8: each dimension's [min, max] over a representative set of vectors; default the call's own vectors. */
  ranges?: [ArrayLike<number>, ArrayLike<number>];
}

/** `embed`'s encodings. */
export type Precision = "float32" | "int8" | "uint8" | "binary" | "ubinary";

/** `embedSparse`'s options. */
export interface SparseOptions {
  /** One of the model's prompts, by name. */
  prompt?: string;
  /** Keep only the n largest weights of each vector. */
  maxActiveDims?: number;
  /** Texts per forward pass (default 32). */
  batchSize?: number;
}

/** A SPLADE vector: the vocabulary entries with a weight above 0, indices ascending. */
export interface SparseVector {
  indices: Uint32Array;
  values: Float32Array;
}

/** `embedTokens`'s options. */
export interface TokenVectorOptions {
  /** One of the model's prompts, by name (its tokens are among the vectors). */
  prompt?: string;
  /** Scale each token's vector to unit length. */
  normalize?: boolean;
  /** Texts per forward pass (default 32). */
  batchSize?: number;
}

/** One text's per-token vectors, special tokens included. */
export interface TokenVectors {
  tokens: string[];
  ids: Uint32Array;
  /** [start, end) in UTF-16 code units of the text given; [0, 0] for special tokens and the prompt's. */
  offsets: Array<[number, number]>;
  vectors: Float32Array[];
}

/** One module after the encoder, as the model's files list it. */
export type SentenceModule =
  | { type: "pooling"; mode: Pooling; include_prompt: boolean }
  | { type: "dense"; path: string; in_features: number; out_features: number; bias: boolean;
      activation: "none" | "gelu" | "gelu_tanh" | "relu" | "tanh" }
  | { type: "normalize" }
  | { type: "splade"; log1p_relu: boolean };

/** sentence-transformers' description of a model (modules.json and the files beside it). */
export interface SentenceTransformersConfig {
  modules: SentenceModule[];
  max_seq_length: number | null;
  prompts: Record<string, string>;
  default_prompt_name: string | null;
}
