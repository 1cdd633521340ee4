// fineTune's and pretrain's run: hooks, checkpoints, the retry after a lost GPU device, the result loaded.

import { THREADED } from "./builds.js";
import { openCheckpointStore } from "./checkpoints.js";
import { instantiate } from "./runtime.js";

/** How many GPU device losses one checkpointed fineTune goes on after (each from its last checkpoint). */
const MAX_DEVICE_LOSSES = 3;

/**
 * fineTune's and pretrain's common part: the model's files, the hooks (progress, stop, pause), the checkpoint
 * store, the run (`train(model, files, hooks, saving)`: the module's call, which trains a copy) going on from its
 * last checkpoint on a new device after a GPU device loss, and on success its result (`config`, `weights`) loaded
 * as the model's new self. Until then nothing changes: an error, the signal or dispose() leave the model as it
 * was, and other calls made meanwhile reject. Resolves to the module's result.
 */
export async function trainModel(bert, method, m, { onProgress, signal, checkpoint, resume, gguf }, train) {
  const what = method === "pretrain" ? "pre-training" : "fine-tuning";
  signal?.throwIfAborted();
  const files = bert._tuned ?? await bert._files();
  // A .gguf trains LoRA adapters over its weights as stored (`gguf`: fineTune with `lora`).
  if (files.gguf && !gguf) {
    throw new Error(`${method}: this model was loaded from a .gguf; ${what} starts from a Hugging Face folder `
      + "(config.json, model.safetensors, the tokenizer files), whose config it exports"
      + (method === "fineTune" ? "; a .gguf fine-tunes LoRA adapters only (`lora`)" : ""));
  }
  signal?.throwIfAborted();
  const hooks = {
    onProgress: (p) => {
      try {
        onProgress?.(p);
      } catch (e) {
        console.warn(`${method}: onProgress threw`, e); // the user's callback must not stop training
      }
    },
    shouldStop: () => (signal?.aborted ? "aborted" : bert._disposed ? "disposed" : undefined),
    pause: () => new Promise((resolve) => setTimeout(resolve, 0)),
  };
  const saving = checkpoint == null ? null : {
    store: await openCheckpointStore(checkpoint.name), every: checkpoint.every, keep: checkpoint.keep,
    resume: resume === true,
  };
  let out;
  bert._training = method;
  try {
    // A GPU device lost part way through a checkpointed run: the run goes on from its last checkpoint on a new
    // device (or the CPU, if none comes), and onProgress says so.
    for (let losses = 0; ; losses++) {
      try {
        out = await train(m, files, hooks, saving);
        break;
      } catch (e) {
        const why = saving && losses < MAX_DEVICE_LOSSES && !signal?.aborted && !bert._disposed
          ? await bert._lostReason(e) : null;
        if (!why) throw e;
        m = await replaceLostDevice(bert, why);
        saving.resume = true;
        hooks.onProgress({ type: "deviceLost", reason: why, device: bert._device });
      }
    }
  } catch (e) {
    if (signal?.aborted) throw signal.reason ?? new DOMException(`${method} was aborted`, "AbortError");
    if (bert._disposed) throw new Error(`${method}: the model was disposed during ${what}`);
    throw e;
  } finally {
    bert._training = false;
  }
  // After a .gguf's LoRA: the merged folder (f32), its tokenizer the file's.
  const tuned = { config: out.config, tokenizer: out.tokenizer ?? files.tokenizer, vocab: files.vocab,
    tokenizerConfig: out.tokenizerConfig ?? files.tokenizerConfig, weights: out.weights };
  for (const k of Object.keys(tuned)) if (tuned[k] == null) delete tuned[k];
  const model = await instantiate(bert._rt, tuned, bert._device);
  const old = bert._model;
  bert._model = model;
  bert._tuned = tuned;
  // A head trained by trainHead was trained on the old encoder's features: it does not carry over.
  bert._headLabels = null;
  bert._headBytes = null;
  old.free();
  return out;
}

/**
 * A new model for a checkpointed fineTune whose GPU device was lost (`why`): on a new GPU device, or on the CPU if
 * none can be had. It becomes the Bert's model.
 */
async function replaceLostDevice(bert, why) {
  const files = bert._tuned ?? await bert._files();
  let model;
  try {
    model = await instantiate(bert._rt, files, "webgpu");
  } catch (e) {
    console.warn(`fineTune: the GPU device was lost (${why}) and a new one failed (${e.message}): going on on the CPU`);
    model = await instantiate(bert._rt, files, "cpu");
    bert._deviceReason = `the GPU device was lost (${why}) and a new one failed (${e.message})`;
  }
  const old = bert._model;
  bert._model = model;
  bert._device = model.device;
  if (bert._device !== "webgpu") bert._reloadFrom = null;
  old.free();
  if (bert._rt.build in THREADED && !bert._usesPool && bert._device === "cpu") {
    await bert._joinPool(); // now on the CPU: the threads it was loaded for
  }
  return model;
}
