// trainTokenizer: a WordPiece vocabulary from a corpus; no model.

import { pickBuild } from "./builds.js";
import { checkOptions, flags, positiveInt } from "./options.js";
import { getRuntime, guard } from "./runtime.js";
import { texts } from "./text.js";

const TOKENIZER_OPTIONS = ["vocabSize", "minFrequency", "lowercase"];

/**
 * Trains a BERT WordPiece vocabulary on `texts` (strings) as Python's `BertWordPieceTokenizer.train_from_iterator`
 * does; no model needed. Options: `vocabSize` (30000), `minFrequency` (2), `lowercase` (true). Resolves to the
 * tokenizer files of a Hugging Face folder, `{ "tokenizer.json", "vocab.txt", "tokenizer_config.json",
 * "special_tokens_map.json" }` as Uint8Arrays, which transformers' `from_pretrained` loads.
 */
export async function trainTokenizer(corpus, options = {}) {
  const method = "trainTokenizer";
  const { list } = texts(corpus, method, "texts");
  const opts = checkOptions(options, TOKENIZER_OPTIONS, method);
  const rustOptions = {};
  if (opts.vocabSize != null) rustOptions.vocabSize = positiveInt(opts.vocabSize, method, "vocabSize");
  if (opts.minFrequency != null) {
    if (!Number.isInteger(opts.minFrequency) || opts.minFrequency < 0) {
      throw new TypeError(`${method}: minFrequency must be a non-negative integer`);
    }
    rustOptions.minFrequency = opts.minFrequency;
  }
  if (opts.lowercase != null) {
    flags(method, opts, ["lowercase"]);
    rustOptions.lowercase = opts.lowercase;
  }
  // The same runtime Bert.load starts (or has started) for this engine's build; no model, no device.
  const rt = await getRuntime(pickBuild("auto"), undefined);
  return guard(rt, () => rt.glue.trainTokenizer(list, rustOptions));
}
