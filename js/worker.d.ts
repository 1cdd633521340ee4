// "bertgpu/worker": the same API as "bertgpu", the model running in dedicated Web Workers.
import { Bert as MainBert, type LoadOptions, type ModelSource } from "./index.js";
export type {
  Device, Progress, ModelSource, ModelBytes, WasmSource, LoadOptions, Tokenized, EmbedOptions, Precision, SparseOptions,
  SparseVector, TokenVectorOptions, TokenVectors, RankedDocument,
  ReplacedToken, TrainExample, TrainOptions, EpochProgress, TrainReport, FineTuneExample, FineTuneStep, FineTuneEpoch,
  FineTuneOptions, FineTuneReport, FineTuneCheckpoint, FineTuneDeviceLost, CheckpointInfo, KernelTuning, PretrainStep,
  PretrainEpoch, PretrainOptions, PretrainReport,
} from "./index.js";

export declare class Bert extends MainBert {
  /** `workers` and `parallel` (see LoadOptions) apply here. */
  static load(source: ModelSource, options?: LoadOptions): Promise<Bert>;
  /** How many workers hold the model (1 on WebGPU, whatever was asked). */
  readonly workers: number;
  /** How the workers share a call: "data" (copies that take a part of its texts each, or one worker). */
  readonly parallel: "data";
}
