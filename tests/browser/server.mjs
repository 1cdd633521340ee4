// The browser tests serve the repository (the built package, the test page) and the models with the demo's server.
export { serve } from "../../www/serve.mjs";
