#!/usr/bin/env bash
# Runs sweeps on every GPU of this machine from a relocatable bundle (deploy/bundle.sh --tar):
# unpacks it, starts ablated and one ablate-worker for all GPUs (both from the bundle, with an empty
# environment apart from PATH/HOME, so nothing of the build machine is used), submits every SPEC at
# once (the worker runs one trial per GPU, across sweeps, back to back), waits for all of them, and
# exports per sweep into OUT/results/:
#   NAME.txt / NAME.csv     the ablation table (ablate results: mean ± std over seeds)
#   NAME.trials.csv         the trial list (ablate status)
#   NAME.export.csv         one row per trial: axes, seed, state, build and every final metric
#                           (ablate export; scripts/results_figures.py reads it as NAME_trials.csv)
#   NAME.curves.csv         loss and val_loss of every trial, with its axes and seed (ablate query)
#   NAME.diag.csv           the attention diagnostics attn.<layer>.<tensor>.<stat> of every trial
#   NAME.md, NAME.*.png     markdown tables and plots (scripts/plot_results.py; PNGs need matplotlib)
#   utilization.md          GPU busy share (attempt GPU-seconds / (wall time x GPUs)) and the mean of
#                           nvidia-smi's utilization samples over the same window (nvidia_smi.csv)
#
#   scripts/gpu_sweeps.sh [--bundle ablate-0.1.0-linux-x86_64.tar.gz] --out OUT SPEC.yaml [SPEC.yaml...]
#     --bundle F      a tarball or unpacked bundle; without it, set up, build and bundle here first
#     --metric NAME   results metric (default final_val_loss)
#     --deadline S    cancel the trials still unfinished S seconds after the submission (default: none)
#     --compare AXIS  also NAME.compare.txt: `ablate compare NAME --factor AXIS` (paired by seed,
#                     with 95% intervals) for each sweep that has AXIS
#     --data-root D   let the worker read corpora under D (repeatable): specs whose data.corpus is
#                     a file or glob, e.g. the BPE mix's shards (docs/data.md)
#     --no-plots      skip scripts/plot_results.py
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/bundle_cluster.sh"
bundle="" out="" metric="final_val_loss" deadline=0 plots=1 compare=""
specs=() data_roots=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; }
while (($#)); do
  case "$1" in
    --bundle) bundle="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --metric) metric="$2"; shift 2 ;;
    --deadline) deadline="$2"; shift 2 ;;
    --compare) compare="$2"; shift 2 ;;
    --data-root) data_roots+=(--data-root "$2"); shift 2 ;;
    --no-plots) plots=0; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "gpu_sweeps: unknown option $1" >&2; exit 2 ;;
    *) specs+=("$1"); shift ;;
  esac
