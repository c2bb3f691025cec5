"""Stage 3 of export: the build pipeline, a run directory (Contract 1) -> a model bundle (Contract 2).

- `build`: the steps of `attnserve-export build`, in order, in `BUNDLE.partial`;
- `int8_gate`: whether int8 becomes the CPU default; `requantize`: new int8 graphs and the gate again;
- `calibration`: the int8 variants' fixed activation scales; `v2`: the v2 decoders placed in a bundle;
- `explain`, `lexicon`, `context`, `add_variant`: the parts a bundle may carry, each addable to an existing one;
- `simplify_encoder`: a bundle's encoders rewritten by graphs' encoder rewrites, each proven on the parity
  corpus before it is written (bitwise, or the same greedy answers for the fused attention);
- `manifest`: the bundle's file names and bundle.json with every file's sha256 (no torch).
"""
