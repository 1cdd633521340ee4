// "bertgpu/worker": the same API as "bertgpu", the model running in a dedicated Web Worker.
export { Bert } from "./index.js";
export type {
  Device, Progress, ModelSource, ModelBytes, LoadOptions, Tokenized, EmbedOptions, TrainExample, TrainOptions,
  EpochProgress, TrainReport,
} from "./index.js";
