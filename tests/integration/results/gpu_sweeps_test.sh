#!/usr/bin/env bash
# scripts/gpu_sweeps.sh + scripts/plot_results.py end to end on the CPU: builds the bundle tarball
# from the build tree under test, runs two tiny CPU sweeps through the bundle's ablated, worker and
# CLI, and checks every export: the ablation tables (csv equal in content to the table), the curves
# and diagnostics CSVs, the markdown, the utilization line, and the PNGs when matplotlib is present.
#   gpu_sweeps_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1" build="$2"
tmp="$(mktemp -d /tmp/ablate_results_test.XXXXXX)"
trap 'rm -rf -- "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

bash "$src/deploy/bundle.sh" --tar "$build" "$tmp/dist" >"$tmp/bundle.log" 2>&1 ||
  fail "bundle: $(tail -5 "$tmp/bundle.log")"
tarball="$(ls "$tmp"/dist/*.tar.gz)"

for name in tiny_a tiny_b; do
  cat >"$tmp/$name.yaml" <<SPEC
name: $name
base:
  data:      {corpus: brown, val_fraction: 0.05, eval_batches: 2}
  model:     {seq_len: 32, layers: 2, d_model: 32, heads: 2}
  attention: {kind: sagebwd}
  optimizer: {lr: 0.01, lr_vector: 0.003}
  train:     {steps: 20, tokens_per_step: 256, micro_batch: 8, warmup: 2, eval_every: 10,
              diagnostics_every: 10, checkpoint_every: 10, threads: 1}
  device: cpu
grid:
  attention.kind: [fpa, sagebwd]
seeds: [0, 1]
resources: {gpus: 0}
SPEC
done
timeout 240 bash "$src/scripts/gpu_sweeps.sh" \
  --bundle "$tarball" --out "$tmp/out" "$tmp/tiny_a.yaml" "$tmp/tiny_b.yaml" >"$tmp/run.log" 2>&1 ||
  fail "gpu_sweeps.sh failed: $(tail -20 "$tmp/run.log")"

r="$tmp/out/results"
for name in tiny_a tiny_b; do
  for f in "$name.txt" "$name.csv" "$name.trials.csv" "$name.export.csv" "$name.curves.csv" \
           "$name.diag.csv" "$name.md"; do
    [[ -s "$r/$f" ]] || fail "missing or empty $f"
  done
  # 2 cells (fpa, sagebwd), each over 2 seeds.
  [[ "$(tail -n +2 "$r/$name.csv" | grep -c ',2,2,')" -eq 2 ]] || fail "$name.csv: $(cat "$r/$name.csv")"
  # One row per trial with its final validation loss (what scripts/results_figures.py reads).
  [[ "$(tail -n +2 "$r/$name.export.csv" | wc -l)" -eq 4 ]] || fail "$name.export.csv: $(cat "$r/$name.export.csv")"
  head -1 "$r/$name.export.csv" | grep -q 'final_val_loss' || fail "$name.export.csv has no final_val_loss"
  # 4 trials x 20 steps of loss.
  loss_rows="$(grep -c ',loss,' "$r/$name.curves.csv" || true)"
  [[ "$loss_rows" -eq 80 ]] || fail "$name.curves.csv has $loss_rows loss rows, expected 80"
  grep -q 'attn\.0\.dq\.rel_l2' "$r/$name.diag.csv" || fail "$name.diag.csv has no attn.0.dq.rel_l2"
  grep -q '±' "$r/$name.md" || fail "$name.md has no mean ± std table"
  if python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    ls "$r/$name".*.png >/dev/null 2>&1 || fail "matplotlib is installed but $name has no PNG"
  fi
done
grep -q 'tiny_a' "$r/utilization.md" || fail "utilization.md: $(cat "$r/utilization.md")"
echo "PASS"