done
[[ -n "$out" && ${#specs[@]} -gt 0 ]] || { usage; exit 2; }
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "gpu_sweeps: --deadline wants whole seconds, got '$deadline'" >&2; exit 2; }
[[ "$metric" =~ ^[A-Za-z0-9_.]+$ ]] || { echo "gpu_sweeps: bad --metric '$metric'" >&2; exit 2; }
[[ -z "$compare" || "$compare" =~ ^[A-Za-z0-9_.]+$ ]] || { echo "gpu_sweeps: bad --compare '$compare'" >&2; exit 2; }
names=()
for s in "${specs[@]}"; do
  [[ -f "$s" ]] || { echo "gpu_sweeps: no such spec: $s" >&2; exit 2; }
  # The name is interpolated into SQL below: only the characters a sweep name may have.
  name="$(sed -n 's/^name:[[:space:]]*\([A-Za-z0-9_.-]*\)[[:space:]]*$/\1/p' "$s" | head -1)"
  [[ -n "$name" ]] || { echo "gpu_sweeps: $s has no plain 'name:' line ([A-Za-z0-9_.-]+)" >&2; exit 2; }
  names+=("$name")
done

mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [[ -z "$bundle" ]]; then
  # No bundle given: this machine builds one (set-up, CUDA when nvcc is found, the tarball).
  "$here/setup.sh"
  "$here/build.sh"
  bundle="$(bash "$here/../deploy/bundle.sh" --tar "${ABLATE_BUILD_DIR:-$here/../build}" "$out/dist" | tail -n 1)"
fi
root="$(bundle_root "$bundle" "$out")"

clean_env=(env -i "PATH=/usr/bin:/bin" "HOME=$out")
res="$out/results"
mkdir -p "$out/worker" "$res"
rm -f "$res/utilization.md"
start_coordinator

"${clean_env[@]}" "$root/bin/ablate-worker" --coordinator "$addr" --token-file "$coord/token" \
  --gpus all --work-dir "$out/worker" --metrics 127.0.0.1:0 "${data_roots[@]}" >>"$out/worker.log" 2>&1 &
worker_pid=$!

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader -l 1 \
    >"$out/nvidia_smi.csv" 2>/dev/null &
  smi_pid=$!
fi

# Submit everything first, so that no GPU waits for the slowest trial of one sweep before the next.
start=$(date +%s.%N)
for i in "${!specs[@]}"; do
  echo "== ${names[$i]} (${specs[$i]})"
  "${cli[@]}" submit "${specs[$i]}"
done
sweeps_sql="$(printf "'%s'," "${names[@]}")"
sweeps_sql="(${sweeps_sql%,})"
unfinished_sql="SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id
  WHERE s.name IN $sweeps_sql AND t.state IN ('queued', 'running')"
last_report=0
while :; do
  left="$(q1 "$unfinished_sql")"
  [[ "$left" == 0 ]] && break
  now=$(date +%s.%N)
  elapsed=$(python3 -c "import sys; print(int(float(sys.argv[1]) - float(sys.argv[2])))" "$now" "$start")
  if ((elapsed - last_report >= 15)); then
    echo "gpu_sweeps: ${elapsed}s, $left trials unfinished"
    last_report=$elapsed
  fi
  if ((deadline > 0 && elapsed >= deadline)); then
    echo "gpu_sweeps: deadline of ${deadline}s reached: canceling $left unfinished trials" >&2
    for name in "${names[@]}"; do "${cli[@]}" cancel "$name" || true; done
    deadline=0
  fi
  sleep 1
done
end=$(date +%s.%N)
gpus=$(q1 "SELECT json_array_length(gpus_json) FROM workers LIMIT 1")

echo "| sweep | trials (succeeded/all) | attempt GPU-s | first start → last end | GPUs busy with it (mean over that span) |" \
  >"$res/utilization.md"
echo "|---|---|---|---|---|" >>"$res/utilization.md"
for name in "${names[@]}"; do
  "${cli[@]}" results "$name" --metric "$metric" | tee "$res/$name.txt"
  "${cli[@]}" results "$name" --metric "$metric" --format csv >"$res/$name.csv"
  "${cli[@]}" status "$name" --format csv >"$res/$name.trials.csv" || true
  "${cli[@]}" export "$name" >"$res/$name.export.csv" || true
  if [[ -n "$compare" ]]; then
    "${cli[@]}" compare "$name" --factor "$compare" --metric "$metric" >"$res/$name.compare.txt" 2>&1 || true
  fi
  # Axis columns for the curve and diagnostics CSVs, from the sweep's own axis list.
  axes_csv="$(q "SELECT axes_json FROM sweeps WHERE name = '$name'")"
  cols=""
  has_seed=0
  while IFS= read -r axis; do
    [[ -z "$axis" ]] && continue
    [[ "$axis" =~ ^[A-Za-z0-9_.]+$ ]] || { echo "gpu_sweeps: odd axis name '$axis' in $name" >&2; exit 1; }
    [[ "$axis" == seed ]] && has_seed=1
    cols+="json_extract(t.axes_json, '\$.\"$axis\"') AS \"$axis\", "
  done < <(python3 -c 'import csv, io, json, sys
rows = list(csv.reader(io.StringIO(sys.argv[1])))
print("\n".join(json.loads(rows[1][0])))' "$axes_csv")
  ((has_seed)) || cols+="json_extract(t.config_json, '\$.seed') AS seed, "
  series() {  # $1: the metric-name condition; the latest attempt wins a step, as in GetSeries
    q "SELECT t.id AS trial, t.state, $cols m.name AS metric, m.step, m.value
       FROM metrics m JOIN trials t ON t.id = m.trial_id JOIN sweeps s ON s.id = t.sweep_id
       WHERE s.name = '$name' AND ($1)
         AND m.attempt = (SELECT max(attempt) FROM metrics WHERE trial_id = m.trial_id
                          AND name = m.name AND step = m.step)
       ORDER BY t.id, m.name, m.step"
  }
  series "m.name IN ('loss', 'val_loss')" >"$res/$name.curves.csv"
  series "m.name LIKE 'attn.%'" >"$res/$name.diag.csv"
  python3 - "$name" "$(q1 "SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id
      WHERE s.name = '$name' AND t.state = 'succeeded'")" "$(q1 "SELECT count(*) FROM trials t
      JOIN sweeps s ON s.id = t.sweep_id WHERE s.name = '$name'")" "$(q1 "SELECT
      COALESCE(SUM((a.ended_at - a.started_at) * json_array_length(a.gpus_json)), 0) || ',' ||
      COALESCE(MIN(a.started_at), 0) || ',' || COALESCE(MAX(a.ended_at), 0) FROM attempts a
      JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON s.id = t.sweep_id
      WHERE s.name = '$name' AND a.ended_at IS NOT NULL")" "${gpus:-0}" \
      <<'PY' >>"$res/utilization.md"
import sys
name, ok, total, agg, gpus = sys.argv[1:6]
busy, first, last = (float(x) for x in agg.strip('"').split(","))
span = last - first
# Sweeps run side by side, so a sweep's own share of the machine says little; the whole run's
# busy share follows below.
mean_gpus = busy / span if span > 0 else float("nan")
print(f"| {name} | {ok}/{total} | {busy:.1f} | {span:.1f} s | {mean_gpus:.2f} of {gpus} |")
PY
done

# The whole run: every sweep's attempts against wall time x GPUs, and nvidia-smi over the same window.
busy_all="$(q1 "SELECT COALESCE(SUM((a.ended_at - a.started_at) * json_array_length(a.gpus_json)), 0)
  FROM attempts a JOIN trials t ON t.id = a.trial_id JOIN sweeps s ON s.id = t.sweep_id
  WHERE s.name IN $sweeps_sql AND a.ended_at IS NOT NULL")"
smi="$out/nvidia_smi.csv"
[[ -f "$smi" ]] || smi=""
python3 - "$start" "$end" "${gpus:-0}" "$busy_all" "$smi" <<'PY' | tee -a "$res/utilization.md"
import datetime, sys
start, end, gpus, busy, smi = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3] or 0), float(sys.argv[4] or 0), sys.argv[5]
wall = end - start
share = busy / (wall * gpus) if wall > 0 and gpus > 0 else float("nan")
print(f"\nAll sweeps: {wall:.1f} s of wall time (submission to the last trial's end) on {gpus} GPU(s); "
      f"attempts held GPUs for {busy:.1f} GPU-s: **busy share {100 * share:.1f}%**.")
if smi:
    util = {}
    for line in open(smi):
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            if start <= t <= end:
                util.setdefault(f[1], []).append(float(f[2].split()[0]))
        except (ValueError, IndexError):
            continue
    if util:
        per = ", ".join(f"GPU {g}: {sum(v) / len(v):.1f}% ({len(v)} samples)" for g, v in sorted(util.items()))
        allv = [x for v in util.values() for x in v]
        print(f"nvidia-smi utilization.gpu over the same window (1 s samples): mean {sum(allv) / len(allv):.1f}% ({per}).")
PY

if ((plots)); then
  # The PNGs need matplotlib: Debian's python3-matplotlib (setup.sh) lives in /usr/bin/python3, which
  # another python3 earlier in PATH (pyenv, conda) does not see.
  py=python3
  python3 -c 'import matplotlib' 2>/dev/null || ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null ||
    py=/usr/bin/python3
  "$py" "$here/plot_results.py" "$res" "${names[@]}" || echo "gpu_sweeps: plot_results.py failed" >&2
fi
echo "results in $res"
