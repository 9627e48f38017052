// The toy cache engine (toy-cache.js) served over kvspec's adapter protocol:
//   python3 -m kvspec.conform --adapter-command 'node kit/examples/toy.mjs' corpus/traces/*.trace
import { serve } from "../index.js";
import { ToyAdapter } from "./toy-cache.js";

serve(new ToyAdapter());
